"""``sparza demo --source``: bad values fail in one line before anything starts; the Kafka source's broker
is the one given, the running ``sparza dev-kafka`` broker, or one started for the run and stopped after it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from examples.wikipedia.config import demo_config
from examples.wikipedia.generate import generate_edits, generate_profiles
from examples.wikipedia.load import create_streams, edits_stream, load_edits, load_profiles, profiles_stream
from rich.console import Console

from sparza.cli.demo import _count_user_messages, kafka_brokers
from sparza.devservers.kafka import DevKafka
from sparza.host import pid_alive, port_open
from sparza.systems.kafka import KafkaSystemAdmin

SPARZA = str(Path(sys.executable).parent / "sparza")


def _console() -> Console:
    return Console(file=io.StringIO(), width=200)


def _sparza(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARZA_HOME": str(home)}
    return subprocess.run([SPARZA, *args], cwd=home, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_bad_source_is_a_one_line_error_before_anything_starts(tmp_path: Path) -> None:
    proc = _sparza(tmp_path, "demo", "--source", "kafak", "--events", "10")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--source must be one of delta, kafka, got 'kafak'" in lines[0]
    assert not (tmp_path / "demo").exists() and not (tmp_path / "azurite").exists()  # nothing ran


def test_kafka_brokers_for_a_delta_source_are_refused(tmp_path: Path) -> None:
    proc = _sparza(tmp_path, "demo", "--kafka-bootstrap-servers", "127.0.0.1:9", "--events", "10")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["config error: --kafka-bootstrap-servers is used only with "
                                                "--source kafka"]


def test_a_broker_started_for_the_run_is_stopped_after_it_also_on_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARZA_HOME", str(tmp_path / "home"))   # no dev broker runs there
    with kafka_brokers(None, tmp_path / "run", _console()) as servers:
        port = int(servers.rsplit(":", 1)[1])
        assert port_open(port)
    assert not port_open(port)
    with pytest.raises(RuntimeError, match="boom"), kafka_brokers(None, tmp_path / "run2", _console()) as servers:
        port = int(servers.rsplit(":", 1)[1])
        assert port_open(port)
        raise RuntimeError("boom")
    assert not port_open(port)


def test_the_running_dev_broker_is_reused_and_left_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARZA_HOME", str(tmp_path / "home"))
    dev = DevKafka.default()
    proc, started = dev.start()
    assert started
    try:
        console = _console()
        with kafka_brokers(None, tmp_path / "run", console) as servers:
            assert servers == proc.bootstrap_servers
        assert "dev broker running" in console.file.getvalue()  # type: ignore[attr-defined]
        assert proc.pid is not None and pid_alive(proc.pid) and port_open(proc.port)
        with kafka_brokers("10.0.0.1:9092", tmp_path / "run", _console()) as servers:
            assert servers == "10.0.0.1:9092"   # given brokers win, nothing is started
    finally:
        assert dev.stop()


def test_kafka_input_streams_are_loaded_in_transactions_and_counted_exactly(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    """The loader writes the edits and the CDC stream into topics named after the run; the profile topic is
    compacted; the end offsets the broker reports cover every record (a transaction's commit marker is a
    batch of its own, see docs/kafka.md), and counting the user messages gives exactly what was written."""
    config = demo_config(tmp_path, "t-load", "UseDevelopmentStorage=true", partitions=3, source="kafka",
                         kafka_bootstrap_servers=kafka_bootstrap)
    edits, profiles = generate_edits(700, seed=3), generate_profiles(seed=5)
    create_streams(config, 3)
    assert load_edits(config, edits) == 700
    assert load_profiles(config, profiles, timestamp=1) == len(profiles)
    assert str(edits_stream(config)) == "kafka.wikipedia-t-load-edits"
    assert str(profiles_stream(config)) == "kafka.wikipedia-t-load-profiles"
    admin = KafkaSystemAdmin("kafka", config)
    assert admin.partition_count("wikipedia-t-load-edits") == 3
    assert admin.partition_count("wikipedia-t-load-profiles") == 1
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, "wikipedia-t-load-profiles")
    described = admin.client.describe_configs([resource])[resource].result(timeout=30)
    assert described["cleanup.policy"].value == "compact"
    assert _count_user_messages(config, "kafka.wikipedia-t-load-edits") == 700
    assert _count_user_messages(config, "kafka.wikipedia-t-load-profiles") == len(profiles)
