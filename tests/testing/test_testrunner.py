"""``sparza.testing.TestRunner``: users' jobs run in-process through the runtime's own code, without Spark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from examples.keyed_count.task import KeyedCountTask
from tests.testing.jobs import KEYED_COUNT, EventTimeCount, SumTask, task_defined_in_a_function

from sparza.api.examples import WindowedCount
from sparza.engine.commit import CommitStep
from sparza.runtime import JobFailedError
from sparza.testing import TestInputError, TestMessage, TestRunner, end_of_stream, watermark
from sparza.testing.faults import InjectedFault


def _events(n: int, keys: int = 3) -> list[TestMessage]:
    """Message i has key k{i % keys} and goes to partition i % 2."""
    return [TestMessage(f"m{i}".encode(), key=f"k{i % keys}".encode(), partition=i % 2, timestamp=1000 + i)
            for i in range(n)]


def _keyed_count(events: list[TestMessage]) -> TestRunner:
    runner = TestRunner.of(KeyedCountTask, KEYED_COUNT)
    runner.add_input("delta.events", events, partitions=2).add_output("delta.counts", partitions=2)
    return runner


def _outputs(runner: TestRunner, stream: str = "delta.counts") -> dict[int, list[Any]]:
    """Per partition, the output (key, value) pairs in the order each key's messages were written."""
    out: dict[int, list[Any]] = {}
    for m in runner.outputs(stream):
        out.setdefault(m.partition, []).append((m.key, m.value))
    return {p: sorted(pairs, key=lambda kv: (kv[0], kv[1]["count"])) for p, pairs in out.items()}


def test_keyed_count_runs_in_batches_through_the_runtime_and_returns_outputs_and_stores() -> None:
    with _keyed_count(_events(20)) as runner:
        first = runner.run_batch()  # capped at 4 messages per partition
        assert first.messages == 8
        assert [r.task for r in first.results["keyedcounttask"]] == ["Partition 0", "Partition 1"]
        report = runner.run()
        assert report.messages == 12 and report.batches == {"keyedcounttask": 2}
        values = runner.values("delta.counts")
        assert len(values) == 20
        # Each task counts the messages of its partition (message i is in partition i % 2).
        stores = runner.store("counts")
        assert stores == {"Partition 0": {"k0": 4, "k1": 3, "k2": 3}, "Partition 1": {"k0": 3, "k1": 4, "k2": 3}}
        assert sorted((v["key"], v["count"]) for v in values) == sorted(
            (k, c) for counts in stores.values() for k, n in counts.items() for c in range(1, n + 1))
        assert runner.stores() == {"counts": stores}
        # Checkpoints record where each task is, as under `sparza run`.
        assert {name: cp.offsets for name, cp in runner._jobs[0].checkpoints.read_all().items()} == {
            "Partition 0": {"delta.events#0": "10"}, "Partition 1": {"delta.events#1": "10"}}
        assert not runner.run_batch().ran  # nothing new: no batch


def test_more_input_between_batches_continues_from_the_committed_state() -> None:
    with _keyed_count(_events(6)) as runner:
        runner.run()
        runner.add_input("delta.events", [TestMessage(b"x", key=b"k0", partition=0)])
        report = runner.run()
        assert report.messages == 1
        # Partition 0 held k0 once (message 0): the restored store goes on from there.
        assert runner.store("counts")["Partition 0"] == {"k0": 2, "k1": 1, "k2": 1}
        assert {"key": "k0", "count": 2} in runner.values("delta.counts")


def test_window_over_out_of_order_event_times_fires_on_explicit_watermarks() -> None:
    config = {"systems.mem.streams.events.watermark.lateness.ms": str(10**9)}  # only explicit watermarks count
    with TestRunner.of(EventTimeCount, config) as runner:
        runner.add_input("mem.events", [
            TestMessage({"key": "a", "n": 1}, timestamp=1500),
            TestMessage({"key": "a", "n": 2}, timestamp=200),
            TestMessage({"key": "b", "n": 4}, timestamp=1100),
            watermark(1000),
        ]).add_output("mem.windows")
        first = runner.run_batch()
        assert runner.values("mem.windows") == [{"key": "a", "start": 0, "end": 1000, "count": 1, "sum": 2}]
        assert first.late == 0
        # A message behind the watermark is late: counted, not folded into the fired window.
        runner.add_input("mem.events", [TestMessage({"key": "a", "n": 8}, timestamp=700),
                                        TestMessage({"key": "b", "n": 16}, timestamp=2500), watermark(2000)])
        second = runner.run_batch()
        assert second.late == 1
        assert runner.values("mem.windows")[1:] == [
            {"key": "a", "start": 1000, "end": 2000, "count": 1, "sum": 1},
            {"key": "b", "start": 1000, "end": 2000, "count": 1, "sum": 4}]
        # No watermark, no window: the open one waits; end-of-stream flushes it.
        runner.add_input("mem.events", [TestMessage({"key": "b", "n": 32}, timestamp=2600)])
        runner.run_batch()
        assert len(runner.values("mem.windows")) == 3
        runner.add_input("mem.events", [end_of_stream()])
        assert runner.run().ended
        assert runner.values("mem.windows")[3:] == [{"key": "b", "start": 2000, "end": 3000, "count": 2, "sum": 48}]
        # Once every window fired, the window store holds only its bookkeeping: no open window is left.
        assert runner.store("window-counts") == {"Partition 0": {"m|fired": 2000, "m|late": 1}}


def test_two_stage_application_repartitions_and_windows_through_intermediate_streams() -> None:
    config = {"app.example.input": "mem.events", "app.example.output": "mem.out", "app.example.partitions": "2",
              "systems.mem.streams.events.watermark.lateness.ms": "0"}
    events = [TestMessage({"key": f"k{i % 4}", "n": i}, partition=i % 2, timestamp=i * 100) for i in range(40)]
    with TestRunner.of(WindowedCount, config) as runner:
        runner.add_input("mem.events", events, partitions=2, bounded=True).add_output("mem.out", partitions=2)
        assert runner.jobs == ["main", "by-key"]
        report = runner.run()
        assert report.ended and report.late == 0
        got = sorted((v["key"], v["start"], v["count"], v["sum"]) for v in runner.values("mem.out"))
        expected: Counter[tuple[str, int]] = Counter()
        sums: Counter[tuple[str, int]] = Counter()
        for i in range(40):
            expected[(f"k{i % 4}", i * 100 // 1000 * 1000)] += 1
            sums[(f"k{i % 4}", i * 100 // 1000 * 1000)] += i
        assert got == sorted((k, s, n, sums[(k, s)]) for (k, s), n in expected.items())
        # The intermediate stream is readable too, with the control messages stage one wrote.
        inter = runner.outputs("mem.windowedcount-1-by-key", include_control=True)
        assert sum(1 for m in inter if m.key is not None) == 40


@pytest.mark.parametrize("mode", ["containers", "batches"])
def test_low_level_task_capabilities_window_end_of_stream_and_close_on_a_fake_clock(mode: str) -> None:
    SumTask.closed.clear()
    config = {"task.window.ms": "60000", "stores.sums.factory": "memory", "stores.sums.key.serde": "string",
              "stores.sums.msg.serde": "json", "systems.mem.samza.key.serde": "string",
              "systems.mem.samza.msg.serde": "json", "job.execution.mode": mode}
    with TestRunner.of(SumTask, config, tick_ms=1000) as runner:
        runner.add_input("mem.in", [TestMessage(1, key="a"), TestMessage(2, key="a"), TestMessage(5, key="b")],
                         bounded=True).add_output("mem.out")
        runner.run_batch()
        assert runner.values("mem.out") == [{"ended": "Partition 0"}]  # bounded input ended in this batch
        assert SumTask.closed == ["Partition 0"]
        assert runner.store("sums") == {"Partition 0": {"a": 3, "b": 5}}
        assert not runner.run_batch().ran  # the window timer is not due yet: no batch
        runner.advance_time(60_000)
        if mode == "containers":
            # A task whose inputs all ended left its container's run loop (Samza shuts it down): no window fires.
            assert not runner.run_batch().ran
            assert runner.values("mem.out") == [{"ended": "Partition 0"}]
        else:
            assert runner.run_batch().ran  # the micro-batch planner still plans a due window for it
            assert runner.values("mem.out")[1:] == [{"window": "a", "sum": 3}, {"window": "b", "sum": 5}]
    with TestRunner.of(SumTask, config, tick_ms=1000) as runner:
        runner.add_input("mem.in", [TestMessage(1, key="a"), TestMessage(2, key="a"), TestMessage(5, key="b")])
        runner.add_output("mem.out")
        assert runner.run_batch().ran
        assert not runner.run_batch().ran  # the window timer is not due yet: no batch
        runner.advance_time(60_000)
        assert runner.run_batch().ran  # a due window plans a batch of its own
        assert runner.values("mem.out") == [{"window": "a", "sum": 3}, {"window": "b", "sum": 5}]


def _run_with_fault(step: CommitStep | None, *, keep_plan: bool, late_input: bool = False) -> TestRunner:
    runner = _keyed_count(_events(24))
    if step is None:
        runner.run()
        if late_input:
            runner.add_input("delta.events", _events(4))
            runner.run()
        return runner
    runner.fail_at(step, task="Partition 0", batch=2)
    with pytest.raises(InjectedFault, match="Partition 0"):
        runner.run()
    if late_input:  # more input arrives while the job is down
        runner.add_input("delta.events", _events(4))
    runner.restart(keep_plan=keep_plan)
    runner.run()
    return runner


@pytest.mark.parametrize("keep_plan", [True, False], ids=["spark-checkpoint-kept", "spark-checkpoint-lost"])
@pytest.mark.parametrize("step", list(CommitStep), ids=[s.value for s in CommitStep])
def test_a_failure_after_any_commit_step_then_restart_gives_the_outputs_of_a_run_without_it(
        step: CommitStep, keep_plan: bool) -> None:
    with _run_with_fault(None, keep_plan=keep_plan, late_input=True) as clean, \
            _run_with_fault(step, keep_plan=keep_plan, late_input=True) as faulted:
        assert _outputs(faulted) == _outputs(clean)
        assert faulted.store("counts") == clean.store("counts")
        assert len(faulted.outputs("delta.counts")) == 28


def test_without_restart_the_failed_batch_is_retried_as_spark_retries_it() -> None:
    with _run_with_fault(None, keep_plan=True) as clean, _keyed_count(_events(24)) as runner:
        runner.fail_at("after-flush", task="Partition 1")
        with pytest.raises(InjectedFault):
            runner.run_batch()
        runner.run()
        assert _outputs(runner) == _outputs(clean)


def test_bad_input_gives_a_clear_error() -> None:
    with TestRunner.of(KeyedCountTask, KEYED_COUNT) as runner:
        runner.add_input("delta.events", [TestMessage({"not": "bytes"}, key=b"k")]).add_output("delta.counts")
        with pytest.raises(TestInputError, match=r"input message 0 of delta.events .*samza.msg.serde"):
            runner.run()
    with TestRunner.of(KeyedCountTask, KEYED_COUNT) as runner:
        runner.add_input("delta.events", [TestMessage(b"v", key=b"k", partition=3)], partitions=2)
        runner.add_output("delta.counts")
        with pytest.raises(TestInputError, match="partition 3 is out of range.*has 2 partitions"):
            runner.run()
    with TestRunner.of(KeyedCountTask, KEYED_COUNT) as runner:
        runner.add_input("delta.events", [TestMessage(b"v", key=b"k", timestamp="noon")])
        with pytest.raises(TestInputError, match="timestamp must be epoch ms"):
            runner.run()
    with TestRunner.of(KeyedCountTask, KEYED_COUNT) as runner:
        runner.add_input("delta.events", [TestMessage(b"v", key=b"k"), end_of_stream()]).add_output("delta.counts")
        with pytest.raises(TestInputError, match=r"end_of_stream\(\) in delta.events.*bounded=True"):
            runner.run()
    with pytest.raises(TestInputError, match="defined inside a function"):
        TestRunner.of(task_defined_in_a_function())
    with pytest.raises(TestInputError, match="not a commit step.*after-flush"):
        TestRunner.of(KeyedCountTask).fail_at("before-lunch")


def test_misuse_is_named() -> None:
    with _keyed_count(_events(2)) as runner:
        runner.run()
        with pytest.raises(TestInputError, match="the job has started"):
            runner.add_input("delta.other", [b"x"])
        with pytest.raises(TestInputError, match="no store 'count'.*counts"):
            runner.store("count")
        with pytest.raises(TestInputError, match="delta.nope is not a stream of this runner"):
            runner.outputs("delta.nope")
    # The job writes a stream the test did not declare: the error (a system error, not the task's) says how.
    with TestRunner.of(KeyedCountTask, KEYED_COUNT) as runner:
        runner.add_input("delta.events", [TestMessage(b"v", key=b"k")])
        with pytest.raises(JobFailedError, match="system error.*in-memory stream 'delta.counts' does not exist"
                                                 ".*add_output"):
            runner.run()


def test_samza_in_memory_system_factory_name_is_accepted(tmp_path: Path) -> None:
    from sparza.systems import get_system_factory
    from sparza.systems.inmemory import InMemorySystemFactory

    config = {"systems.x.samza.factory": "org.apache.samza.system.inmemory.InMemorySystemFactory"}
    from sparza.config import Config
    from sparza.config.samza import translate

    translated = translate(Config(config)).config
    assert isinstance(get_system_factory(translated, "x"), InMemorySystemFactory)


def _windowed_count(step: CommitStep | None, job: str) -> list[Any]:
    config = {"app.example.input": "mem.events", "app.example.output": "mem.out", "app.example.partitions": "2",
              "task.max.batch.messages": "10"}
    events = [TestMessage({"key": f"k{i % 3}", "n": i}, partition=i % 2, timestamp=i * 150) for i in range(60)]
    with TestRunner.of(WindowedCount, config) as runner:
        runner.add_input("mem.events", events, partitions=2, bounded=True).add_output("mem.out", partitions=2)
        if step is not None:
            runner.fail_at(step, job=job, batch=2)
            with pytest.raises(InjectedFault, match=job):
                runner.run()
            runner.restart(keep_plan=False)
        assert runner.run().ended
        return sorted((m.partition, m.value["key"], m.value["start"], m.value["count"], m.value["sum"])
                      for m in runner.outputs("mem.out"))


@pytest.mark.parametrize("job", ["main", "by-key"])
@pytest.mark.parametrize("step", [CommitStep.AFTER_FLUSH, CommitStep.AFTER_CHECKPOINT], ids=lambda s: s.value)
def test_an_application_stage_failing_mid_commit_restarts_to_the_same_windows(step: CommitStep, job: str) -> None:
    clean = _windowed_count(None, job)
    assert sum(count for *_, count, _ in clean) == 60
    assert _windowed_count(step, job) == clean


def _with_broadcast_table(mode: str, profiles: list[TestMessage], *, versioned: bool = False) -> TestRunner:
    """The keyed count with a broadcast bootstrap store ``profiles`` (built by Partition 0) in execution ``mode``."""
    runner = TestRunner.of(KeyedCountTask, {
        **KEYED_COUNT, "job.execution.mode": mode, "task.inputs": "delta.events",
        "task.broadcast.inputs": "delta.profiles#0", "stores.profiles.adstore.input": "delta.profiles",
        "stores.profiles.adstore.versioned": str(versioned).lower(),
        "systems.delta.streams.profiles.samza.bootstrap": "true"})
    runner.add_input("delta.events", _events(12), partitions=2).add_output("delta.counts", partitions=2)
    runner.add_input("delta.profiles", profiles)
    return runner


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["containers", "batches"])
def test_an_empty_broadcast_bootstrap_stream_holds_no_task(mode: str) -> None:
    """In container mode main input waits for the broadcast store's bootstrapped publication, as containers plan;
    with an empty stream the builder publishes an empty one in a batch that reads nothing, and every task goes on."""
    with _with_broadcast_table(mode, []) as runner:
        runner.run()
        per_task = Counter((i % 2, f"k{i % 3}") for i in range(12))   # each task counts its partition's keys
        assert sorted((v["key"], v["count"]) for v in runner.values("delta.counts")) == sorted(
            (key, c) for (_, key), n in per_task.items() for c in range(1, n + 1))


@pytest.mark.timeout(120)
def test_a_run_held_for_a_broadcast_publication_that_cannot_come_says_so_instead_of_passing_as_caught_up() -> None:
    """A versioned broadcast store publishes only once a version is complete (every partition sent its
    end-of-dataset marker); in container mode main input waits for that publication. With no marker, ``run()``
    (``--once``) cannot make progress: it stops naming the waiting tasks, the store and its builder."""
    from sparza.engine.errors import JobStalledError

    profiles = [TestMessage(b'{"c": 1}', key=b"k0")]
    with _with_broadcast_table("containers", profiles, versioned=True) as runner:
        with pytest.raises(JobStalledError, match=r"'Partition 0', 'Partition 1' wait for the bootstrapped "
                                                  r"publication of broadcast store 'profiles'.*task 'Partition 0'"):
            runner.run()
        assert runner.values("delta.counts") == []
    with _with_broadcast_table("batches", profiles, versioned=True) as runner:  # batches wait for no publication
        runner.run()
        assert len(runner.values("delta.counts")) == 12
