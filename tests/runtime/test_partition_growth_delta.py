"""Partitions that grow on a Delta input (SEP-5): ``DeltaSystemAdmin.grow_stream`` (what ``sparza stream grow`` calls)
raises the stream table's partition count in one metadata commit; a running job notices at its next poll and, by
default, stops naming the stream and the choices with nothing committed lost; with ``job.partition.expansion:
group`` it goes on, every key counted as a plain-Python oracle that maps partition ``p`` to the task of ``p % 4``
says. The job runs in the container mode of the in-process host (:class:`~sparza.testing.TestRunner`) on real Delta
tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.engine.errors import JobFailedError
from sparza.engine.partitions import PartitionCountChangedError
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec, get_system_factory
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer
from sparza.systems.delta.errors import DeltaStreamError
from sparza.testing import TestRunner

KEYS = 24


def delta_config(root: Path) -> dict[str, str]:
    return {"systems.d.samza.factory": "delta", "systems.d.delta.root": str(root),
            "systems.d.samza.offset.default": "oldest", "task.inputs": "d.events"}


def produce(config: Config, start: int, n: int, partitions: int, sent: list[tuple[str, int]]) -> None:
    """Message i has key ``k{i % KEYS}`` in partition ``(i % KEYS) % partitions`` (a producer that partitions by
    ``hash % count``, hash = the key's number); ``sent`` gets (key, partition) in order."""
    producer = DeltaSystemProducer("d", config)
    producer.register("loader")
    producer.start()
    for i in range(start, start + n):
        index = i % KEYS
        p = index % partitions
        producer.send("loader", OutgoingMessageEnvelope(SystemStream("d", "events"), f"m{i}".encode(),
                                                        key=f"k{index}".encode(), partition=p, timestamp=1000 + i))
        sent.append((f"k{index}", p))
    producer.flush("loader")
    producer.stop()


def sep5_oracle(sent: list[tuple[str, int]], first: int = 4) -> dict[tuple[str, str], list[int]]:
    """(task, key) -> the counts it emits in order: 1..n; partition p >= ``first`` is counted by task p % first."""
    n = Counter((f"Partition {p % first}", key) for key, p in sent)
    return {tk: list(range(1, c + 1)) for tk, c in n.items()}


def outputs(runner: TestRunner) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for m in runner.outputs("mem.out"):
        out.setdefault((m.value["task"], m.value["key"]), []).append(int(m.value["count"]))
    return out


def keyed_count(work_dir: Path, **extra: str) -> tuple[TestRunner, Config]:
    from tests.runtime.test_partition_expansion import COUNT

    values = {**COUNT, **delta_config(work_dir / "streams"), **extra}
    config = Config(values)
    DeltaSystemAdmin("d", config).create_stream(StreamSpec("events", 4))
    runner = TestRunner.of("tests.runtime.partition_jobs.TaskKeyCount", values, work_dir=work_dir / "job")
    return runner.add_output("mem.out", partitions=2), config


def test_a_grown_delta_stream_stops_the_job_by_default_then_grouping_counts_exactly(work_dir: Path) -> None:
    runner, config = keyed_count(work_dir)
    sent: list[tuple[str, int]] = []
    produce(config, 0, 100, 4, sent)
    assert runner.run().messages == 100
    before = {t: cp.offsets for t, cp in runner.checkpoints().items()}
    stored = runner.store("counts")
    assert DeltaSystemAdmin("d", config).grow_stream("events", 6) == 4
    grown: list[tuple[str, int]] = []
    produce(config, 100, 60, 6, grown)
    with pytest.raises((PartitionCountChangedError, JobFailedError), match="PartitionCountChangedError") as caught:
        runner.run()
    text = str(caught.value)
    assert "d.events: 4 -> 6 partitions" in text and "while it ran" in text
    assert "job.partition.expansion: group" in text and "Nothing committed is lost" in text
    assert {t: cp.offsets for t, cp in runner.checkpoints().items()} == before
    assert runner.store("counts") == stored
    assert outputs(runner) == sep5_oracle(sent)

    # The operator chooses SEP-5 grouping: the job goes on from its commits, partitions 4 and 5 join tasks 0 and 1.
    runner.restart(crashed=False, config={"job.partition.expansion": "group"})
    assert runner.run().messages == 60
    assert sorted(runner.checkpoints()) == [f"Partition {p}" for p in range(4)]
    assert outputs(runner) == sep5_oracle(sent + grown)


def test_a_running_job_grouped_by_sep5_goes_on_when_its_delta_input_grows(work_dir: Path) -> None:
    runner, config = keyed_count(work_dir, **{"job.partition.expansion": "group"})
    sent: list[tuple[str, int]] = []
    produce(config, 0, 96, 4, sent)
    runner.run()
    DeltaSystemAdmin("d", config).grow_stream("events", 8)
    produce(config, 96, 144, 8, sent)
    assert runner.run().messages == 144
    got = outputs(runner)
    assert got == sep5_oracle(sent)
    # 8 is a multiple of 4: every key stayed in one task with its state.
    assert len({key for _, key in got}) == len(got)


def test_delta_growth_is_seen_by_long_lived_admins_and_producers_and_never_shrinks(work_dir: Path) -> None:
    config = Config(delta_config(work_dir / "streams"))
    reader = DeltaSystemAdmin("d", config)
    reader.create_stream(StreamSpec("events", 2))
    producer = DeltaSystemProducer("d", config)
    producer.register("p")
    producer.start()
    target = SystemStream("d", "events")
    producer.send("p", OutgoingMessageEnvelope(target, b"a", key=b"a", partition=1))
    producer.flush("p")
    assert set(reader.get_system_stream_metadata({"events"})["events"].partitions) == {0, 1}

    assert DeltaSystemAdmin("d", config).grow_stream("events", 3) == 2
    # The admin that read before sees the third partition at its next metadata read, empty.
    meta = reader.get_system_stream_metadata({"events"})["events"]
    assert sorted(meta.partitions) == [0, 1, 2] and meta.partitions[2].oldest is None
    assert reader.partition_count("events") == 3
    # A producer that knew 2 partitions writes the new one (it reads the count again), and nothing beyond.
    producer.send("p", OutgoingMessageEnvelope(target, b"b", key=b"b", partition=2))
    with pytest.raises(ValueError, match="out of range"):
        producer.send("p", OutgoingMessageEnvelope(target, b"c", key=b"c", partition=3))
    producer.flush("p")
    meta = reader.get_system_stream_metadata({"events"})["events"]
    assert meta.partitions[2].oldest is not None
    read = get_system_factory(config, "d").get_consumer("d", config)
    read.start()
    try:
        rows = [e.message for e in read.read(SystemStreamPartition("d", "events", 2), meta.partitions[2].oldest,
                                             meta.partitions[2].upcoming, include_control=False)]
    finally:
        read.stop()
    assert rows == [b"b"]
    with pytest.raises(DeltaStreamError, match="can only get more"):
        reader.grow_stream("events", 3)


def test_a_new_job_started_from_a_savepoint_meets_growth_since_it_was_taken(work_dir: Path) -> None:
    """v1 stops with a savepoint; the input grows 4 -> 8; v2 (a new job.id, so no partition record of its own) starts
    from the savepoint: by default it is refused naming the stream, and with group its 4 tasks continue every key's
    count exactly (the savepoint carries v1's record; without it v2 would make 8 tasks, counting the keys of
    partitions 4-7 from 0)."""
    from sparza.engine.checkpoint import checkpoint_store_from_config
    from sparza.engine.partitions import read_record
    from sparza.ops import create_savepoint, restore_savepoint

    backup = {"stores.counts.backup.factories": "blobstore"}
    v1, config = keyed_count(work_dir, **backup)
    sent: list[tuple[str, int]] = []
    produce(config, 0, 96, 4, sent)
    v1.run()
    v1_out = outputs(v1)
    values = dict(v1.config.items())
    v1.close()
    create_savepoint(v1.config, "before-growth")
    DeltaSystemAdmin("d", config).grow_stream("events", 8)
    grown: list[tuple[str, int]] = []
    produce(config, 96, 144, 8, grown)

    v2_values = {**values, "job.id": "2", "job.logged.store.base.dir": str(work_dir / "v2-state")}
    with pytest.raises(PartitionCountChangedError, match="d.events: 4 -> 8 partitions"):
        restore_savepoint(Config(v2_values), "before-growth")
    v2_values["job.partition.expansion"] = "group"
    done = restore_savepoint(Config(v2_values), "before-growth")
    assert done is not None and any("p >= 4 -> task of p % 4" in note for note in done.notes), done.notes
    record = read_record(checkpoint_store_from_config(Config(v2_values), "taskkeycount-2"))
    assert record is not None and record.first == {"d.events": 4} and record.grouped == {"d.events": 4}
    v2 = TestRunner.of("tests.runtime.partition_jobs.TaskKeyCount", v2_values, work_dir=v1.work_dir)
    v2.add_output("mem.out", partitions=2)
    try:
        assert v2.run().messages == 144
        assert sorted(v2.checkpoints()) == [f"Partition {p}" for p in range(4)]
        expected = sep5_oracle(sent + grown)
        before = sep5_oracle(sent)
        assert v1_out == before
        assert outputs(v2) == {tk: counts[len(before.get(tk, [])):] for tk, counts in expected.items()
                               if len(counts) > len(before.get(tk, []))}
    finally:
        v2.close()
