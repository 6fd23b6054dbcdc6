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
