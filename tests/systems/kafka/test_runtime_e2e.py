"""The keyed count (examples/keyed_count) from a Kafka topic to a Kafka topic through ``sparza run``.

Exact results, read back ``read_committed`` and compared with an independent count of what was
produced, after a Spark task retry after the flush. ``kill -9`` of the host mid-run followed by a run on a new
host, and the other Kafka faults, are in ``test_faults.py``; ``load_events``, ``final_counts`` and ``_run`` serve
those modules too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec, Transaction
from sparza.systems.kafka import KafkaSystemAdmin, KafkaSystemConsumer, KafkaSystemProducer
from sparza.testing.faults import fault_keys

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.runtime.helpers import expected_counts, job_values, sparza_cmd, sparza_env, write_config  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def kafka_job(work_dir: Path, kafka_bootstrap: str, unique_name: str) -> Callable[..., Config]:
    """The keyed-count job reading ``<name>-events`` and writing ``<name>-counts`` on system ``kafka``."""

    def build(partitions: int = 2, **overrides: Any) -> Config:
        events, counts = f"{unique_name}-events", f"{unique_name}-counts"
        values = job_values(work_dir, **{
            "job.name": unique_name,        # transactional ids and bookkeeping groups are per job
            "task.inputs": f"kafka.{events}",
            "keyed_count.output": f"kafka.{counts}",
            "systems.kafka.samza.factory": "kafka",
            "systems.kafka.consumer.bootstrap.servers": kafka_bootstrap,
            "systems.kafka.samza.offset.default": "oldest",
            f"systems.kafka.streams.{counts}.samza.key.serde": "string",
            f"systems.kafka.streams.{counts}.samza.msg.serde": "json",
            **overrides})
        config = Config(values)
        admin = KafkaSystemAdmin("kafka", config)
        for topic in (events, counts):
            admin.create_stream(StreamSpec(topic, partitions))
        return config

    return build


def load_events(config: Config, messages: int, keys: int, chunk: int = 500) -> None:
    """Produce message i with key ``k{i % keys}``, ``chunk`` per transaction."""
    topic = config["task.inputs"].split(".", 1)[1]
    producer = KafkaSystemProducer("kafka", config)
    producer.register("loader")
    stream = SystemStream("kafka", topic)
    for version, first in enumerate(range(0, messages, chunk), start=1):
        producer.begin("loader", Transaction(f"{topic}-loader", version))
        for i in range(first, min(first + chunk, messages)):
            producer.send("loader", OutgoingMessageEnvelope(stream, f"message-{i}".encode(),
                                                            key=f"k{i % keys}".encode()))
        producer.flush("loader", transaction=Transaction(f"{topic}-loader", version))
    producer.stop()


def final_counts(config: Config) -> tuple[dict[str, int], int]:
    """Highest count per key in the output topic (read_committed) and the number of output records."""
    topic = config["keyed_count.output"].split(".", 1)[1]
    meta = KafkaSystemAdmin("kafka", config).get_system_stream_metadata({topic})[topic]
    consumer = KafkaSystemConsumer("kafka", config)
    best: dict[str, int] = {}
    rows = 0
    for p, pm in meta.partitions.items():
        for env in consumer.read(SystemStreamPartition("kafka", topic, p), "0", pm.upcoming, include_control=False):
            body = json.loads(env.message)
            rows += 1
            best[body["key"]] = max(best.get(body["key"], 0), int(body["count"]))
    consumer.stop()
    return best, rows


def _run(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``sparza run --once``."""
    return subprocess.run(sparza_cmd("run", "--config", str(path), "--once", *args), cwd=REPO,
                          env=env or sparza_env(), capture_output=True, text=True, timeout=600, check=False)


def test_task_retry_after_flush_gives_exact_counts(kafka_job: Callable[..., Config], work_dir: Path) -> None:
    marker = work_dir / "failed-once"
    config = kafka_job(**{**fault_keys(marker), "task.max.batch.messages": "10000"})
    load_events(config, 900, 5)
    path = write_config(config, work_dir / "job.yaml")
    # local[2,2]: Spark retries a failed task once; the failure comes after the producers flushed,
    # so the retry replays a batch whose Kafka transaction already committed.
    result = _run(path, "--master", "local[2,2]")
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists()
    counts, rows = final_counts(config)
    assert counts == expected_counts(900, 5)
    assert rows == 900
    # `sparza checkpoints show`: Kafka offsets with their lag (0: the bounded run read everything).
    from typer.testing import CliRunner

    from sparza.cli import app

    shown = CliRunner().invoke(app, ["checkpoints", "show", "--config", str(path)])
    assert shown.exit_code == 0, shown.output
    topic = config["task.inputs"]
    assert f"{topic}#0" in shown.output and f"{topic}#1" in shown.output
    assert shown.output.count("(lag 0)") == 2, shown.output
