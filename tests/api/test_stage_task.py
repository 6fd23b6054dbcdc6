"""StageTask driven directly with envelopes, a collecting collector and real stores."""

from __future__ import annotations

import json

import pytest

from sparza.api import ApiError, StreamApplication, Windows, plan_application, stable_partition
from sparza.config import Config
from sparza.streams import IncomingMessageEnvelope, SystemStream, SystemStreamPartition

EVENTS = SystemStream("delta", "events")
MID = SystemStream("delta", "shop-1-by-key")
HERE = __name__


class JoinApp:
    """Fills a table from 'profiles', enriches 'clicks' by it, fans out, merges and sinks."""

    sunk: list = []

    def describe(self, app: StreamApplication) -> None:
        profiles = app.table("profiles")
        app.input("delta.profiles", serde="json").map(lambda m: (m["user"], m["name"])).send_to(profiles)
        clicks = app.input("delta.clicks", serde="json")
        enriched = clicks.join(profiles, lambda m: m["user"], lambda m, name: {**m, "name": name})
        doubled = enriched.flat_map(lambda m: [m, {**m, "copy": True}])
        other = app.input("delta.more", serde="string").map(lambda s: {"user": s, "name": "?"})
        doubled.merge(other).filter(lambda m: m["user"] != "skip").send_to(app.output("delta.out", key_serde="string"))
        clicks.sink(lambda m, collector, coordinator: JoinApp.sunk.append(m))


def env(stream: SystemStream, value, ts=None, partition=0, key=None, offset="0"):
    return IncomingMessageEnvelope(SystemStreamPartition(stream.system, stream.stream, partition), offset, key,
                                   value, ts)


def config(app_class: str, **extra) -> Config:
    return Config({"job.name": "shop", "app.class": app_class, "stores.profiles.factory": "memory",
                   "stores.profiles.key.serde": "string", "stores.profiles.msg.serde": "string", **extra})


def init_stage(make_context, plan, name, task="Partition 0"):
    from sparza.api import StageTask

    stage = plan.stage(name)
    ctx = make_context(stage.config, task)
    task_obj = StageTask()
    task_obj.init(ctx)
    return task_obj, ctx


def test_app_class_of_a_test_module_is_importable():
    # StageTask imports app.class by name: test modules are registered under their dotted name.
    counts = {SystemStream("delta", n): 1 for n in ("profiles", "clicks", "more")}
    plan = plan_application(config(f"{HERE}.JoinApp"), counts)
    assert [s.name for s in plan.stages] == ["main"]


def test_table_join_flat_map_merge_filter_send_to_and_sink(make_context, collector, coordinator):
    counts = {SystemStream("delta", n): 1 for n in ("profiles", "clicks", "more")}
    plan = plan_application(config(f"{HERE}.JoinApp"), counts)
    task, ctx = init_stage(make_context, plan, "main")
    JoinApp.sunk.clear()
    task.process(env(SystemStream("delta", "profiles"), json.dumps({"user": "u1", "name": "Ann"}).encode()),
                 collector, coordinator)
    assert ctx.get_store("profiles").get("u1") == "Ann"
    task.process(env(SystemStream("delta", "clicks"), json.dumps({"user": "u1"}).encode(), ts=5, key=b"u1"),
                 collector, coordinator)
    task.process(env(SystemStream("delta", "clicks"), json.dumps({"user": "nobody"}).encode(), ts=6),
                 collector, coordinator)
    task.process(env(SystemStream("delta", "more"), b"u9"), collector, coordinator)
    task.process(env(SystemStream("delta", "more"), b"skip"), collector, coordinator)
    out = [(json.loads(e.message), e.key, e.timestamp, str(e.system_stream)) for e in collector.sent]
    assert out == [({"user": "u1", "name": "Ann"}, b"u1", 5, "delta.out"),
                   ({"user": "u1", "name": "Ann", "copy": True}, b"u1", 5, "delta.out"),
                   ({"user": "u9", "name": "?"}, None, None, "delta.out")]
    assert JoinApp.sunk == [{"user": "u1"}, {"user": "nobody"}]  # the sink sees clicks before the join
    # The click without a profile: no output, counted (nothing dropped without a trace).
    unmatched = {k: v for k, v in ctx.metrics.snapshot().get("api", {}).items() if k.endswith("-unmatched")}
    assert list(unmatched.values()) == [1], unmatched


def test_partition_by_writes_key_and_stable_partition(make_context, collector, coordinator):
    cfg = config("sparza.api.examples.WindowedCount", **{"app.example.partitions": "5"})
    plan = plan_application(cfg, {EVENTS: 2})
    task, _ = init_stage(make_context, plan, "main")
    for key in ("a", "b", "c"):
        task.process(env(EVENTS, json.dumps({"key": key, "n": 1}).encode(), ts=42), collector, coordinator)
    assert [e.system_stream for e in collector.sent] == [MID] * 3
    for e, key in zip(collector.sent, "abc", strict=True):
        assert e.key == json.dumps(key).encode() and e.timestamp == 42
        assert e.partition == stable_partition(e.key, 5)
        assert json.loads(e.message) == {"key": key, "n": 1}


def test_windows_downstream_fire_on_watermark_once_and_flush_at_end(make_context, collector, coordinator):
    plan = plan_application(config("sparza.api.examples.WindowedCount", **{"app.example.window.ms": "10"}),
                            {EVENTS: 1})
    task, ctx = init_stage(make_context, plan, "by-key")
    for key, n, ts in [("a", 1, 1), ("a", 2, 9), ("b", 5, 3), ("a", 7, 14)]:
        task.process(env(MID, json.dumps({"key": key, "n": n}).encode(), ts=ts, key=json.dumps(key).encode()),
                     collector, coordinator)
    assert collector.sent == []
    task.on_watermark(10, collector, coordinator)
    panes = [json.loads(e.message) for e in collector.sent]
    assert panes == [{"key": "a", "start": 0, "end": 10, "count": 2, "sum": 3},
                     {"key": "b", "start": 0, "end": 10, "count": 1, "sum": 5}]
    assert [e.timestamp for e in collector.sent] == [9, 9]
    task.on_watermark(10, collector, coordinator)
    assert len(collector.sent) == 2  # fired once
    # A late message (its window fired) is counted and dropped by default.
    task.process(env(MID, json.dumps({"key": "a", "n": 100}).encode(), ts=2), collector, coordinator)
    assert task.late_messages == 1 and ctx.metrics.snapshot()["control"]["late-messages"] == 1
    task.on_end_of_stream(collector, coordinator)
    task.on_end_of_stream(collector, coordinator)
    assert [json.loads(e.message) for e in collector.sent[2:]] == [
        {"key": "a", "start": 10, "end": 20, "count": 1, "sum": 7}]


def test_late_messages_can_be_routed(make_context, collector, coordinator):
    cfg = config("sparza.api.examples.WindowedCount", **{"app.example.window.ms": "10",
                                                        "task.late.messages.policy": "route",
                                                        "task.late.messages.stream": "delta.late"})
    task, _ = init_stage(make_context, plan_application(cfg, {EVENTS: 1}), "by-key")
    task.on_watermark(50, collector, coordinator)
    task.process(env(MID, json.dumps({"key": "a", "n": 1}).encode(), ts=7), collector, coordinator)
    assert [(str(e.system_stream), json.loads(e.message), e.timestamp) for e in collector.sent] == [
        ("delta.late", {"key": "a", "n": 1}, 7)]


def test_window_state_survives_a_new_task_instance(make_context, collector, coordinator, tmp_path):
    plan = plan_application(config("sparza.api.examples.WindowedCount", **{"app.example.window.ms": "10"}),
                            {EVENTS: 1})
    task, ctx = init_stage(make_context, plan, "by-key")
    task.process(env(MID, json.dumps({"key": "a", "n": 1}).encode(), ts=1), collector, coordinator)
    task.on_watermark(10, collector, coordinator)
    task.process(env(MID, json.dumps({"key": "a", "n": 2}).encode(), ts=11), collector, coordinator)
    for store in ctx.stores.values():
        store.close()
    again, _ = init_stage(make_context, plan, "by-key")
    again.on_watermark(10, collector, coordinator)  # a replayed watermark fires nothing twice
    again.on_watermark(20, collector, coordinator)
    assert [json.loads(e.message)["sum"] for e in collector.sent] == [1, 2]


def test_message_of_a_foreign_stream_is_refused(make_context, collector, coordinator):
    plan = plan_application(config("sparza.api.examples.WindowedCount"), {EVENTS: 1})
    task, _ = init_stage(make_context, plan, "by-key")
    with pytest.raises(ApiError, match="none of its inputs"):
        task.process(env(EVENTS, b"{}"), collector, coordinator)


def test_wrong_stage_name_lists_the_stages(make_context):
    from sparza.api import StageTask

    cfg = plan_application(config("sparza.api.examples.WindowedCount"), {EVENTS: 1}).stage("main").config
    with pytest.raises(ApiError, match="main, by-key"):
        StageTask().init(make_context(cfg.with_overrides({"app.stage": "zzz"})))


def test_windows_need_event_time(make_context, collector, coordinator):
    from sparza.api import WindowError

    task, _ = init_stage(make_context, plan_application(config("sparza.api.examples.WindowedCount"), {EVENTS: 1}),
                         "by-key")
    with pytest.raises(WindowError, match="without event time"):
        task.process(env(MID, json.dumps({"key": "a", "n": 1}).encode()), collector, coordinator)


class SlidingApp:
    def describe(self, app: StreamApplication) -> None:
        (app.input("delta.events", serde="json")
         .window(Windows.sliding(10, 5, lambda m: "all", 0, lambda m, acc: acc + 1, timestamp_fn=lambda m: m["t"]))
         .map(lambda pane: [pane.start, pane.end, pane.value])
         .send_to(app.output("delta.out")))


def test_sliding_window_with_timestamp_fn_in_a_single_stage(make_context, collector, coordinator):
    plan = plan_application(config(f"{HERE}.SlidingApp"), {EVENTS: 1})
    task, _ = init_stage(make_context, plan, "main")
    for t in (1, 6, 11):
        task.process(env(EVENTS, json.dumps({"t": t}).encode()), collector, coordinator)
    task.on_watermark(10, collector, coordinator)
    task.on_end_of_stream(collector, coordinator)
    assert [json.loads(e.message) for e in collector.sent] == [[-5, 5, 1], [0, 10, 2], [5, 15, 2], [10, 20, 1]]


def test_intermediate_key_that_is_not_json_is_a_serde_error(make_context, collector, coordinator):
    from sparza.errors import SerdeError

    task, _ = init_stage(make_context, plan_application(config("sparza.api.examples.WindowedCount"), {EVENTS: 1}),
                         "by-key")
    with pytest.raises(SerdeError, match="not the JSON key"):
        task.process(env(MID, json.dumps({"key": "a", "n": 1}).encode(), ts=1, key=b"\xff-raw"), collector, coordinator)
