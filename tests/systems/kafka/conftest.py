"""Fixtures of the Kafka system tests: a ``kafka`` system ``k`` on the session's broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from sparza.config import Config
from sparza.systems import StreamSpec
from sparza.systems.kafka import KafkaSystemAdmin


@pytest.fixture
def kafka_config(kafka_bootstrap: str) -> Config:
    """A ``kafka`` system named ``k`` on the test broker (short read timeout: failures show fast)."""
    return Config({"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": kafka_bootstrap,
                   "systems.k.kafka.read.timeout.ms": "10s"})


@pytest.fixture
def topic(kafka_config: Config, unique_name: str) -> Callable[..., str]:
    """Create a topic named after the test (plus a suffix) with N partitions; returns its name. It has no time
    retention: tests write records with small timestamps (0, 99), which the broker's retention check (every
    second here) would delete."""

    def make(partitions: int = 2, suffix: str = "") -> str:
        name = f"{unique_name}{suffix}"
        KafkaSystemAdmin("k", kafka_config).create_stream(StreamSpec(name, partitions,
                                                                     properties={"retention.ms": "-1"}))
        return name

    return make


@pytest.fixture
def produce_one_by_one(kafka_bootstrap: str) -> Callable[..., None]:
    """Produce (key, value) records to one partition, one record per request: record i gets offset i."""

    def produce(topic: str, partition: int, records: list[tuple[bytes | None, bytes]]) -> None:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0, "log_level": 3})
        for key, value in records:
            producer.produce(topic, value=value, key=key, partition=partition)
            producer.flush(10)
        assert producer.flush(10) == 0

    return produce
