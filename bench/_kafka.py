"""Shared by the benchmarks that time a job's output on Kafka (``kafka_latency``, ``handover_latency``,
``peers/run``): the consumer they read it with."""

from __future__ import annotations

from typing import Any


def committed_reader(servers: str, topic: str, group: str, partitions: int, fetch_wait_ms: int) -> Any:
    """A confluent-kafka consumer (``group.id`` ``group``, committing nothing) of ``topic``'s first ``partitions``
    partitions from their start, ``read_committed`` as the job's readers see its output; a fetch waits at most
    ``fetch_wait_ms`` for new records (the latency it adds to each reading)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "fetch.wait.max.ms": fetch_wait_ms, "log_level": 3})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    return consumer
