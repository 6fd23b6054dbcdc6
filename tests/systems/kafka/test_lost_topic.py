"""A Kafka input topic that lost its records (deleted and created again while the job was stopped) must not be
skipped silently: the job stops naming the partitions and what to do.

Before the fix the task checkpoints pointed past the re-created partitions' ends: `sparza run` exited 0
having read nothing, and once a partition grew past the checkpointed offset the job would have read on
from there, skipping everything before it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.systems import StreamSpec
from sparza.systems.kafka import KafkaSystemAdmin

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.runtime.helpers import write_config  # noqa: E402
from tests.systems.kafka.test_runtime_e2e import _run, final_counts, kafka_job, load_events  # noqa: E402, F401

pytestmark = pytest.mark.slow


def _recreate(config: Config, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config["systems.kafka.consumer.bootstrap.servers"]})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(30)
    KafkaSystemAdmin("kafka", config).create_stream(StreamSpec(topic, partitions))


def _load_again(config: Config, topic: str, messages: int, keys: int) -> None:
    """Records of the re-created topic, in one transaction of a new transactional id (``load_events``
    would find its own earlier version recorded and rightly write nothing)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": config["systems.kafka.consumer.bootstrap.servers"],
                         "transactional.id": f"{topic}-reloader"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(messages):
        producer.produce(topic, value=f"again-{i}".encode(), key=f"k{i % keys}".encode(), partition=i % 2)
    producer.commit_transaction(60)


def test_a_recreated_input_topic_stops_the_job_and_reset_offset_reads_it_again(
        kafka_job: Callable[..., Config], work_dir: Path) -> None:  # noqa: F811
    config = kafka_job(**{"task.max.batch.messages": "100000"})
    path = write_config(config, work_dir / "job.yaml")
    load_events(config, 300, 5, chunk=150)
    first = _run(path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert final_counts(config)[1] == 300
    topic = config["task.inputs"].split(".", 1)[1]
    _recreate(config, topic, 2)
    _load_again(config, topic, 40, 5)                # far fewer records than the checkpoints' offsets
    stopped = _run(path)
    assert stopped.returncode != 0, "a run over a re-created input topic exited 0 (its records were skipped)"
    assert f"kafka.{topic}#" in stopped.stderr and "samza.reset.offset" in stopped.stderr, stopped.stderr[-3000:]
    assert final_counts(config)[1] == 300            # nothing read, nothing written
    reset = Config({**dict(config.items()), f"systems.kafka.streams.{topic}.samza.reset.offset": "true"})
    again = _run(write_config(reset, work_dir / "reset.yaml"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert final_counts(config)[1] == 340, again.stderr[-3000:]  # the 40 new records, each once
