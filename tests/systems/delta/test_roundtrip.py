"""Create, describe, write and read streams on a local directory."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable

import pytest

from sparza.config import Config
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec, get_system_factory
from sparza.systems.delta import (
    DeltaOffset,
    DeltaSystemAdmin,
    DeltaSystemConsumer,
    DeltaSystemFactory,
    DeltaSystemProducer,
    PartitionCountMismatchError,
    StreamNotFoundError,
    next_offset,
    partition_for,
)
from sparza.systems.delta.schema import READ_SCHEMA

S = SystemStream("d", "s")


def _send(producer: DeltaSystemProducer, source: str, n: int, *, first: int = 0, partition: int | None = None,
          key: Callable[[int], object] | None = None) -> None:
    for i in range(first, first + n):
        producer.send(source, OutgoingMessageEnvelope(S, f"m{i}".encode(), key=(key(i) if key else f"k{i}".encode()),
                                                      partition=partition, timestamp=1_000 + i))


def test_registry_resolves_delta(delta_config: Config) -> None:
    assert isinstance(get_system_factory(delta_config, "d"), DeltaSystemFactory)


def test_create_is_idempotent_and_checks_partition_count(delta_config: Config) -> None:
    admin = DeltaSystemAdmin("d", delta_config)
    assert admin.create_stream(StreamSpec("s", 4)) is True
    assert admin.create_stream(StreamSpec("s", 4)) is False
    with pytest.raises(PartitionCountMismatchError) as info:
        admin.create_stream(StreamSpec("s", 5))
    assert info.value.existing == 4 and info.value.requested == 5
    assert admin.partition_count("s") == 4
    assert admin.properties("s")["sparza.partitions"] == "4"
    assert "sparza.createdAt" in admin.properties("s")
    assert admin.stream_location("s").endswith("/streams/s")
    meta = admin.get_system_stream_metadata({"s"})["s"]
    assert meta.partition_count == 4
    assert all(p.oldest is None and p.newest is None and p.upcoming == "1:0" for p in meta.partitions.values())


def test_missing_stream_is_a_clear_error(delta_config: Config) -> None:
    with pytest.raises(StreamNotFoundError, match="sparza stream create"):
        DeltaSystemAdmin("d", delta_config).partition_count("nope")


def test_round_trip_keeps_order_and_offsets_increase(delta_config: Config, read_all: Callable[..., list]) -> None:
    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", 3))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("task-0")
    producer.start()
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for batch in range(5):
        for i in range(batch * 40, batch * 40 + 40):
            key = f"k{i % 17}".encode()
            producer.send("task-0", OutgoingMessageEnvelope(S, f"m{i}".encode(), key=key, timestamp=i))
            sent[partition_for(key, 3)].append(f"m{i}".encode())
        producer.flush("task-0")
    total = 0
    for p in range(3):
        got = read_all(delta_config, "s", p)
        assert [e.message for e in got] == sent[p]
        offsets = [DeltaOffset.parse(e.offset) for e in got]
        assert all(a < b for a, b in itertools.pairwise(offsets))
        assert all(e.ssp == SystemStreamPartition("d", "s", p) and e.type == MessageType.USER for e in got)
        total += len(got)
        meta = admin.get_system_stream_metadata({"s"})["s"].partitions[p]
        if got:
            assert meta.oldest == got[0].offset and meta.newest == got[-1].offset
        assert meta.upcoming == "6:0"
    assert total == 200


def test_ranges_are_half_open_and_next_offset_resumes(delta_config: Config, read_all: Callable[..., list]) -> None:
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 2))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    for batch in range(4):
        _send(producer, "t", 5, first=batch * 5, partition=1)
        producer.flush("t")
    everything = read_all(delta_config, "s", 1)
    assert [e.message for e in everything] == [f"m{i}".encode() for i in range(20)]
    offsets = [e.offset for e in everything]
    # [start, end): start included, end excluded, across versions.
    middle = read_all(delta_config, "s", 1, offsets[3], offsets[12])
    assert [e.offset for e in middle] == offsets[3:12]
    # A checkpoint stores next_offset(last processed): resuming reads exactly the rest.
    for i, last in enumerate(offsets):
        assert [e.offset for e in read_all(delta_config, "s", 1, next_offset(last))] == offsets[i + 1:]
    assert read_all(delta_config, "s", 1, offsets[5], offsets[5]) == []


def test_upcoming_reads_exactly_what_was_written_after(delta_config: Config, read_all: Callable[..., list]) -> None:
    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", 2))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    _send(producer, "t", 10, partition=0)
    producer.flush("t")
    upcoming = admin.get_system_stream_metadata({"s"})["s"].partitions[0].upcoming
    assert read_all(delta_config, "s", 0, upcoming) == []
    _send(producer, "t", 3, first=100, partition=1)   # another partition in between
    producer.flush("t")
    _send(producer, "t", 4, first=200, partition=0)
    producer.flush("t")
    assert [e.message for e in read_all(delta_config, "s", 0, upcoming)] == [f"m{i}".encode() for i in range(200, 204)]


def test_control_rows_in_order_and_skippable(delta_config: Config, read_all: Callable[..., list]) -> None:
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 1))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("up-0")
    _send(producer, "up-0", 2, partition=0)
    producer.send("up-0", OutgoingMessageEnvelope(S, b"wm", partition=0, timestamp=5, type=MessageType.WATERMARK))
    _send(producer, "up-0", 1, first=2, partition=0)
    producer.send("up-0", OutgoingMessageEnvelope(S, None, partition=0, type=MessageType.END_OF_STREAM))
    producer.flush("up-0")
    got = read_all(delta_config, "s", 0)
    assert [e.type for e in got] == [MessageType.USER, MessageType.USER, MessageType.WATERMARK, MessageType.USER,
                                     MessageType.END_OF_STREAM]
    consumer = DeltaSystemConsumer("d", delta_config)
    batches = list(consumer.read_arrow(SystemStreamPartition("d", "s", 0), None))
    assert {b.schema for b in batches} == {READ_SCHEMA}
    assert batches[0].column("producer").to_pylist() == ["up-0"] * 5
    users = read_all(delta_config, "s", 0, include_control=False)
    assert [e.message for e in users] == [b"m0", b"m1", b"m2"]
    assert [e.offset for e in users] == [got[0].offset, got[1].offset, got[3].offset]


def test_replayed_transaction_commits_nothing(delta_config: Config, read_all: Callable[..., list]) -> None:
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 2))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    _send(producer, "t", 10)
    producer.flush("t", transaction=("job/task-0", 7))
    # The replay of batch 7, possibly from a fresh process (a new producer): nothing is committed.
    replay = DeltaSystemProducer("d", delta_config)
    replay.register("t")
    _send(replay, "t", 10)
    replay.flush("t", transaction=("job/task-0", 7))
    _send(replay, "t", 10)
    replay.flush("t", transaction=("job/task-0", 6))   # older batch: also a replay
    assert sum(len(read_all(delta_config, "s", p)) for p in range(2)) == 10
    _send(replay, "t", 10, first=10)
    replay.flush("t", transaction=("job/task-0", 8))
    assert sum(len(read_all(delta_config, "s", p)) for p in range(2)) == 20
    from deltalake import DeltaTable

    assert DeltaTable(DeltaSystemAdmin("d", delta_config).stream_location("s")).transaction_version("job/task-0") == 8


def test_serdes_and_bytes_pass_through(delta_config: Config, read_all: Callable[..., list]) -> None:
    config = delta_config.with_overrides({"systems.d.streams.s.samza.msg.serde": "json",
                                          "systems.d.streams.s.samza.key.serde": "string"})
    DeltaSystemAdmin("d", config).create_stream(StreamSpec("s", 1))
    producer = DeltaSystemProducer("d", config)
    producer.register("t")
    producer.send("t", OutgoingMessageEnvelope(S, {"a": 1}, key="k"))
    producer.send("t", OutgoingMessageEnvelope(S, b"raw", key=b"kb"))
    producer.flush("t")
    got = read_all(config, "s", 0)
    assert [(e.key, e.message) for e in got] == [(b"k", b'{"a":1}'), (b"kb", b"raw")]


def test_hash_is_crc32_mod_count(delta_config: Config, read_all: Callable[..., list]) -> None:
    import zlib

    assert partition_for(b"user-42", 8) == zlib.crc32(b"user-42") % 8
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 4))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    producer.send("t", OutgoingMessageEnvelope(S, b"a", key=b"x", partition_key="user-42"))
    producer.send("t", OutgoingMessageEnvelope(S, b"b", key=b"user-42"))
    producer.send("t", OutgoingMessageEnvelope(S, b"c", key=b"x", partition_key=42))
    producer.flush("t")
    assert [e.message for e in read_all(delta_config, "s", zlib.crc32(b"user-42") % 4)][:2] == [b"a", b"b"]
    assert b"c" in [e.message for e in read_all(delta_config, "s", zlib.crc32(b"42") % 4)]


def test_consumer_from_pickled_config(delta_config: Config) -> None:
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 1))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    _send(producer, "t", 3)
    producer.flush("t")
    config = pickle.loads(pickle.dumps(delta_config))
    consumer = pickle.loads(pickle.dumps(DeltaSystemConsumer("d", config)))
    assert [e.message for e in consumer.read(SystemStreamPartition("d", "s", 0), "0:0")] == [b"m0", b"m1", b"m2"]
    used = pickle.loads(pickle.dumps(consumer))   # a consumer that has read pickles too
    assert len(list(used.read(SystemStreamPartition("d", "s", 0), None))) == 3


def test_racing_flush_of_the_same_transaction_lands_once(delta_config: Config, read_all: Callable[..., list]) -> None:
    """B checks the app transaction before A commits it, then commits: delta-rs refuses B, B drops its copy."""
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 1))
    a, b = DeltaSystemProducer("d", delta_config), DeltaSystemProducer("d", delta_config)
    for producer in (a, b):
        producer.register("t")
        _send(producer, "t", 5, partition=0)
    table = b._table(b._stream("s"))          # B's snapshot predates A's commit
    real_update = table.update_incremental
    skipped: list[bool] = []

    def stale_once() -> None:                 # fault injection: B's pre-commit refresh misses A's commit
        if not skipped:
            skipped.append(True)
            return
        real_update()

    table.update_incremental = stale_once
    a.flush("t", transaction=("job/task-0", 1))
    b.flush("t", transaction=("job/task-0", 1))
    assert skipped and len(read_all(delta_config, "s", 0)) == 5


def test_send_batch_keeps_order_with_single_sends(delta_config: Config, read_all: Callable[..., list]) -> None:
    import pyarrow as pa

    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 2))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    _send(producer, "t", 2, partition=1)
    producer.send_batch("t", "s", 1, pa.table({"key": [b"a", None], "value": [b"b1", b"b2"], "timestamp": [5, 6]}))
    _send(producer, "t", 1, first=2, partition=1)
    assert producer.pending("t") == 5
    producer.flush("t")
    got = read_all(delta_config, "s", 1)
    assert [e.message for e in got] == [b"m0", b"m1", b"b1", b"b2", b"m2"]
    assert [e.key for e in got][2:4] == [b"a", None]
    with pytest.raises(ValueError, match="out of range"):
        producer.send_batch("t", "s", 2, pa.table({"key": [b"a"], "value": [b"b"], "timestamp": [1]}))


def test_a_message_without_event_time_gets_the_time_it_was_buffered_and_control_types_stay(
        delta_config: Config) -> None:
    import time

    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 1))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    before = int(time.time() * 1000)
    sent = [OutgoingMessageEnvelope(S, b"a", key=b"k", partition=0),
            OutgoingMessageEnvelope(S, b"b", key=b"k", partition=0, timestamp=7),
            OutgoingMessageEnvelope(S, b"", partition=0, timestamp=9, type=MessageType.WATERMARK),
            OutgoingMessageEnvelope(S, "c", key="k", partition=0, timestamp=8.0)]  # a str key needs a serde
    producer.send("t", sent[0])
    producer.send("t", sent[1])
    producer.send("t", sent[2])
    with pytest.raises(Exception, match="bytes serde needs bytes"):
        producer.send("t", sent[3])
    producer.flush("t")
    after = int(time.time() * 1000)
    got = list(DeltaSystemConsumer("d", delta_config).read(SystemStreamPartition("d", "s", 0), None))
    assert [(e.message, e.type) for e in got] == [(b"a", MessageType.USER), (b"b", MessageType.USER),
                                                 (b"", MessageType.WATERMARK)]
    assert before <= got[0].timestamp <= after and [e.timestamp for e in got[1:]] == [7, 9]


JSON_MESSAGES: list[object] = [
    {"key": "k", "count": 3}, {"a": None}, {"a": float("nan"), "b": [1.5, float("inf")]}, {"nested": {"x": None}},
    {"text": "null", "é": "ü"}, {1: "int key"}, {"bytes": b"\x00\xff"}, {"set": {3}}, {}, [1, None], "plain text",
]
"""Messages a JSON serde takes: dicts the producers encode inline (with and without a null, a NaN msgspec would write
as null, keys and values msgspec and json treat differently) and values that go through the serde as before."""


def test_json_messages_are_written_as_the_json_serde_writes_them(delta_config: Config, read_all) -> None:
    """The producer encodes dict messages of a plain JSON serde itself (one call less per message): the bytes
    written are the serde's own for every message (the oracle), and what neither encoder takes is the serde's
    error."""
    from sparza.errors import SerdeError
    from sparza.serde import JsonSerde

    config = delta_config.with_overrides({"systems.d.streams.s.samza.msg.serde": "json"})
    DeltaSystemAdmin("d", config).create_stream(StreamSpec("s", 1))
    producer = DeltaSystemProducer("d", config)
    producer.register("t")
    for message in JSON_MESSAGES:
        producer.send("t", OutgoingMessageEnvelope(S, message, key=b"k"))
    with pytest.raises(SerdeError, match="cannot encode dict as JSON"):
        producer.send("t", OutgoingMessageEnvelope(S, {"o": object()}, key=b"k"))
    producer.flush("t")
    assert [e.message for e in read_all(config, "s", 0)] == [JsonSerde().to_bytes(m) for m in JSON_MESSAGES]


def test_message_types_of_single_sends_and_batches_in_any_mix_are_read_back_in_order(
        delta_config: Config, read_all: Callable[..., list]) -> None:
    """Only control rows record their type while buffered (user rows are 0): whatever the mix of user and control
    sends, Arrow batches between them and flushes, each partition reads back the messages and types sent to it."""
    import random

    import pyarrow as pa

    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 3))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    rng = random.Random(7)
    kinds = [MessageType.USER] * 6 + [MessageType.WATERMARK, MessageType.END_OF_STREAM, 0]
    sent: dict[int, list[tuple[bytes, int]]] = {p: [] for p in range(3)}
    for i in range(600):
        p = rng.randrange(3)
        if rng.random() < 0.05:
            values = [f"b{i}-{j}".encode() for j in range(rng.randrange(1, 4))]
            producer.send_batch("t", "s", p, pa.table({"key": [b"k"] * len(values), "value": values,
                                                        "timestamp": [i] * len(values)}))
            sent[p].extend((v, 0) for v in values)
        else:
            kind = rng.choice(kinds)
            producer.send("t", OutgoingMessageEnvelope(S, f"m{i}".encode(), key=b"k", partition=p, timestamp=i,
                                                       type=kind))
            sent[p].append((f"m{i}".encode(), int(kind)))
        if rng.random() < 0.02:
            producer.flush("t")
    producer.flush("t")
    for p in range(3):
        assert [(e.message, int(e.type)) for e in read_all(delta_config, "s", p)] == sent[p]
