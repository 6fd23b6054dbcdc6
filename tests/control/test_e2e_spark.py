"""End to end on real Spark and Delta: multi-stage applications over bounded input end by
themselves with exact results; windows fire once; stages as separate jobs give the same output;
idle and early-ended upstream tasks; late messages. (kill -9 restarts: test_e2e_restart.py.)"""

from __future__ import annotations

import json

import pytest

from sparza.api import plan_application
from sparza.control.messages import samza_aggregate_partition

pytestmark = pytest.mark.spark


def events_for(count: int, partitions: int, keys: int = 5, step_ms: int = 7) -> list[tuple[int, str, int, int]]:
    return [(i % partitions, f"k{i % keys}", i, i * step_ms) for i in range(count)]


def test_two_stage_windows_one_processor_and_separate_jobs_agree(e2e, expect_windows, panes_of):
    events = events_for(120, 2)
    a = e2e.config("WindowedCount", **{"app.example.window.ms": 100, "app.example.partitions": 3,
                                       "task.max.batch.messages": 30})
    e2e.load(a, events, 2, outputs=("out", "out2"))
    # One processor: `sparza run` of the app config runs both stages as queries of one SparkSession.
    outcome = e2e.run_app(a)
    assert outcome.exit_code == 0 and outcome.reason == "all inputs ended"
    one = panes_of(e2e.values(a))
    assert one == expect_windows(events, 100)
    # The same application as separate jobs (`--stage main`, then `--stage by-key`), under another job id.
    b = a.with_overrides({"job.id": "2", "app.example.output": "delta.out2"})
    for stage in [s.name for s in plan_application(b).stages]:
        assert e2e.run_app(b, stage=stage).reason == "all inputs ended"
    assert panes_of(e2e.values(b, "out2")) == one


def test_three_stage_pipeline_terminates_with_windows_fired_once(e2e, expect_windows, panes_of):
    events = events_for(90, 3)
    cfg = e2e.config("ThreeStageCount", **{"app.example.window.ms": 200, "app.example.partitions": 2,
                                           "task.max.batch.messages": 40})
    e2e.load(cfg, events, 3)
    plan = plan_application(cfg)
    assert [s.name for s in plan.stages] == ["main", "by-key", "by-bucket"]
    outcome = e2e.run_app(cfg)
    assert outcome.exit_code == 0 and outcome.reason == "all inputs ended"
    bucket = lambda k: f"b{sum(map(ord, k)) % 3}"  # noqa: E731
    assert panes_of(e2e.values(cfg)) == expect_windows(events, 200, bucket)


def test_repartition_delivers_a_message_behind_the_watermark_because_no_window_needs_it_on_time(e2e):
    # Partition 0 goes back in time once by more than the allowed lateness. Lateness only means
    # something to windows: a stage without one delivers it, and nothing is routed as late.
    events = [(0, "a", 1, 1000), (0, "a", 2, 1010), (0, "b", 3, 400), (0, "b", 4, 1002),
              (1, "c", 5, 20), (1, "c", 6, 30)]
    cfg = e2e.config("RepartitionCount", **{
                                            "systems.delta.streams.events.watermark.lateness.ms": 10,
                                            "task.late.messages.policy": "route",
                                            "task.late.messages.stream": "delta.late",
                                            "systems.delta.streams.late.samza.msg.serde": "json"})
    e2e.load(cfg, events, 2, outputs=("out", "late"))
    plan = plan_application(cfg)
    plan.create_streams()
    e2e.run_stages([s.config for s in plan.stages])
    assert sorted(v["n"] for v in e2e.values(cfg)) == [1, 2, 3, 4, 5, 6]
    assert e2e.values(cfg, "late") == []
    cps = e2e.checkpoints(plan.stage("main").config)
    assert sum(cp.control["lateCount"] for cp in cps.values()) == 0


def test_early_ended_upstream_task_neither_stalls_nor_jumps_the_watermark(e2e, expect_windows, panes_of):
    # Source partition 1 is bounded and empty: upstream task "Partition 1" ends in its first batch.
    events = [(0, f"k{i % 3}", i, i * 10) for i in range(24)]
    cfg = e2e.config("WindowedCount", **{"app.example.window.ms": 50, "task.max.batch.messages": 6})
    e2e.load(cfg, events, 2)
    plan = plan_application(cfg)
    plan.create_streams()
    e2e.run_stages([s.config for s in plan.stages])
    rows = [(off, v) for off, t, v in e2e.rows(cfg) if t == 0]
    assert panes_of(e2e.values(cfg)) == expect_windows(events, 50)
    # Windows fired from watermarks while data still flowed (several commits), not only at the end.
    assert len({off.split(":")[0] for off, _ in rows}) >= 2
    for stage in plan.stages:
        assert all(cp.control["lateCount"] == 0 for cp in e2e.checkpoints(stage.config).values())


def test_idle_upstream_task_with_quorum_advances_without_holds(e2e, expect_windows, panes_of):
    # Source partition 1 is unbounded and silent: upstream task "Partition 1" never has a watermark.
    first = [(0, f"k{i % 3}", i, i * 10) for i in range(20)]
    cfg = e2e.config("WindowedCount", **{"app.example.window.ms": 50, "task.max.batch.messages": 2,
                                         "systems.delta.streams.events.bounded": "false",
                                         "task.watermark.idle.timeout.ms": 1000})
    e2e.load(cfg, first, 2, outputs=("out", "out-noq"))
    plan = plan_application(cfg)
    plan.create_streams()
    # Two jobs read the same intermediate stream: with quorum 0.5 (1 of 2 producers) and with 1.0.
    quorum = plan.stage("by-key").config.with_overrides({"task.watermark.quorum.percentage": "0.5"})
    no_quorum = plan.stage("by-key").config.with_overrides({
        "task.watermark.quorum.percentage": "1.0", "job.name": "shop-by-key-noq",
        "app.example.output": "delta.out-noq", "job.logged.store.base.dir": str(e2e.work / "state-noq")})
    fed = list(first)

    def no_quorum_heard_watermarks() -> bool:
        cps = e2e.checkpoints(no_quorum)
        # A checkpoint committed before the first control message carries no control section yet.
        return bool(cps) and all(cp.control is not None and any(
            p["watermark"] is not None for ssp in cp.control["ssps"].values() for p in ssp["producers"].values())
            for cp in cps.values())

    def feed_until_panes() -> bool:
        # Keep partition 0 alive (new events, later event times) so its producer stays active, until the
        # quorum job fired windows and the other job has seen the same producer's watermarks.
        if e2e.values(cfg) and no_quorum_heard_watermarks():
            return True
        n = len(fed)
        more = [(0, f"k{i % 3}", i, i * 10) for i in range(n, n + 4)]
        e2e.append(cfg, more)
        fed.extend(more)
        return False

    e2e.run_stages([plan.stage("main").config, quorum, no_quorum], stop_when=feed_until_panes, timeout_s=180)
    got = panes_of(e2e.values(cfg))
    want = expect_windows(fed, 50)
    assert got, "the watermark did not advance past the idle upstream task"
    assert all(want[k] == v for k, v in got.items()), "a window fired before all its data"
    # Without quorum the same input held the watermark: no window fired, no watermark at all.
    assert e2e.values(cfg, "out-noq") == []
    cps = e2e.checkpoints(no_quorum)
    assert cps and all(cp.control["watermark"] is None for cp in cps.values())


def test_two_stages_speaking_samzas_control_protocol_end_by_themselves(e2e, expect_windows, panes_of):
    """The intermediate stream configured for Samza's protocol on both sides. Upstream tasks
    write Samza's bodies (no taskCount) to the aggregate partition only; the downstream task reading it
    counts producers from control.producer.count and re-broadcasts to the other partitions; the job
    ends by itself with exact windows."""
    events = events_for(60, 2)
    cfg = e2e.config("WindowedCount", **{"app.example.window.ms": 100, "app.example.partitions": 3,
                                         "task.max.batch.messages": 20})
    e2e.load(cfg, events, 2)
    plan = plan_application(cfg)
    plan.create_streams()
    mid = plan.stage("by-key").intermediate_inputs[0]
    samza = {f"systems.{mid.system}.streams.{mid.stream}.control.format": "samza",
             f"systems.{mid.system}.streams.{mid.stream}.control.producer.count": "2"}
    outcomes = e2e.run_stages([s.config.with_overrides(samza) for s in plan.stages])
    assert all(o.reason == "all inputs ended" for o in outcomes), outcomes
    assert panes_of(e2e.values(cfg)) == expect_windows(events, 100)
    agg = samza_aggregate_partition(mid.stream, 3)
    for partition in range(3):
        bodies = [json.loads(v) for _, t, v in e2e.rows(cfg, mid.stream, partition) if t != 0]
        assert bodies and all("taskCount" not in b and b["version"] == 1 for b in bodies)
        names = {b["taskName"] for b in bodies}
        # per-task messages on the aggregate partition only; the others get the re-broadcast (no task name)
        assert names == ({"Partition 0", "Partition 1"} if partition == agg else {None}), (partition, names)
