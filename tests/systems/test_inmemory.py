"""The ``inmemory`` system: a full sparza system inside one process, idempotent per transaction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sparza.config import Config
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import (
    StreamSpec,
    SupportsArrowRead,
    SupportsOffsetArithmetic,
    SupportsPartitionCount,
    SystemAdmin,
    SystemConsumer,
    SystemProducer,
    Transaction,
    get_system_factory,
)
from sparza.systems.delta import partition_for
from sparza.systems.inmemory import InMemoryStreamError, drop_namespace


@pytest.fixture
def config() -> Iterator[Config]:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    yield Config({"systems.m.samza.factory": "inmemory", "systems.m.inmemory.namespace": namespace,
                  "systems.m.streams.s.samza.key.serde": "string", "systems.m.streams.s.samza.msg.serde": "json"})
    drop_namespace(namespace)


def _parts(config: Config):
    factory = get_system_factory(config, "m")
    admin, consumer, producer = (factory.get_admin("m", config), factory.get_consumer("m", config),
                                 factory.get_producer("m", config))
    return admin, consumer, producer


def test_it_is_a_system_with_offset_arithmetic_and_arrow_reads(config: Config) -> None:
    admin, consumer, producer = _parts(config)
    assert isinstance(admin, SystemAdmin) and isinstance(admin, SupportsOffsetArithmetic)
    assert isinstance(admin, SupportsPartitionCount)
    assert isinstance(consumer, SystemConsumer) and isinstance(consumer, SupportsArrowRead)
    assert isinstance(producer, SystemProducer)
    assert admin.create_stream(StreamSpec("s", 3)) is True
    assert admin.create_stream(StreamSpec("s", 3)) is False
    with pytest.raises(InMemoryStreamError, match="exists with 3 partitions, not 2"):
        admin.create_stream(StreamSpec("s", 2))
    meta = admin.get_system_stream_metadata({"s"})["s"]
    assert meta.partition_count == 3 and meta.partitions[0].oldest is None and meta.partitions[0].upcoming == "0"
    ssp = SystemStreamPartition("m", "s", 0)
    assert admin.offset_after(ssp, "2", "10", 3) == "5" and admin.offset_after(ssp, "8", "10", 3) == "10"
    assert admin.count_between(ssp, "2", "10") == 8 and admin.offset_comparator("10", "9") > 0


def test_flush_with_a_transaction_is_idempotent_and_abandon_drops(config: Config) -> None:
    admin, consumer, producer = _parts(config)
    admin.create_stream(StreamSpec("s", 2))
    stream = SystemStream("m", "s")
    producer.register("t")
    producer.send("t", OutgoingMessageEnvelope(stream, {"n": 1}, key="k", timestamp=5))
    producer.flush("t", transaction=Transaction("job/t", 1))
    producer.send("t", OutgoingMessageEnvelope(stream, {"n": 1}, key="k", timestamp=5))
    producer.flush("t", transaction=Transaction("job/t", 1))  # a replay of version 1: nothing new
    producer.send("t", OutgoingMessageEnvelope(stream, {"n": 2}, key="k"))
    producer.abandon("t")
    producer.flush("t", transaction=Transaction("job/t", 2))
    partition = partition_for(b"k", 2)  # the delta producer's choice
    ssp = SystemStreamPartition("m", "s", partition)
    rows = list(consumer.read(ssp, None))
    assert [(r.offset, r.key, r.message, r.timestamp, r.type) for r in rows] == [
        ("0", b"k", b'{"n":1}', 5, MessageType.USER)]
    batch = next(consumer.read_arrow(ssp, "0", "1"))
    assert batch.column("producer").to_pylist() == ["t"]
    assert admin.get_system_stream_metadata({"s"})["s"].partitions[partition].upcoming == "1"


def test_a_missing_stream_says_the_system_lives_in_one_process(config: Config) -> None:
    admin, _, producer = _parts(config)
    with pytest.raises(InMemoryStreamError, match="does not exist in this process.*delta or kafka system"):
        admin.get_system_stream_metadata({"nope"})
    admin.create_stream(StreamSpec("s", 1))
    producer.register("t")
    with pytest.raises(InMemoryStreamError, match="partition 4 is out of range.*1 partitions"):
        producer.send("t", OutgoingMessageEnvelope(SystemStream("m", "s"), b"v", partition=4))


def test_a_range_past_the_partitions_end_is_refused_not_read_short(config: Config) -> None:
    """After the input lost its records, a task must not read its planned range as empty and commit offsets
    past messages it never saw: a read past the end of what a partition holds raises. ``clear_stream`` is how
    tests lose a stream's data."""
    from sparza.systems.inmemory import clear_stream

    admin, consumer, producer = _parts(config)
    admin.create_stream(StreamSpec("s", 1))
    producer.register("src")
    for i in range(4):
        producer.send("src", OutgoingMessageEnvelope(SystemStream("m", "s"), {"i": i}, key="k", partition=0))
    producer.flush("src")
    ssp = SystemStreamPartition("m", "s", 0)
    assert len(list(consumer.read(ssp, "1", "4"))) == 3
    assert clear_stream("m", config, "s") == 4
    assert admin.get_system_stream_metadata({"s"})["s"].partitions[0].upcoming == "0"
    with pytest.raises(InMemoryStreamError, match=r"holds 0 rows, but \[1, 4\) was asked for"):
        list(consumer.read(ssp, "1", "4"))
    with pytest.raises(InMemoryStreamError, match="lost data"):
        list(consumer.read_arrow(ssp, "0", "2"))
    assert list(consumer.read(ssp, "0", "0")) == [] and list(consumer.read(ssp, None, None)) == []
