"""Bounded reads, compaction (offsets unchanged) and retention (removed offsets are a clear error)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparza.config import Config
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemConsumer, DeltaSystemProducer, OffsetRemovedError
from sparza.systems.delta.maintenance import compact, truncate

S = SystemStream("d", "s")


def _write(config: Config, batches: int, per_batch: int, partitions: int = 2, first: int = 0) -> None:
    producer = DeltaSystemProducer("d", config)
    producer.register("t")
    for b in range(batches):
        for i in range(per_batch):
            n = first + b * per_batch + i
            producer.send("t", OutgoingMessageEnvelope(S, f"m{n}".encode(), partition=n % partitions))
        producer.flush("t")


def test_bounded_read_stops_at_the_snapshot(delta_config: Config) -> None:
    config = delta_config.with_overrides({"systems.d.streams.s.bounded": "true"})
    admin = DeltaSystemAdmin("d", config)
    admin.create_stream(StreamSpec("s", 2))
    assert admin.is_bounded("s")
    _write(config, 2, 10)
    reader = DeltaSystemConsumer("d", config).read(SystemStreamPartition("d", "s", 0), None)
    first = next(reader)                     # the read has begun: its bound is fixed now
    _write(config, 3, 10, first=100)         # rows written after the read began
    rest = list(reader)
    got = [first, *rest]
    assert [e.message for e in got[:-1]] == [f"m{n}".encode() for n in range(0, 20, 2)]
    assert got[-1].type == MessageType.END_OF_STREAM and got[-1].offset == "3:0"
    # An unbounded read of the same partition sees the later rows too.
    unbounded = list(DeltaSystemConsumer("d", config).read(SystemStreamPartition("d", "s", 0), None, bounded=False))
    assert len(unbounded) == 25
    # include_control=False: no synthetic end-of-stream either.
    users = list(DeltaSystemConsumer("d", config).read(SystemStreamPartition("d", "s", 1), None,
                                                       include_control=False))
    assert len(users) == 25 and all(e.type == MessageType.USER for e in users)


def test_compaction_keeps_offsets(delta_config: Config, read_all: Callable[..., list]) -> None:
    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", 2))
    _write(delta_config, 8, 6)
    before = {p: [(e.offset, e.message) for e in read_all(delta_config, "s", p)] for p in range(2)}
    meta_before = admin.get_system_stream_metadata({"s"})["s"].partitions
    result = compact(admin.location("s"))
    assert result.files_removed == 16 and result.files_added == 2
    table = DeltaTable(admin.stream_location("s"))
    assert len(pa.table(table.get_add_actions(flatten=True))) == 2     # snapshot readers see 2 files
    assert table.to_pyarrow_table().num_rows == 48
    for p in range(2):
        assert [(e.offset, e.message) for e in read_all(delta_config, "s", p)] == before[p]
        middle = before[p][5][0]
        assert [(e.offset, e.message) for e in read_all(delta_config, "s", p, middle)] == before[p][5:]
    fresh = DeltaSystemAdmin("d", delta_config).get_system_stream_metadata({"s"})["s"].partitions
    assert {p: (m.oldest, m.newest) for p, m in fresh.items()} == {p: (m.oldest, m.newest)
                                                                   for p, m in meta_before.items()}
    assert fresh[0].upcoming == "10:0"   # the compaction commit is version 9


def test_truncate_removes_old_offsets_with_a_clear_error(delta_config: Config, read_all: Callable[..., list]) -> None:
    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", 2))
    _write(delta_config, 6, 4)                                  # versions 1..6
    old = read_all(delta_config, "s", 0)
    compact(admin.location("s"))                                # version 7 mixes old and new rows
    _write(delta_config, 2, 4, first=100)                      # versions 8, 9
    result = truncate(admin.location("s"), 4)
    assert result.horizon == 4 and result.files_deleted > 0
    with pytest.raises(OffsetRemovedError) as info:
        read_all(delta_config, "s", 0, old[0].offset)
    assert info.value.offset == old[0].offset and info.value.oldest == "4:0"
    assert "oldest available is 4:0" in str(info.value)
    kept = read_all(delta_config, "s", 0, "4:0")
    assert [e.message for e in kept] == [b"m12", b"m14", b"m16", b"m18", b"m20", b"m22",
                                         b"m100", b"m102", b"m104", b"m106"]
    assert read_all(delta_config, "s", 0)[0].offset == "4:0"   # start None means the oldest kept
    meta = DeltaSystemAdmin("d", delta_config).get_system_stream_metadata({"s"})["s"].partitions[0]
    assert meta.oldest == "4:0" and meta.newest == "9:1"
    # Snapshot readers: the compacted file still holds rows >= horizon, so nothing they need was lost.
    rows = DeltaTable(admin.stream_location("s")).to_pyarrow_table()
    assert {b"m12", b"m100"} <= set(rows.column("value").to_pylist())
    truncate(admin.location("s"), 100)                          # everything: partitions read empty, no error
    assert read_all(delta_config, "s", 0) == []


def test_log_cleanup_makes_offsets_removed(delta_config: Config, read_all: Callable[..., list]) -> None:
    """Delta's own log cleanup deletes commit JSONs: their offsets are removed, the error names the oldest."""
    import os

    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", 1))
    _write(delta_config, 4, 2, partitions=1)
    for version in (0, 1):   # cleanup removes a prefix of the log, as Delta's expired-log cleanup does
        os.remove(os.path.join(admin.stream_location("s"), "_delta_log", f"{version:020d}.json"))
    with pytest.raises(OffsetRemovedError) as info:
        read_all(delta_config, "s", 0, "1:0")
    assert info.value.oldest == "2:0"


def _files_on_disk(admin: DeltaSystemAdmin, stream: str) -> set[str]:
    from pathlib import Path

    root = Path(admin.stream_location(stream))
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.mark.parametrize("seed", range(4))
def test_delete_messages_removes_what_every_partition_committed_past(delta_config: Config,
                                                                      read_all: Callable[..., list],
                                                                      seed: int) -> None:
    """Samza's deleteMessages on an intermediate stream: generated commits (sizes, skew, empty commits for a
    partition), random committed offsets per partition; the oracle is what each partition held at each offset
    when it was written."""
    import random

    from sparza.systems import SupportsDeleteMessages

    rng = random.Random(seed)
    partitions = rng.randrange(1, 5)
    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", partitions))
    assert isinstance(admin, SupportsDeleteMessages)
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    n = 0
    for _ in range(rng.randrange(4, 12)):                      # one commit per flush; partitions skewed
        for _ in range(rng.randrange(1, 15)):
            partition = min(int(rng.expovariate(1.0)), partitions - 1)
            producer.send("t", OutgoingMessageEnvelope(S, f"m{n}".encode(), partition=partition))
            n += 1
        producer.flush("t")
    written = {p: [(e.offset, e.message) for e in read_all(delta_config, "s", p, include_control=False)]
               for p in range(partitions)}
    files_before = _files_on_disk(admin, "s")
    latest = DeltaTable(admin.stream_location("s")).version()

    def committed() -> dict[SystemStreamPartition, str]:
        out = {}
        for p in range(partitions):
            offsets = [o for o, _ in written[p]] + [f"{latest + 1}:0"]     # the end: everything read
            out[SystemStreamPartition("d", "s", p)] = rng.choice(offsets)
        return out

    # A partition no reader has committed on keeps the whole stream.
    offsets = committed()
    if partitions > 1:
        admin.delete_messages({ssp: o for ssp, o in offsets.items() if ssp.partition != partitions - 1})
        assert _files_on_disk(admin, "s") == files_before
    admin.delete_messages(offsets)
    horizon = min(int(o.split(":")[0]) for o in offsets.values())
    for p in range(partitions):
        start = offsets[SystemStreamPartition("d", "s", p)]
        expected = [(o, m) for o, m in written[p] if admin.offset_comparator(o, start) >= 0]
        got = [(e.offset, e.message) for e in read_all(delta_config, "s", p, start, include_control=False)]
        assert got == expected                                 # nothing a reader still needs is gone
        older = [o for o, _ in written[p] if int(o.split(":")[0]) < horizon]
        if older:
            with pytest.raises(OffsetRemovedError):
                read_all(delta_config, "s", p, older[0])
    # Every file whose rows all precede the horizon is gone from storage; the others are all still there.
    table = DeltaTable(admin.stream_location("s"))
    kept = {a["path"] for a in pa.table(table.get_add_actions(flatten=True)).to_pylist()}
    assert kept <= _files_on_disk(admin, "s")
    assert len(_files_on_disk(admin, "s")) == len(kept)
    assert table.to_pyarrow_table().num_rows == sum(
        1 for p in range(partitions) for o, _ in written[p] if int(o.split(":")[0]) >= horizon)
    # Deleting again with the same or older offsets changes nothing.
    files = _files_on_disk(admin, "s")
    admin.delete_messages(offsets)
    admin.delete_messages({ssp: "0:0" for ssp in offsets})
    assert _files_on_disk(admin, "s") == files


def test_repeated_truncations_read_the_log_from_the_last_horizon(delta_config: Config,
                                                                  read_all: Callable[..., list]) -> None:
    """Truncating every few commits (as the runtime does on intermediate streams) keeps exactly the rows at or
    after each horizon, with compactions in between (their outputs inherit the newest rows they hold)."""
    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", 2))
    everything = []
    for round_ in range(5):
        _write(delta_config, 3, 4, first=100 * round_)
        if round_ == 2:
            compact(admin.location("s"))
        latest = DeltaTable(admin.stream_location("s")).version()
        truncate(admin.location("s"), latest - 1)
        everything = [(e.offset, e.message) for p in range(2) for e in read_all(delta_config, "s", p,
                                                                               include_control=False)]
        assert everything and all(int(o.split(":")[0]) >= latest - 1 for o, _ in everything)
    table = DeltaTable(admin.stream_location("s"))
    assert table.to_pyarrow_table().num_rows == len(everything)
    live = {a["path"] for a in pa.table(table.get_add_actions(flatten=True)).to_pylist()}
    assert _files_on_disk(admin, "s") == live


def test_truncate_deletes_the_commit_files_a_checkpoint_covers(delta_config: Config,
                                                               read_all: Callable[..., list]) -> None:
    """A stream truncated every minute would keep a commit file per batch for delta.logRetentionDuration (30 days):
    truncation deletes those before the horizon that a Delta checkpoint (every 100 commits) covers, keeps
    version 0 (the table's identity), and the table stays readable and writable for Delta and for offsets."""
    from pathlib import Path

    admin = DeltaSystemAdmin("d", delta_config)
    admin.create_stream(StreamSpec("s", 2))
    _write(delta_config, 110, 2)                                 # versions 1..110; delta-rs checkpoints at 100
    log_dir = Path(admin.stream_location("s")) / "_delta_log"
    checkpoint = json.loads((log_dir / "_last_checkpoint").read_text())["version"]
    assert 90 <= checkpoint < 105 and (log_dir / f"{checkpoint:020d}.checkpoint.parquet").exists()
    later = read_all(delta_config, "s", 0, "105:0", include_control=False)
    identity = DeltaSystemConsumer("d", delta_config)
    result = truncate(admin.location("s"), 105)
    commits = sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.json"))
    assert commits == [0, *range(checkpoint, 112)]    # 1 .. checkpoint - 1 are gone; 111 is the truncation's commit
    assert result.commits_deleted == checkpoint - 1
    assert [(e.offset, e.message) for e in read_all(delta_config, "s", 0, "105:0", include_control=False)] == [
        (e.offset, e.message) for e in later]
    with pytest.raises(OffsetRemovedError):
        read_all(delta_config, "s", 0, "50:0")
    assert DeltaTable(admin.stream_location("s")).version() == 111
    _write(delta_config, 1, 2, first=1000)                       # a writer goes on
    rows = [e.message for e in identity.read(SystemStreamPartition("d", "s", 0), "105:0", include_control=False)]
    assert rows[-1] == b"m1000" and len(rows) == len(later) + 1   # a long-lived reader sees the same table
    # a second truncation with no newer checkpoint deletes no more commit files
    assert truncate(admin.location("s"), 112).commits_deleted == 0
    # once a newer checkpoint exists, a truncation past it deletes the older checkpoint with the commits it covers
    _write(delta_config, 100, 2, first=2000)
    newest = json.loads((log_dir / "_last_checkpoint").read_text())["version"]
    assert newest > checkpoint and (log_dir / f"{checkpoint:020d}.checkpoint.parquet").exists()
    assert truncate(admin.location("s"), newest + 1).commits_deleted > 0
    assert sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.checkpoint*.parquet")) == [newest]
    assert DeltaTable(admin.stream_location("s")).version() >= newest
    start = f"{newest + 1}:0"
    rows = [e.message for e in identity.read(SystemStreamPartition("d", "s", 0), start, include_control=False)]
    assert rows == [e.message for e in read_all(delta_config, "s", 0, start, include_control=False)]


def _flush_while_truncating(config: Config, monkeypatch: pytest.MonkeyPatch) -> tuple[
        DeltaSystemAdmin, DeltaSystemProducer, list[object]]:
    """A stream of 4 commits and a producer that flushed once; its next flush runs a truncation of everything
    before it between writing its data file and committing it. Returns the truncation's result."""
    from sparza.systems.delta.settings import StreamLocation

    admin = DeltaSystemAdmin("d", config)
    admin.create_stream(StreamSpec("s", 2))
    _write(config, 4, 4)                                         # versions 1..4
    producer = DeltaSystemProducer("d", config)
    producer.register("t")
    producer.send("t", OutgoingMessageEnvelope(S, b"first", partition=0))
    producer.flush("t", transaction=("job/t", 1))               # the producer holds an open table from here
    real_write = StreamLocation.write_bytes
    truncated: list[object] = []
    started: list[str] = []

    def write_then_truncate(self: StreamLocation, path: str, data: bytes) -> None:
        real_write(self, path, data)
        if not started:                                           # between this flush's file and its commit
            started.append(path)                                  # (the truncation writes files of its own)
            truncated.append(truncate(admin.location("s"), 100))

    monkeypatch.setattr(StreamLocation, "write_bytes", write_then_truncate)
    producer.send("t", OutgoingMessageEnvelope(S, b"second", partition=0))
    return admin, producer, truncated


def _live(admin: DeltaSystemAdmin) -> set[str]:
    return set(pa.table(DeltaTable(admin.stream_location("s")).get_add_actions(flatten=True)).column("path")
               .to_pylist())


def test_a_truncation_between_a_flush_and_its_commit_neither_refuses_it_nor_orphans_its_file(
        delta_config: Config, read_all: Callable[..., list], monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncation of an intermediate stream commits while a producer's flush is between writing its data file
    and committing it (as stage 2's driver truncates while stage 1's tasks commit): the flush still commits,
    exactly once, and every data file on storage is one the table references (oracle: the messages sent)."""
    admin, producer, truncated = _flush_while_truncating(delta_config, monkeypatch)
    producer.flush("t", transaction=("job/t", 2))
    monkeypatch.undo()
    assert len(truncated) == 1 and truncated[0].files_removed > 0  # the truncation did remove files meanwhile
    assert [e.message for e in read_all(delta_config, "s", 0)] == [b"second"]
    assert _files_on_disk(admin, "s") == _live(admin)


def test_a_flush_out_of_commit_retries_deletes_the_file_it_wrote(
        delta_config: Config, read_all: Callable[..., list], monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush refused with no retry left (``delta.commit.retries: 0``) raises, keeps its buffer and leaves no data
    file behind; the next flush commits the messages once."""
    from deltalake.exceptions import CommitFailedError

    config = delta_config.with_overrides({"systems.d.delta.commit.retries": "0"})
    admin, producer, truncated = _flush_while_truncating(config, monkeypatch)
    with pytest.raises(CommitFailedError):
        producer.flush("t", transaction=("job/t", 2))
    monkeypatch.undo()
    assert len(truncated) == 1 and truncated[0].files_removed > 0
    assert _files_on_disk(admin, "s") == _live(admin)
    producer.flush("t", transaction=("job/t", 2))
    assert [e.message for e in read_all(config, "s", 0)] == [b"second"]
    assert _files_on_disk(admin, "s") == _live(admin)
