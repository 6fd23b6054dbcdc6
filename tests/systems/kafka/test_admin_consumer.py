"""The kafka system's admin and consumer against a real broker: metadata, exact ranges, control headers."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from sparza.config import Config
from sparza.engine.offsets import OffsetOps
from sparza.errors import ConfigError
from sparza.streams import MessageType, SystemStreamPartition
from sparza.systems import (
    SYSTEM_FACTORIES,
    StreamSpec,
    SupportsArrowRead,
    SupportsMessageCount,
    SupportsOffsetArithmetic,
    SupportsPartitionCount,
    get_system_factory,
)
from sparza.systems.kafka import (
    KafkaError,
    KafkaSystemAdmin,
    KafkaSystemConsumer,
    KafkaSystemFactory,
    PartitionCountMismatchError,
    TopicNotFoundError,
)
from sparza.testing import eventually


def test_factory_names_resolve(kafka_config: Config) -> None:
    assert "kafka" in SYSTEM_FACTORIES
    samza = kafka_config.with_overrides({"systems.k.samza.factory": "org.apache.samza.system.kafka.KafkaSystemFactory"})
    for config in (kafka_config, samza):
        factory = get_system_factory(config, "k")
        assert isinstance(factory, KafkaSystemFactory)
        admin = factory.get_admin("k", config)
        assert isinstance(admin, SupportsOffsetArithmetic) and isinstance(admin, SupportsPartitionCount)
        assert isinstance(factory.get_consumer("k", config), SupportsArrowRead)


def test_missing_bootstrap_servers_is_a_clear_error() -> None:
    admin = KafkaSystemAdmin("k", Config({"systems.k.samza.factory": "kafka"}))
    with pytest.raises(ConfigError, match=r"systems\.k\.consumer\.bootstrap\.servers.*dev-kafka"):
        admin.partition_count("x")


def test_create_stream_and_partition_count(kafka_config: Config, unique_name: str) -> None:
    admin = KafkaSystemAdmin("k", kafka_config)
    assert admin.create_stream(StreamSpec(unique_name, 3)) is True
    assert admin.create_stream(StreamSpec(unique_name, 3)) is False
    with pytest.raises(PartitionCountMismatchError, match="3 partitions, not 4"):
        KafkaSystemAdmin("k", kafka_config).create_stream(StreamSpec(unique_name, 4))
    assert KafkaSystemAdmin("k", kafka_config).partition_count(unique_name) == 3
    with pytest.raises(TopicNotFoundError, match="does not exist"):
        admin.partition_count(unique_name + "-missing")


class _ElectingCluster:
    """Wraps a real admin client: its first ``electing`` metadata answers for ``topic`` carry LEADER_NOT_AVAILABLE
    and no partitions, as a cluster's do for a topic just created by another client or whose leader just died."""

    def __init__(self, client: object, topic: str, electing: int) -> None:
        self.client, self.topic, self.electing, self.asked = client, topic, electing, 0

    def list_topics(self, *args: object, **kwargs: object) -> object:
        from confluent_kafka import KafkaError as ClientError

        metadata = self.client.list_topics(*args, **kwargs)  # type: ignore[attr-defined]
        info = metadata.topics.get(self.topic)
        self.asked += 1
        if info is not None and self.asked <= self.electing:
            info.error, info.partitions = ClientError(ClientError.LEADER_NOT_AVAILABLE), {}
        return metadata

    def __getattr__(self, name: str) -> object:
        return getattr(self.client, name)


def test_a_topic_whose_leaders_are_being_elected_is_not_a_missing_topic(kafka_config: Config,
                                                                        unique_name: str) -> None:
    """Found on the three-broker test: two tasks started at once, one created the transactions topic, and the
    other's metadata answer (LEADER_NOT_AVAILABLE: leaders not elected yet) was taken for a missing topic, which
    failed the job. Such an answer is asked again; only UNKNOWN_TOPIC_OR_PART is a missing topic."""
    KafkaSystemAdmin("k", kafka_config).create_stream(StreamSpec(unique_name, 3))
    for electing in (1, 3):
        admin = KafkaSystemAdmin("k", kafka_config)
        wrapped = _ElectingCluster(admin.client, unique_name, electing)
        admin._client = wrapped
        assert admin.exists(unique_name) and admin.partition_count(unique_name) == 3
        assert wrapped.asked == electing + 1
        # Created by "another client" meanwhile: create_stream finds it exists and waits for its leaders too.
        again = KafkaSystemAdmin("k", kafka_config)
        again._client = _ElectingCluster(again.client, unique_name, electing)
        assert again.create_stream(StreamSpec(unique_name, 3)) is False
    missing = KafkaSystemAdmin("k", kafka_config)
    started = time.monotonic()
    assert not missing.exists(unique_name + "-missing")
    assert time.monotonic() - started < 5, "a missing topic must be answered at once, not after the timeout"
    never = KafkaSystemAdmin("k", kafka_config.with_overrides({"systems.k.kafka.request.timeout.ms": "1500"}))
    never._client = _ElectingCluster(never.client, unique_name, 10**6)
    with pytest.raises(KafkaError, match="has no leaders within"):
        never.partition_count(unique_name)


def test_metadata_oldest_newest_upcoming(kafka_config: Config, topic: Callable[..., str],
                                         produce_one_by_one: Callable[..., None]) -> None:
    name = topic(2)
    produce_one_by_one(name, 1, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    meta = KafkaSystemAdmin("k", kafka_config).get_system_stream_metadata({name})[name]
    assert meta.partition_count == 2
    empty, full = meta.partitions[0], meta.partitions[1]
    assert (empty.oldest, empty.newest, empty.upcoming) == (None, None, "0")
    assert (full.oldest, full.newest, full.upcoming) == ("0", "2", "3")


def test_offset_arithmetic_is_integer_and_bounded(kafka_config: Config) -> None:
    admin = KafkaSystemAdmin("k", kafka_config)
    ssp = SystemStreamPartition("k", "t", 0)
    assert admin.offset_comparator("9", "10") < 0   # integers, not strings
    assert admin.offset_comparator("10", "10") == 0
    assert admin.offset_after(ssp, "5", "100", 10) == "15"
    assert admin.offset_after(ssp, "95", "100", 10) == "100"
    assert admin.count_between(ssp, "5", "12") == 7
    assert admin.count_between(ssp, "12", "5") == 0


def test_read_is_exactly_the_range(kafka_config: Config, topic: Callable[..., str],
                                   produce_one_by_one: Callable[..., None]) -> None:
    name = topic(1)
    produce_one_by_one(name, 0, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)])
    consumer = KafkaSystemConsumer("k", kafka_config)
    ssp = SystemStreamPartition("k", name, 0)
    got = list(consumer.read(ssp, "3", "7"))
    assert [e.offset for e in got] == ["3", "4", "5", "6"]
    assert [e.message for e in got] == [b"v3", b"v4", b"v5", b"v6"]
    # The same range again (a replayed batch) reads the very same records.
    assert [(e.offset, e.key) for e in consumer.read(ssp, "3", "7")] == [(e.offset, e.key) for e in got]
    assert [e.offset for e in consumer.read(ssp, None, "2")] == ["0", "1"]
    assert len(list(consumer.read(ssp, "8", None))) == 2          # open end: to the partition's end
    assert list(consumer.read(ssp, "5", "5")) == []
    batches = list(consumer.read_arrow(ssp, "0", "10"))
    assert sum(b.num_rows for b in batches) == 10
    assert batches[0].schema.names == ["offset", "partition", "key", "value", "timestamp", "type", "producer"]
    # Column lists (a per-message task's path, no Arrow) hold the very rows the Arrow batches hold.
    arrow = [(r["offset"], r["key"], r["value"], r["timestamp"], r["type"]) for b in batches for r in b.to_pylist()]
    assert [row for rows in consumer.read_rows(ssp, "0", "10") for row in zip(*rows, strict=True)] == arrow
    consumer.stop()


def test_bounded_read_ends_with_end_of_stream(kafka_config: Config, topic: Callable[..., str],
                                              produce_one_by_one: Callable[..., None]) -> None:
    name = topic(1)
    produce_one_by_one(name, 0, [(None, b"x"), (None, b"y")])
    consumer = KafkaSystemConsumer("k", kafka_config)
    got = list(consumer.read(SystemStreamPartition("k", name, 0), None, bounded=True))
    assert [(e.offset, e.type) for e in got] == [("0", MessageType.USER), ("1", MessageType.USER),
                                                  ("2", MessageType.END_OF_STREAM)]
    rows = [row for chunk in consumer.read_rows(SystemStreamPartition("k", name, 0), None, bounded=True)
            for row in zip(chunk.offsets, chunk.values, chunk.types, strict=True)]
    assert rows == [("0", b"x", 0), ("1", b"y", 0), ("2", None, int(MessageType.END_OF_STREAM))]


def test_control_messages_travel_in_headers(kafka_config: Config, kafka_bootstrap: str,
                                            topic: Callable[..., str]) -> None:
    name = topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    producer.produce(name, value=b"data", partition=0)
    producer.flush(10)
    producer.produce(name, value=b"", partition=0, timestamp=1234,
                     headers=[("sparza.type", b"1"), ("sparza.producer", b"Partition 7")])
    producer.flush(10)
    consumer = KafkaSystemConsumer("k", kafka_config)
    ssp = SystemStreamPartition("k", name, 0)
    rows = [b.to_pylist() for b in consumer.read_arrow(ssp, "0", "2")]
    flat = [r for batch in rows for r in batch]
    assert [(r["type"], r["producer"]) for r in flat] == [(0, None), (1, "Partition 7")]
    assert flat[1]["timestamp"] == 1234
    assert [r["type"] for b in consumer.read_arrow(ssp, "0", "2", include_control=False) for r in b.to_pylist()] == [0]
    chunks = list(consumer.read_rows(ssp, "0", "2"))
    assert [(t, ts) for c in chunks for t, ts in zip(c.types, c.timestamps, strict=True)][1] == (1, 1234)
    assert [t for c in consumer.read_rows(ssp, "0", "2", include_control=False) for t in c.types] == [0]


def test_range_ending_in_a_transaction_marker_terminates(kafka_config: Config, kafka_bootstrap: str,
                                                         topic: Callable[..., str]) -> None:
    """A committed transaction ends with a marker at the last offset: no record at end-1 ever arrives,
    yet the read of [0, end) returns as soon as the broker says the partition ends there."""
    name = topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{name}-tx"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(name, value=b"only", partition=0)
    producer.commit_transaction(10)
    admin = KafkaSystemAdmin("k", kafka_config)
    end = admin.get_system_stream_metadata({name})[name].partitions[0].upcoming
    assert end == "2"   # the record at 0, the commit marker at 1
    got = list(KafkaSystemConsumer("k", kafka_config).read(SystemStreamPartition("k", name, 0), "0", end))
    assert [e.message for e in got] == [b"only"]


def test_read_of_missing_offsets_fails_clearly(kafka_config: Config, topic: Callable[..., str],
                                               produce_one_by_one: Callable[..., None]) -> None:
    name = topic(1)
    produce_one_by_one(name, 0, [(None, b"a")])
    config = kafka_config.with_overrides({"systems.k.kafka.read.timeout.ms": "2s"})
    consumer = KafkaSystemConsumer("k", config)
    with pytest.raises(Exception, match=r"k\." + name + r"#0"):
        list(consumer.read(SystemStreamPartition("k", name, 0), "0", "5"))


def test_reads_commit_their_start_to_the_job_group_for_monitoring(kafka_config: Config, kafka_bootstrap: str,
                                                                  topic: Callable[..., str],
                                                                  produce_one_by_one: Callable[..., None],
                                                                  unique_name: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    name = topic(1)
    produce_one_by_one(name, 0, [(None, b"%d" % i) for i in range(6)])
    config = kafka_config.with_overrides({"job.name": unique_name, "job.id": "2"})
    consumer = KafkaSystemConsumer("k", config)
    ssp = SystemStreamPartition("k", name, 0)
    assert len(list(consumer.read(ssp, "0", "3"))) == 3
    assert len(list(consumer.read(ssp, "3", "6"))) == 3   # batch 2 starts where batch 1 committed
    consumer.stop()
    group = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{unique_name}-2"})
    committed = group.committed([TopicPartition(name, 0)], timeout=10)[0].offset
    group.close()
    assert committed == 3


def test_count_messages_reads_past_transaction_markers(kafka_config: Config, kafka_bootstrap: str,
                                                       topic: Callable[..., str]) -> None:
    """``count_between`` is a bound (markers take offsets); ``count_messages`` counts what a consumer reads, so a
    commit marker after an ended task's last message is not input after its end (seed 13334183)."""
    name = topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{name}-tx"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(name, value=b"%d" % i, partition=0)
    producer.commit_transaction(10)           # records 0-2, marker 3
    admin = KafkaSystemAdmin("k", kafka_config)
    assert isinstance(admin, SupportsMessageCount)
    ssp = SystemStreamPartition("k", name, 0)
    end = admin.get_system_stream_metadata({name})[name].partitions[0].upcoming
    assert end == "4"
    assert admin.count_between(ssp, "3", end) == 1
    assert admin.count_messages(ssp, "3", end) == 0
    assert admin.count_messages(ssp, "0", end) == 3
    assert admin.count_messages(ssp, "1", "2") == 1
    producer.begin_transaction()
    producer.produce(name, value=b"late", partition=0)
    producer.commit_transaction(10)           # record 4, marker 5
    assert admin.count_messages(ssp, "3", "6") == 1
    assert OffsetOps(admin).count_messages(ssp, "3", "6") == 1
    assert OffsetOps(admin).count_messages(ssp, "6", "3") == 0
    admin.close()


def test_an_intermediate_topic_keeps_old_event_times_until_its_records_are_deleted(
        kafka_config: Config, kafka_bootstrap: str, unique_name: str) -> None:
    """Records carry their event time as Kafka timestamp; in a topic with time retention, records a day old (a
    backfill) go within the broker's retention check. An intermediate stream's topic has no time retention: its
    records stay until the stage that reads them committed past them (``delete_messages``, Kafka's DeleteRecords)."""
    admin = KafkaSystemAdmin("k", kafka_config)
    plain, intermediate = f"{unique_name}-plain", f"{unique_name}-inter"
    admin.create_stream(StreamSpec(plain, 1, properties={"retention.ms": "3600000"}))
    admin.create_stream(StreamSpec(intermediate, 1, intermediate=True))
    day_ago = int(time.time() * 1000) - 86_400_000
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    for name in (plain, intermediate):
        for i in range(5):
            producer.produce(name, value=b"%d" % i, partition=0, timestamp=day_ago + i)
            producer.flush(10)
    assert producer.flush(10) == 0

    def oldest(name: str) -> int:
        admin.close()
        return admin.watermarks([(name, 0)])[(name, 0)][0]

    eventually(lambda: oldest(plain) == 5, 60, message="the broker's retention did not delete the day-old records")
    assert oldest(intermediate) == 0
    ssp = SystemStreamPartition("k", intermediate, 0)
    admin.delete_messages({ssp: "3", SystemStreamPartition("other", intermediate, 0): "5"})
    assert oldest(intermediate) == 3
    consumer = KafkaSystemConsumer("k", kafka_config)
    assert [e.message for e in consumer.read(ssp, "3", "5")] == [b"3", b"4"]
    consumer.stop()
