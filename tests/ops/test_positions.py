"""Where a rewind puts each partition (no Spark): times parsed from every accepted form, offsets files in both
forms, and the first offset at or after a time on real Delta and Kafka partitions with out-of-order event times
and control rows, against a scan of what was written; the operations journal's round trip and limit."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.engine.checkpoint import LocalCheckpointStore
from sparza.engine.jobconfig import JobConfig
from sparza.errors import SparzaError
from sparza.ops import (
    Operation,
    RewindTarget,
    TaskChange,
    append_operation,
    parse_time,
    read_journal,
    read_offsets_file,
    resolve_positions,
)
from sparza.ops.journal import JOURNAL_LIMIT
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec, Transaction, get_system_factory


def test_times_in_every_form() -> None:
    assert parse_time("1700000000000") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20") == 1_700_000_000_000          # naive means UTC
    assert parse_time("2023-11-15T00:13:20+02:00") == 1_700_000_000_000
    assert parse_time("-1h", now_ms=10_000_000) == 10_000_000 - 3_600_000
    assert parse_time("-90m", now_ms=10_000_000) == 10_000_000 - 5_400_000
    assert parse_time("-1.5s", now_ms=10_000) == 8_500
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_time("yesterday")


def test_offsets_files_flat_or_per_task(tmp_path: Path) -> None:
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"kafka.t#0": 12, "kafka.t#1": "7"}))
    assert read_offsets_file(flat) == {"kafka.t#0": "12", "kafka.t#1": "7"}
    shown = tmp_path / "shown.json"
    shown.write_text(json.dumps({"Partition 0": {"batch": 3, "offsets": {"delta.e#0": "4:0"}},
                                 "Partition 1": {"batch": 3, "offsets": {"delta.e#1": "5:2"}}}))
    assert read_offsets_file(shown) == {"delta.e#0": "4:0", "delta.e#1": "5:2"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not an ssp": "1"}))
    with pytest.raises(SparzaError, match="not an SSP"):
        read_offsets_file(bad)


def _write(config: Config, system: str, stream: str, seed: int) -> dict[int, list[tuple[str, int, int]]]:
    """Write 3 partitions of messages with jittered event times and a watermark row now and then; returns per
    partition (offset, event time, type) in offset order, read back."""
    rng = random.Random(seed)
    producer = get_system_factory(config, system).get_producer(system, config)
    producer.register("w")
    producer.start()
    target = SystemStream(system, stream)
    for version in range(1, 5):
        producer.begin("w", Transaction(f"{stream}-w", version))
        for i in range(60):
            n = version * 100 + i
            kind = MessageType.WATERMARK if rng.random() < 0.1 else MessageType.USER
            producer.send("w", OutgoingMessageEnvelope(target, f"m{n}".encode(), key=b"k", partition=n % 3,
                                                       timestamp=1_000_000 + n * 1000 + rng.randint(-20_000, 20_000),
                                                       type=kind))
        producer.flush("w", transaction=Transaction(f"{stream}-w", version))
    producer.stop()
    consumer = get_system_factory(config, system).get_consumer(system, config)
    consumer.start()
    out: dict[int, list[tuple[str, int, int]]] = {}
    for p in range(3):
        for batch in consumer.read_arrow(SystemStreamPartition(system, stream, p), None, None, True,  # type: ignore[attr-defined]
                                         bounded=False):
            out.setdefault(p, []).extend(zip(batch.column("offset").to_pylist(), batch.column("timestamp").to_pylist(),
                                             batch.column("type").to_pylist(), strict=True))
    consumer.stop()
    return out


def _check(config: Config, system: str, stream: str, written: dict[int, list[tuple[str, int, int]]],
           far: str) -> None:
    job = JobConfig.from_config(config.with_overrides({"job.name": "j", "task.class": "x.Y",
                                                       "task.inputs": f"{system}.{stream}"}))
    admin = get_system_factory(config, system).get_admin(system, config)
    meta = admin.get_system_stream_metadata({stream})[stream]
    metadata = {SystemStreamPartition(system, stream, p): pm for p, pm in meta.partitions.items()}
    stamps = sorted({ts for rows in written.values() for _, ts, _ in rows})
    for at in (stamps[0] - 1, stamps[len(stamps) // 3], stamps[len(stamps) // 2] + 1, stamps[-1], stamps[-1] + 1):
        got = resolve_positions(job, metadata, RewindTarget.at_time(at), metadata)
        for p, rows in written.items():
            # The oracle: scan in offset order for the first user message at or after the time.
            first = next((o for o, ts, kind in rows if kind == MessageType.USER and ts >= at),
                         meta.partitions[p].upcoming)
            assert got[f"{system}.{stream}#{p}"] == first, (at, p)
    ends = resolve_positions(job, metadata, RewindTarget("newest"), metadata)
    assert ends == {str(s): pm.upcoming for s, pm in metadata.items()}
    with pytest.raises(SparzaError, match="outside what the stream holds"):
        resolve_positions(job, metadata, RewindTarget("offsets", offsets={str(s): far for s in metadata}), metadata)


def test_first_offset_at_a_time_on_delta(tmp_path: Path) -> None:
    config = Config({"systems.d.samza.factory": "delta", "systems.d.delta.root": str(tmp_path)})
    get_system_factory(config, "d").get_admin("d", config).create_stream(StreamSpec("e", 3))
    _check(config, "d", "e", _write(config, "d", "e", seed=1), "999999:0")


def test_first_offset_at_a_time_on_kafka(kafka_bootstrap: str, unique_name: str) -> None:
    config = Config({"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": kafka_bootstrap})
    # No time retention: the event times (record timestamps) are from 1970, which the broker would delete at once.
    get_system_factory(config, "k").get_admin("k", config).create_stream(
        StreamSpec(unique_name, 3, properties={"retention.ms": "-1"}))
    _check(config, "k", unique_name, _write(config, "k", unique_name, seed=2), "999999")


def test_the_journal_keeps_the_newest_operations(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path, "j-1")
    assert read_journal(store) == []
    change = TaskChange({"d.e#0": "5:0"}, {"d.e#0": "1:0"}, {"counts": "a"}, {}, "reset", 9)
    first = append_operation(store, Operation("rewind", "oldest", {"Partition 0": change}))
    assert first.by and first.at_ms > 0 and first.id
    assert read_journal(store) == [first]
    for i in range(JOURNAL_LIMIT + 3):
        append_operation(store, Operation("rewind", f"time {i}", {}))
    kept = read_journal(store)
    assert len(kept) == JOURNAL_LIMIT and kept[-1].target == f"time {JOURNAL_LIMIT + 2}"


def test_on_apache_kafka_the_broker_s_offsets_for_times_shorten_the_read(kafka_bootstrap: str,
                                                                        unique_name: str) -> None:
    """On a broker that answers ListOffsets by timestamp (Apache Kafka), the scan starts at the broker's answer:
    never after the first message at or after the time, and past the oldest offset."""
    config = Config({"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": kafka_bootstrap})
    topic = f"{unique_name}-timed"
    admin = get_system_factory(config, "k").get_admin("k", config)
    admin.create_stream(StreamSpec(topic, 3, properties={"retention.ms": "-1"}))   # 1970 timestamps: see above
    written = _write(config, "k", topic, seed=3)
    _check(config, "k", topic, written, "999999")
    stamps = sorted(ts for rows in written.values() for _, ts, kind in rows if kind == MessageType.USER)
    at = stamps[len(stamps) // 2]
    ssps = [SystemStreamPartition("k", topic, p) for p in range(3)]
    hints = admin.offsets_for_times(ssps, at)  # type: ignore[attr-defined]
    for ssp in ssps:
        first = next(o for o, ts, kind in written[ssp.partition] if kind == MessageType.USER and ts >= at)
        assert hints[ssp] is not None and 0 < int(hints[ssp]) <= int(first), (ssp, hints[ssp], first)
