"""``sparza stream create|load|describe|tail --system <kafka system>`` on topics of the test broker."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from sparza.cli import app
from sparza.streams import SystemStreamPartition
from sparza.systems.kafka import KafkaSystemConsumer, partition_for

runner = CliRunner()


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_create_load_describe_tail_on_kafka(work_dir: Path, kafka_bootstrap: str, unique_name: str) -> None:
    from sparza.config import Config

    values = {"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": kafka_bootstrap}
    config_path = work_dir / "job.yaml"
    config_path.write_text(yaml.safe_dump(values))
    common = ["--config", str(config_path), "--system", "k"]
    out = _ok("stream", "create", unique_name, "--partitions", "3", *common)
    assert "created: 3 partitions" in out and f"Kafka topic {unique_name}" in out
    assert "already exists" in _ok("stream", "create", unique_name, "--partitions", "3", *common)
    data = work_dir / "events.jsonl"
    data.write_text("\n".join(json.dumps({"user": f"u{i % 4}", "n": i}) for i in range(20)) + "\n")
    assert "loaded 20 messages" in _ok("stream", "load", unique_name, str(data), "--key", "user",
                                       "--batch", "1", *common)
    # The same file again: every chunk's Kafka transaction recorded how far the file got, so nothing is added.
    assert "already loaded" in _ok("stream", "load", unique_name, str(data), "--key", "user", "--batch", "1",
                                   *common)
    consumer = KafkaSystemConsumer("k", Config(values))
    by_partition: dict[int, list[int]] = {}
    for p in range(3):
        for env in consumer.read(SystemStreamPartition("k", unique_name, p), "0", None):
            body = json.loads(env.message)
            assert partition_for(env.key, 3) == p          # keyed by the --key column, Kafka's partitioner
            by_partition.setdefault(p, []).append(body["n"])
    consumer.stop()
    assert sorted(n for ns in by_partition.values() for n in ns) == list(range(20))
    described = _ok("stream", "describe", unique_name, *common)
    assert "partitions: 3" in described
    busiest = max(by_partition, key=lambda p: len(by_partition[p]))
    tailed = _ok("stream", "tail", unique_name, "--partition", str(busiest), "-n", "2", *common)
    lines = [line for line in tailed.splitlines() if line.startswith("#")]
    assert len(lines) == 2
    for n, line in zip(by_partition[busiest][-2:], lines, strict=True):
        assert f'"n": {n}' in line or f'"n":{n}' in line
