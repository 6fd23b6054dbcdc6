"""Whole applications driven in-process the way the runtime drives them (TaskControl around StageTask,
batch by batch, checkpoints as JSON) over in-memory partitioned streams: termination, exact counts,
windows firing once, restarts between end-of-stream messages, idle and early-ended upstream tasks,
late messages. The same scenarios on Spark and Delta are in test_e2e_spark.py."""

from __future__ import annotations

import json
from collections import Counter

from tests.control.conftest import pane_map, windowed_expectation

from sparza.api import plan_application
from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream

EVENTS = SystemStream("delta", "events")
OUT = SystemStream("delta", "out")
LATE = SystemStream("delta", "late")


def cfg(app: str, **extra) -> Config:
    return Config({"job.name": "shop", "app.class": f"sparza.api.examples.{app}", "app.window.store.factory": "memory",
                   **extra})


def load(streams, row_cls, events: list[tuple[int, str, int, int]], partitions: int) -> None:
    """events: (partition, key, n, timestamp)."""
    streams.create(EVENTS, partitions)
    for p, key, n, ts in events:
        streams.data[EVENTS][p].append(row_cls(key.encode(), json.dumps({"key": key, "n": n}).encode(), ts))


def make_events(count: int, partitions: int, keys: int = 7, spread_ms: int = 100) -> list[tuple[int, str, int, int]]:
    return [(i % partitions, f"k{i % keys}", i, i * spread_ms // 10) for i in range(count)]


def panes(streams) -> dict[tuple[str, int], tuple[int, int]]:
    """The panes written to ``OUT`` by (key, start); a pane seen twice fails."""
    return pane_map([json.loads(row.value) for row in streams.user_rows(OUT)])


def test_two_stage_repartition_terminates_with_exact_counts(memory_streams, row_cls, pipeline_cls, tmp_path):
    events = [*make_events(60, 2), (0, "neg", -1, 5)]
    load(memory_streams, row_cls, events, 2)
    plan = plan_application(cfg("RepartitionCount", **{"app.example.partitions": "3"}), {EVENTS: 2})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS})
    pipe.run()
    rows = memory_streams.user_rows(OUT)
    assert len(rows) == 60
    assert Counter(json.loads(r.value)["key"] for r in rows) == Counter(k for _, k, n, _ in events if n >= 0)
    assert all(json.loads(r.value)["seen"] == "stage2" for r in rows)
    mid = SystemStream("delta", "shop-1-by-key")
    # Every upstream task wrote end-of-stream to each of the 3 intermediate partitions.
    assert sum(1 for part in memory_streams.data[mid] for r in part if r.type == 2) == 2 * 3


def test_three_stage_windows_fire_exactly_once_with_right_contents(memory_streams, row_cls, pipeline_cls, tmp_path):
    events = make_events(90, 3)
    load(memory_streams, row_cls, events, 3)
    plan = plan_application(cfg("ThreeStageCount", **{"app.example.window.ms": "200", "app.example.partitions": "2"}),
                            {EVENTS: 3})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS})
    pipe.run()
    bucket = lambda k: f"b{sum(map(ord, k)) % 3}"  # noqa: E731
    assert panes(memory_streams) == windowed_expectation(events, 200, bucket)


def test_windows_fire_on_watermarks_before_the_end(memory_streams, row_cls, pipeline_cls, tmp_path):
    events = make_events(60, 2)
    load(memory_streams, row_cls, events, 2)
    plan = plan_application(cfg("WindowedCount", **{"app.example.window.ms": "100"}), {EVENTS: 2})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS}, max_rows=4)
    for _ in range(5):
        pipe.run_round()
    early = panes(memory_streams)
    assert early and not pipe.done()  # some windows fired from watermarks alone
    pipe.run()
    assert panes(memory_streams) == windowed_expectation(events, 100)


def test_restart_between_end_of_stream_messages_still_terminates(memory_streams, row_cls, pipeline_cls, tmp_path):
    events = make_events(40, 2)
    load(memory_streams, row_cls, events, 2)
    # RocksDB window stores: they outlive the task instances, as restored stores do in the runtime.
    plan = plan_application(cfg("WindowedCount", **{"app.example.window.ms": "100",
                                                    "app.window.store.factory": "rocksdb"}), {EVENTS: 2})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS}, max_rows=1)
    pipe.run(stage_names=["main"])
    # Stage 2 reads one row per batch: stop after its first task has seen one end-of-stream, not both.
    for _ in range(200):
        pipe.run_round(["by-key"])
        control = pipe.checkpoints[("by-key", "Partition 0")]["control"]
        producers = next(iter(control["ssps"].values()))["producers"]
        if sum(p["ended"] for p in producers.values()) == 1:
            break
    else:
        raise AssertionError("never saw exactly one end-of-stream")
    pipe.restart()  # the in-memory state is gone; tasks restore from checkpoints
    pipe.run()
    assert panes(memory_streams) == windowed_expectation(events, 100)


def _idle_run(memory_streams, row_cls, pipeline_cls, tmp_path, quorum: str):
    # Partition 1 of the source is unbounded and silent: upstream task 1 never has a watermark.
    events = [(0, f"k{i % 3}", i, i * 10) for i in range(30)]
    load(memory_streams, row_cls, events, 2)
    plan = plan_application(cfg("WindowedCount", **{"app.example.window.ms": "50",
                                                    "task.watermark.idle.timeout.ms": "150",
                                                    "task.watermark.quorum.percentage": quorum}), {EVENTS: 2})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, set(), max_rows=5)
    for _ in range(12):
        pipe.run_round()
    return events, pipe


def test_idle_upstream_task_with_quorum_lets_the_watermark_advance(memory_streams, row_cls, pipeline_cls, tmp_path):
    events, pipe = _idle_run(memory_streams, row_cls, pipeline_cls, tmp_path, "0.5")
    got = panes(memory_streams)
    want = windowed_expectation(events, 50)
    assert got and all(want[k] == v for k, v in got.items())  # fired windows are complete
    assert not pipe.done()


def test_idle_upstream_task_without_quorum_holds_the_watermark(memory_streams, row_cls, pipeline_cls, tmp_path):
    _, pipe = _idle_run(memory_streams, row_cls, pipeline_cls, tmp_path, "1.0")
    assert panes(memory_streams) == {}
    assert all(pipe.runs[("by-key", t)].control.watermark() is None for t in ("Partition 0", "Partition 1"))


def test_early_ended_upstream_neither_stalls_nor_jumps_the_watermark(memory_streams, row_cls, pipeline_cls, tmp_path):
    # Source partition 1 is bounded and empty: upstream task 1 ends at once.
    events = [(0, f"k{i % 3}", i, i * 10) for i in range(40)]
    load(memory_streams, row_cls, events, 2)
    plan = plan_application(cfg("WindowedCount", **{"app.example.window.ms": "50"}), {EVENTS: 2})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS}, max_rows=4)
    for _ in range(4):
        pipe.run_round()
    early = panes(memory_streams)
    assert early, "the watermark stalled behind the ended upstream task"
    assert all(windowed_expectation(events, 50)[k] == v for k, v in early.items()), "a window fired before its data"
    pipe.run()
    assert panes(memory_streams) == windowed_expectation(events, 50)
    assert all(r.control.late_count == 0 and r.task.late_messages == 0 for r in pipe.runs.values())


def test_late_source_messages_are_counted_and_dropped(memory_streams, row_cls, pipeline_cls, tmp_path):
    events = [(0, "a", 1, 100), (0, "a", 2, 300), (0, "a", 3, 50), (0, "a", 4, 310)]
    load(memory_streams, row_cls, events, 1)
    plan = plan_application(cfg("RepartitionCount"), {EVENTS: 1})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS}, max_rows=10)
    pipe.run()
    assert sorted(json.loads(r.value)["n"] for r in memory_streams.user_rows(OUT)) == [1, 2, 4]
    assert pipe.runs[("main", "Partition 0")].control.late_count == 1


def test_late_source_messages_are_routed_when_configured(memory_streams, row_cls, pipeline_cls, tmp_path):
    events = [(0, "a", 1, 100), (0, "a", 2, 300), (0, "a", 3, 50), (0, "a", 4, 280)]
    load(memory_streams, row_cls, events, 1)
    plan = plan_application(cfg("RepartitionCount", **{"task.late.messages.policy": "route",
                                                       "task.late.messages.stream": "delta.late",
                                                       "systems.delta.streams.events.watermark.lateness.ms": "25"}),
                            {EVENTS: 1})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS}, max_rows=10)
    pipe.run()
    assert sorted(json.loads(r.value)["n"] for r in memory_streams.user_rows(OUT)) == [1, 2, 4]  # 280 >= 300 - 25
    assert [json.loads(r.value)["n"] for r in memory_streams.user_rows(LATE)] == [3]


def test_control_messages_are_outgoing_envelopes(memory_streams, row_cls, pipeline_cls, tmp_path):
    load(memory_streams, row_cls, [(0, "a", 1, 10)], 1)
    plan = plan_application(cfg("RepartitionCount"), {EVENTS: 1})
    pipe = pipeline_cls(plan, memory_streams, tmp_path, {EVENTS})
    pipe.run_round(["main"])
    mid = memory_streams.data[SystemStream("delta", "shop-1-by-key")][0]
    assert [r.type for r in mid] == [0, 1, 2]  # data, then watermark, then end-of-stream, in one batch
    assert json.loads(mid[1].value) == {"version": 1, "taskName": "Partition 0", "taskCount": 1, "timestamp": 10}
    assert isinstance(OutgoingMessageEnvelope, type)
