"""Streams on Kafka: the ``kafka`` system (topics as streams) through librdkafka (``confluent-kafka``).

Offsets are Kafka's integer offsets as decimal strings; reads are ``read_committed``; output is
exactly-once through one Kafka transaction per task and batch (see :mod:`.producer` and
``docs/kafka.md``). Event Hubs is the same system behind a config mapping (:mod:`.eventhubs`).
"""

from __future__ import annotations

from sparza.systems.kafka.admin import (
    KafkaError,
    KafkaSystemAdmin,
    KafkaUnavailableError,
    PartitionCountMismatchError,
    TopicNotFoundError,
)
from sparza.systems.kafka.consumer import KafkaSystemConsumer, OffsetOutOfRangeError
from sparza.systems.kafka.eventhubs import EventHubsSystemFactory, eventhubs_kafka_config
from sparza.systems.kafka.factory import KafkaSystemFactory
from sparza.systems.kafka.partitioner import murmur2, partition_for
from sparza.systems.kafka.producer import KafkaSystemProducer, is_fencing_error, transactional_id
from sparza.systems.kafka.settings import KafkaSystemSettings

__all__ = [
    "EventHubsSystemFactory",
    "KafkaError",
    "KafkaSystemAdmin",
    "KafkaSystemConsumer",
    "KafkaSystemFactory",
    "KafkaSystemProducer",
    "KafkaSystemSettings",
    "KafkaUnavailableError",
    "OffsetOutOfRangeError",
    "PartitionCountMismatchError",
    "TopicNotFoundError",
    "eventhubs_kafka_config",
    "is_fencing_error",
    "murmur2",
    "partition_for",
    "transactional_id",
]
