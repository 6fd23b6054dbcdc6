"""``sparza dev-kafka start|stop|status``: a persistent local broker that a job config can point at."""

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
