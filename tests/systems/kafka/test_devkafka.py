"""``sparza dev-kafka start|stop|status|wipe``: a persistent local broker that a job config can point at: its topics
and its port survive a stop and a start, and ``wipe`` deletes the topics of a stopped broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sparza.config import Config
from sparza.systems import StreamSpec
from sparza.systems.kafka import KafkaSystemAdmin


def test_dev_kafka_cli_start_twice_status_stop(tmp_path: Path) -> None:
    env = {**os.environ, "SPARZA_HOME": str(tmp_path / "home")}
    cli = [sys.executable, "-m", "sparza.cli"]
    first = subprocess.run([*cli, "dev-kafka", "start"], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "dev kafka started" in first.stdout
    servers = re.search(r"bootstrap servers (127\.0\.0\.1:\d+)", first.stdout).group(1)  # type: ignore[union-attr]
    try:
        second = subprocess.run([*cli, "dev-kafka", "start"], env=env, capture_output=True, text=True, timeout=60)
        assert "already running" in second.stdout and servers in second.stdout
        admin = KafkaSystemAdmin("k", Config({"systems.k.consumer.bootstrap.servers": servers}))
        assert admin.create_stream(StreamSpec("fromcli", 2)) is True
        assert admin.partition_count("fromcli") == 2
        status = subprocess.run([*cli, "dev-kafka", "status"], env=env, capture_output=True, text=True, timeout=30)
        assert status.returncode == 0 and servers in status.stdout
    finally:
        stop = subprocess.run([*cli, "dev-kafka", "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert "dev kafka stopped" in stop.stdout
    status = subprocess.run([*cli, "dev-kafka", "status"], env=env, capture_output=True, text=True, timeout=30)
    assert status.returncode == 1 and "not running" in status.stdout
    # Started again: the same bootstrap servers and the topic is still there.
    again = subprocess.run([*cli, "dev-kafka", "start"], env=env, capture_output=True, text=True, timeout=60)
    try:
        assert again.returncode == 0 and "dev kafka started" in again.stdout and servers in again.stdout, again
        admin = KafkaSystemAdmin("k", Config({"systems.k.consumer.bootstrap.servers": servers}))
        assert admin.partition_count("fromcli") == 2
        refused = subprocess.run([*cli, "dev-kafka", "wipe"], env=env, capture_output=True, text=True, timeout=30)
        assert refused.returncode != 0 and "stop it first" in refused.stdout + refused.stderr
    finally:
        subprocess.run([*cli, "dev-kafka", "stop"], env=env, capture_output=True, text=True, timeout=60)
    wiped = subprocess.run([*cli, "dev-kafka", "wipe"], env=env, capture_output=True, text=True, timeout=30)
    assert wiped.returncode == 0 and "topics deleted" in wiped.stdout, wiped


def test_a_first_kafka_job_on_the_dev_broker_sees_every_record(tmp_path: Path) -> None:
    """One producer request of 100 records (linger.ms, no transaction) to a `sparza dev-kafka` topic:
    `sparza stream describe` and `stream tail`, which plan with the same end offsets as `sparza run`, must show
    all 100."""
    from confluent_kafka import Producer

    env = {**os.environ, "SPARZA_HOME": str(tmp_path / "home")}
    cli = [sys.executable, "-m", "sparza.cli"]
    started = subprocess.run([*cli, "dev-kafka", "start"], env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    servers = re.search(r"bootstrap servers (127\.0\.0\.1:\d+)", started.stdout).group(1)  # type: ignore[union-attr]
    try:
        job = tmp_path / "job.yaml"
        job.write_text(f"systems:\n  kafka:\n    samza.factory: kafka\n    consumer.bootstrap.servers: {servers}\n")
        created = subprocess.run([*cli, "stream", "create", "--config", str(job), "--system", "kafka", "events",
                                  "--partitions", "1"], env=env, capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        producer = Producer({"bootstrap.servers": servers, "linger.ms": 50})
        for i in range(100):
            producer.produce("events", value=b"%d" % i, key=b"k", partition=0)
        assert producer.flush(10) == 0
        described = subprocess.run([*cli, "stream", "describe", "--config", str(job), "--system", "kafka", "events"],
                                   env=env, capture_output=True, text=True, timeout=60)
        assert described.returncode == 0, described.stderr
        row = next(line for line in described.stdout.splitlines() if line.strip().startswith(("│ 0", "| 0", "0 ")))
        assert re.findall(r"\d+", row)[:4] == ["0", "0", "99", "100"], described.stdout
        tail = subprocess.run([*cli, "stream", "tail", "--config", str(job), "--system", "kafka", "events",
                               "-n", "200"], env=env, capture_output=True, text=True, timeout=60)
        assert tail.returncode == 0, tail.stderr
        values = [line.rsplit(": ", 1)[1] for line in tail.stdout.splitlines() if line.startswith("#0 ")]
        assert values == [str(i) for i in range(100)]
    finally:
        subprocess.run([*cli, "dev-kafka", "stop"], env=env, capture_output=True, text=True, timeout=60)
