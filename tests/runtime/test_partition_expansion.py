"""Inputs that gain partitions (SEP-5) under ``TestRunner``, the in-process host of the engine: by default a keyed
count stops naming the stream, the counts and the choices, with nothing committed lost; with
``job.partition.expansion: group`` it goes on, every key counted exactly as an oracle that maps partitions as SEP-5
says; a stateless job starts tasks for the new partitions; the mapping is recorded and a restart keeps it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from sparza.config import Config
from sparza.engine.checkpoint import checkpoint_store_from_config
from sparza.engine.errors import JobFailedError
from sparza.engine.partitions import (
    PARTITIONS_DOCUMENT,
    Grouping,
    PartitionCountChangedError,
    PartitionRecord,
    settle_partitions,
)
from sparza.errors import SparzaError
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.testing import TestMessage, TestRunner

KEYS = 24
COUNT = {"stores.counts.factory": "rocksdb", "stores.counts.key.serde": "string", "stores.counts.msg.serde": "json",
         "systems.mem.streams.out.samza.msg.serde": "json", "systems.mem.streams.out.samza.key.serde": "string",
         "partition_test.output": "mem.out",
         "task.max.batch.messages": "7"}


def messages(start: int, n: int, partitions: int) -> tuple[list[TestMessage], list[tuple[str, int]]]:
    """Message i has key ``k{i % KEYS}`` and goes to partition ``(i % KEYS) % partitions``: a producer that partitions
    by ``hash(key) % count`` with hash = the key's number. Returns them and (key, partition) in order."""
    out, sent = [], []
    for i in range(start, start + n):
        index = i % KEYS
        p = index % partitions
        out.append(TestMessage(f"m{i}".encode(), key=f"k{index}".encode(), partition=p, timestamp=1000 + i))
        sent.append((f"k{index}", p))
    return out, sent


def sep5_counts(sent: Iterable[tuple[str, int]], first: int) -> dict[tuple[str, str], int]:
    """The oracle: (task, key) -> messages counted, a partition p >= ``first`` counted by the task of p % first."""
    counts: Counter[tuple[str, str]] = Counter()
    for key, p in sent:
        counts[(f"Partition {p if p < first else p % first}", key)] += 1
    return dict(counts)


def outputs_by_task_key(runner: TestRunner) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for m in runner.outputs("mem.out"):
        out.setdefault((m.value["task"], m.value["key"]), []).append(int(m.value["count"]))
    return out


def job_store(runner: TestRunner) -> Any:
    """The job's checkpoint store (where the partition record lives)."""
    from sparza.engine.jobconfig import JobConfig

    return checkpoint_store_from_config(runner.config, JobConfig.from_config(runner.config).job_key)


RUN_FAILS = (PartitionCountChangedError, JobFailedError)
"""What a run that meets grown partitions raises: the planner's error (micro-batches) or the failed job naming it."""


def keyed_count(work_dir: Path, **extra: str) -> TestRunner:
    runner = TestRunner.of("tests.runtime.partition_jobs.TaskKeyCount", {**COUNT, **extra}, work_dir=work_dir)
    return runner.add_output("mem.out", partitions=2)


def test_default_stops_naming_the_stream_counts_and_choices_and_loses_nothing_committed(work_dir: Path) -> None:
    runner = keyed_count(work_dir)
    first, sent = messages(0, 100, 4)
    runner.add_input("mem.events", first, partitions=4)
    runner.run()
    before = {t: cp.offsets for t, cp in runner.checkpoints().items()}
    stored = runner.store("counts")
    runner.grow_input("mem.events", 6)
    more, _ = messages(100, 60, 6)
    runner.add_input("mem.events", more)
    # The container mode's task stops at its next poll and the job fails naming why (JobFailedError, as sparza run).
    with pytest.raises(RUN_FAILS, match="PartitionCountChangedError") as caught:
        runner.run()
    text = str(caught.value)
    assert "mem.events: 4 -> 6 partitions" in text and "while it ran" in text
    assert "job.partition.expansion: group" in text and "new-tasks" in text and "job.id" in text
    assert "Nothing committed is lost" in text
    # Nothing moved past what was committed before the growth, and the state is what the oracle counted.
    assert {t: cp.offsets for t, cp in runner.checkpoints().items()} == before
    assert {(t, k): v for t, kv in stored.items() for k, v in kv.items()} == sep5_counts(sent, 4)
    assert runner.store("counts") == stored

    # A restarted process refuses to start too (the record says 4): the job never runs on silently.
    with pytest.raises(PartitionCountChangedError, match="since it last ran"):
        runner.restart(crashed=False)


@pytest.mark.parametrize("grown", [6, 8])
def test_expansion_grouping_goes_on_and_counts_exactly_as_sep5(work_dir: Path, grown: int) -> None:
    runner = keyed_count(work_dir, **{"job.partition.expansion": "group"})
    first, sent = messages(0, 100, 4)
    runner.add_input("mem.events", first, partitions=4)
    runner.run()
    runner.grow_input("mem.events", grown)
    more, sent2 = messages(100, 150, grown)
    runner.add_input("mem.events", more)
    report = runner.run()
    assert report.messages == 150
    expected = sep5_counts(sent + sent2, 4)
    got = outputs_by_task_key(runner)
    # Each (task, key) counted 1..n in order, n as the oracle says: no message lost or counted twice.
    assert got == {tk: list(range(1, n + 1)) for tk, n in expected.items()}
    assert sorted(runner.checkpoints()) == [f"Partition {p}" for p in range(4)]
    if grown % 4 == 0:  # a multiple: every key stays with its state, in one task
        assert len({key for _, key in got}) == len(got)
    else:  # 4 -> 6: keys of partitions 4 and 5 that were in 2 and 3 start again in tasks 0 and 1
        assert len({key for _, key in got}) < len(got)
    data = job_store(runner).read_document(PARTITIONS_DOCUMENT)
    assert data is not None
    record = PartitionRecord.from_json(data)
    assert record.first == {"mem.events": 4} and record.grouped == {"mem.events": 4}
    assert record.counts == {"mem.events": grown}
    assert [(h["from"], h["to"], h["policy"]) for h in record.history] == [(4, grown, "group")]

    # A restarted process maps the partitions the same way (from the record) and goes on exactly.
    runner.restart(crashed=False)
    later, sent3 = messages(250, 90, grown)
    runner.add_input("mem.events", later)
    runner.run()
    expected = sep5_counts(sent + sent2 + sent3, 4)
    assert outputs_by_task_key(runner) == {tk: list(range(1, n + 1)) for tk, n in expected.items()}


@pytest.mark.parametrize("restart", ["no", "yes", "with-plan"], ids=["while-running", "between-runs",
                                                                     "between-runs-offset-log-kept"])
def test_new_partitions_are_read_from_their_oldest_offset_whatever_the_default(work_dir: Path, restart: str) -> None:
    # samza.offset.default upcoming: a task without checkpoint starts at the end; the new partitions do not.
    policy = "fail" if restart == "with-plan" else "group"
    runner = keyed_count(work_dir, **{"job.partition.expansion": policy,
                                      "systems.mem.streams.events.samza.offset.default": "upcoming"})
    runner.add_input("mem.events", [], partitions=4)
    runner.run()  # the tasks' start plan: the (empty) partitions' ends
    first, sent = messages(0, 40, 4)
    runner.add_input("mem.events", first)
    runner.run()
    if restart == "yes":
        runner.restart(crashed=False)
    runner.grow_input("mem.events", 8)
    more, sent2 = messages(40, 80, 8)
    runner.add_input("mem.events", more)
    if restart == "with-plan":  # stopped (fail), then started with group: the plan it had (Spark's offset log) stays
        with pytest.raises(RUN_FAILS, match="PartitionCountChangedError|partitions grew"):
            runner.run()
        runner.restart(crashed=False, config={"job.partition.expansion": "group"})
    runner.run()
    expected = sep5_counts(sent + sent2, 4)
    assert outputs_by_task_key(runner) == {tk: list(range(1, n + 1)) for tk, n in expected.items()}


def test_a_stateless_job_starts_tasks_for_the_new_partitions(work_dir: Path) -> None:
    runner = TestRunner.of("tests.runtime.partition_jobs.TaskCopy",
                           {"systems.mem.streams.out.samza.msg.serde": "json",
                            "systems.mem.streams.out.samza.key.serde": "string", "partition_test.output": "mem.out",
                            "systems.mem.samza.offset.default": "oldest"}, work_dir=work_dir)
    runner.add_output("mem.out", partitions=2)
    first, sent = messages(0, 30, 4)
    runner.add_input("mem.events", first, partitions=4)
    runner.run()
    runner.grow_input("mem.events", 6)
    more, sent2 = messages(30, 30, 6)
    runner.add_input("mem.events", more)
    runner.run()
    got = Counter((m.value["task"], m.value["value"]) for m in runner.outputs("mem.out"))
    want = Counter((f"Partition {p}", f"m{i}") for i, (_, p) in enumerate(sent + sent2))
    assert got == want
    assert sorted(runner.checkpoints()) == [f"Partition {p}" for p in range(6)]


def test_new_tasks_is_refused_with_stores_and_a_shrunk_stream_always_stops(work_dir: Path) -> None:
    from sparza.engine.checkpoint import LocalCheckpointStore

    store = LocalCheckpointStore(work_dir, "j-1")
    events = SystemStream("mem", "events")
    cfg = Config({"job.name": "j", "stores.s.factory": "memory"})
    grouping = settle_partitions(cfg, "j-1", {events: 4}, store)
    assert grouping == Grouping({events: 4}, {events: 4}, {events: 4})
    assert json.loads(store.read_document(PARTITIONS_DOCUMENT) or b"{}")["counts"] == {"mem.events": 4}
    with pytest.raises(PartitionCountChangedError, match="is fail"):  # auto: a job with stores fails
        settle_partitions(cfg, "j-1", {events: 6}, store)
    with pytest.raises(PartitionCountChangedError, match="disappeared"):
        settle_partitions(Config({**cfg, "job.partition.expansion": "group"}), "j-1", {events: 3}, store)
    grouped = settle_partitions(Config({**cfg, "job.partition.expansion": "group"}), "j-1", {events: 6}, store)
    assert grouped.grouped == {events: 4} and any("no multiple of 4" in n for n in grouped.notes)
    # The record wins over a changed policy: the job keeps the SEP-5 grouping it has.
    again = settle_partitions(cfg, "j-1", {events: 6}, store)
    assert again.grouped == {events: 4} and not again.changes


def test_a_job_that_ran_before_the_record_existed_is_judged_by_its_checkpoints(work_dir: Path) -> None:
    runner = keyed_count(work_dir)
    first, _ = messages(0, 20, 4)
    runner.add_input("mem.events", first, partitions=4)
    runner.run()
    job_store(runner).delete_document(PARTITIONS_DOCUMENT)
    runner.grow_input("mem.events", 6)
    with pytest.raises(SparzaError, match="mem.events: 4 -> 6 partitions"):
        runner.restart(crashed=False)


def test_checkpoints_show_prints_the_grouping_and_its_changes(tmp_path: Path) -> None:
    import yaml
    from tests.runtime.helpers import job_values
    from typer.testing import CliRunner

    from sparza.cli import app
    from sparza.engine.checkpoint import LocalCheckpointStore
    from sparza.engine.checkpoint import TaskCheckpoint as Checkpoint

    values = {**job_values(tmp_path), "job.partition.expansion": "group"}
    store = LocalCheckpointStore(tmp_path / "blobstore" / "checkpoints", "kc-1")
    for task in range(4):
        store.write(Checkpoint(f"Partition {task}", 3, 0, {f"delta.events#{task}": "4:0"}), None)
    events = SystemStream("delta", "events")
    settle_partitions(Config(values), "kc-1", {events: 4}, store)
    settle_partitions(Config(values), "kc-1", {events: 8}, store)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(values))
    result = CliRunner().invoke(app, ["checkpoints", "show", "--config", str(path), "--no-lag"])
    assert result.exit_code == 0, result.output
    assert "input partitions: delta.events 8 (partition p >= 4 read by the task of p % 4: SEP-5), first read with 4" \
        in result.output
    assert "delta.events: 4 -> 8 partitions (job.partition.expansion: group)" in result.output


def test_a_task_that_never_committed_does_not_look_like_growth(work_dir: Path) -> None:
    from sparza.engine.checkpoint import LocalCheckpointStore
    from sparza.engine.checkpoint import TaskCheckpoint as Checkpoint

    store = LocalCheckpointStore(work_dir, "j-1")
    for task in range(3):
        store.write(Checkpoint(f"Partition {task}", 2, 1, {f"mem.events#{task}": "9"}), None)
    store.write(Checkpoint("Partition 3", 0, 1, {}), None)  # stamped at the start, nothing committed yet
    events = SystemStream("mem", "events")
    grouping = settle_partitions(Config({"job.name": "j", "stores.s.factory": "memory"}), "j-1", {events: 4}, store)
    assert grouping.first == {events: 4} and not grouping.changes


@pytest.mark.parametrize("policy", ["fail", "group"])
def test_the_micro_batch_source_ends_the_query_and_its_next_planner_regroups(work_dir: Path, policy: str) -> None:
    """``job.execution.mode: batches``: the Spark source's planner, driven here without Spark (in-memory input)."""
    from sparza.engine.errors import RuntimeStateError
    from sparza.engine.planner import BatchPlan
    from sparza.runtime.driver.source import SparzaStreamReader
    from sparza.systems import StreamSpec
    from sparza.systems.inmemory import InMemorySystemAdmin, InMemorySystemProducer, drop_namespace

    namespace = f"partitions-{policy}-{work_dir.name}"
    values = {"job.name": "mb", "task.class": "tests.runtime.partition_jobs.TaskKeyCount", "task.inputs": "mem.events",
              "systems.mem.samza.factory": "inmemory", "systems.mem.inmemory.namespace": namespace,
              "systems.mem.samza.offset.default": "oldest", "job.execution.mode": "batches",
              "job.partition.expansion": policy, "blob.store.local.root": str(work_dir / "blobs"),
              "job.logged.store.base.dir": str(work_dir / "state"), **COUNT}
    config = Config(values)
    admin = InMemorySystemAdmin("mem", config)
    admin.create_stream(StreamSpec("events", 4))
    producer = InMemorySystemProducer("mem", config)
    producer.register("t")

    def send(partitions: int) -> None:
        for i in range(partitions):
            producer.send("t", OutgoingMessageEnvelope(SystemStream("mem", "events"), b"v", key=b"k", partition=i))
        producer.flush("t")

    options = {"config": json.dumps(values), "task_count": "4"}
    try:
        send(4)
        reader = SparzaStreamReader(options)
        start = reader.initialOffset()
        planned = reader.latestOffset(start, None)
        assert BatchPlan.from_json(planned).batch == 1
        admin.grow_stream("events", 6)
        send(6)
        with pytest.raises(RuntimeStateError, match="mem.events: 4 -> 6 partitions") as caught:
            reader.latestOffset(planned, None)
        assert isinstance(caught.value, PartitionCountChangedError) == (policy == "fail")
        if policy == "group":  # the runner starts the query again: its planner groups #4, #5 into tasks 0, 1
            again = SparzaStreamReader(options)
            plan = again.latestOffset(planned, None)
            [first] = [s for s in again.partitions(planned, plan) if s.value.task == "Partition 0"]
            assert first.value.ssps == ["mem.events#0", "mem.events#4"]
            # Planned from the task checkpoints (nothing committed here): #0 from its start, #4 from its oldest.
            assert first.value.starts == ["0", "0"] and first.value.ends == ["2", "1"]
    finally:
        drop_namespace(namespace)
