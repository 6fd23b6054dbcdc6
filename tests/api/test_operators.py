"""The join, session and trigger operators piece by piece: declarations and their errors, planning checks,
and each operator's state in a real RocksDB store on hand-worked cases (including a restart over the same
store). Generated inputs through the runtime are in test_operators_runner.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sparza.api import (
    ApiError,
    JoinSpec,
    PaneKind,
    SessionSpec,
    StreamApplication,
    Trigger,
    TriggerError,
    Triggers,
    WindowError,
    WindowPane,
    Windows,
    every,
    plan_application,
)
from sparza.api.join_state import JoinState
from sparza.api.session_state import SessionState
from sparza.api.stage_task import table_row
from sparza.api.window_state import TriggeredWindowState, WindowState, window_state
from sparza.config import Config
from sparza.control import TaskControl
from sparza.serde import JsonSerde, StringSerde
from sparza.state.kv import RocksDbStore
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStream, SystemStreamPartition
from sparza.task import DrainListenerTask


def count_sum(m: dict[str, int], acc: list[int]) -> list[int]:
    return [acc[0] + 1, acc[1] + m["n"]]


def _store(tmp_path: Any, name: str = "s") -> RocksDbStore:
    return RocksDbStore(tmp_path / name, StringSerde(), JsonSerde())


def _panes(panes: list[WindowPane]) -> list[tuple[Any, ...]]:
    return [(p.key, p.start, p.end, p.value, str(p.pane), p.index) for p in panes]


# --- declarations ----------------------------------------------------------------------------------------
def test_triggers_every_and_samzas_spellings() -> None:
    assert every(3) == Trigger(messages=3) and every(timedelta(seconds=2)) == Trigger(interval_ms=2000)
    assert every(ms=500) == Trigger(interval_ms=500) and every(messages=10, ms=60_000) == Trigger(10, 60_000)
    assert Triggers.count(5) == Trigger(messages=5, repeat=False)
    assert Triggers.repeat(Triggers.count(5)) == every(5)
    assert Triggers.timeSinceFirstMessage(timedelta(minutes=1)) == Trigger(interval_ms=60_000, repeat=False)
    assert Triggers.any(Triggers.count(100), Triggers.timeSinceFirstMessage(1000)) == Trigger(100, 1000, False)
    for bad in (lambda: every(0), lambda: every(ms=0), lambda: every(), lambda: every("5")):  # type: ignore[arg-type]
        with pytest.raises(TriggerError):
            bad()
    # a window fires on count when its pending messages reach it, once for a one-shot trigger
    assert every(2).fires_on_count(2, 5) and not Triggers.count(2).fires_on_count(2, 1)
    # an interval trigger fires when the watermark crosses origin + k * interval
    assert every(ms=10).fires_on_time(0, 5, 12, 0) and not every(ms=10).fires_on_time(0, 11, 19, 0)
    assert not every(ms=10).fires_on_time(0, None, 9, 0) and every(ms=10).fires_on_time(0, None, 10, 0)


def test_bad_window_declarations_name_the_operator_and_what_to_do() -> None:
    with pytest.raises(WindowError, match=r"Windows.session: gap must be > 0 ms, got -5.*pause"):
        Windows.session(-5, lambda m: m, 0, count_sum)
    with pytest.raises(WindowError, match=r"Windows.tumbling: early='hourly' is not a trigger; use every"):
        Windows.tumbling(10, lambda m: m, 0, count_sum, early="hourly")  # type: ignore[arg-type]
    with pytest.raises(WindowError, match="never fires without allowed lateness"):
        Windows.sliding(10, 5, lambda m: m, 0, count_sum, late=every(1))
    with pytest.raises(WindowError, match="allowed_lateness_ms must be >= 0"):
        Windows.session(10, lambda m: m, 0, count_sum, allowed_lateness_ms=-1)
    spec = Windows.tumbling(timedelta(seconds=1), lambda m: m, 0, count_sum)
    assert not spec.triggered and spec.size_ms == 1000
    with_early = spec.setEarlyTrigger(every(2))
    assert with_early.early == every(2) and with_early.triggered and spec.early is None
    with pytest.raises(WindowError, match="never fires"):
        spec.setLateTrigger(every(1))
    assert spec.with_triggers(allowed_lateness_ms=50, late=every(1)).late == every(1)
    samza = Windows.keyedSessionWindow(lambda m: m["user"], timedelta(minutes=30), lambda: [0, 0], count_sum)
    assert isinstance(samza, SessionSpec) and samza.gap_ms == 1_800_000 and samza.initial() == [0, 0]
    assert Windows.keyedTumblingWindow(lambda m: m, 100, 0, count_sum).kind == "tumbling"
    assert Windows.tumblingWindow(100, 0, count_sum).key_fn({"x": 1}) is None
    app = StreamApplication(Config())
    with pytest.raises(ApiError, match="Windows.tumbling/sliding/session"):
        app.input("mem.a").window("ten minutes")  # type: ignore[arg-type]


class ByOrder:
    """A Samza-style JoinFunction."""

    def apply(self, message: Any, other: Any) -> Any:
        return (message, other)

    def getFirstKey(self, message: Any) -> Any:
        return message["order"]

    def getSecondKey(self, message: Any) -> Any:
        return message["order"]


def test_bad_join_declarations_name_the_join_and_what_to_do() -> None:
    app = StreamApplication(Config())
    a, b = app.input("mem.a"), app.input("mem.b")
    with pytest.raises(ApiError, match=r"join 'j' needs within=.*lets the watermark drop both buffers"):
        a.join(b, lambda m: m, lambda m: m, lambda x, y: x, name="j")
    with pytest.raises(ApiError, match="kind 'cross' is not one of inner, left, outer"):
        a.join(b, lambda m: m, lambda m: m, lambda x, y: x, within=5, kind="cross")
    with pytest.raises(ApiError, match="within must be >= 0"):
        a.join(b, lambda m: m, lambda m: m, lambda x, y: x, within=-1)
    with pytest.raises(ApiError, match="joined with itself"):
        a.join(a, lambda m: m, lambda m: m, lambda x, y: x, within=5)
    with pytest.raises(ApiError, match="another application"):
        a.join(StreamApplication(Config()).input("mem.c"), lambda m: m, lambda m: m, lambda x, y: x, within=5)
    with pytest.raises(ApiError, match="is not a JoinFunction"):
        a.join(b, object(), within=5)
    with pytest.raises(ApiError, match="give the time bound once"):
        a.join(b, lambda m: m, lambda m: m, lambda x, y: x, within=5, ttl=5)
    joined = a.join(b, ByOrder(), "string", "json", "json", timedelta(seconds=2), "by-order")
    spec: JoinSpec = joined.op.params["spec"]
    assert (spec.within_ms, spec.kind, joined.op.params["store"]) == (2000, "inner", "join-by-order")
    assert spec.key_fn({"order": 7}) == 7 and spec.join_fn(1, 2) == (1, 2)
    with pytest.raises(ApiError, match="join name 'by-order' is used twice"):
        a.join(b, ByOrder(), within=1, name="by-order")
    table_join = a.join(app.table("profiles"), lambda m: m, lambda m, p: p)  # the stream-table join still works
    assert table_join.op.kind.value == "join"


class _Joined:
    """A join of two source streams (``app.test.within.ms``), optionally then repartitioned by its result."""

    def describe(self, app: StreamApplication) -> None:
        left, right = app.input("mem.left", serde="json"), app.input("mem.right", serde="json")
        joined = left.join(right, lambda m: m["k"], lambda m: m["k"], lambda x, y: {"k": (x or y)["k"]},
                           within=int(app.config.get_str("app.test.within.ms", "100")), kind="left", name="lr")
        joined.partition_by(lambda m: m["k"], "after").window(
            Windows.tumbling(1000, lambda m: m["k"], 0, lambda m, acc: acc + 1, allowed_lateness_ms=70),
            name="w").partition_by(lambda p: p.key, "again", serde="json").sink(lambda *a: None)


def _plan(counts: dict[SystemStream, int], **extra: str) -> Any:
    config = Config({"job.name": "j", "app.class": f"{__name__}:_Joined", "systems.mem.samza.factory": "inmemory",
                     **extra})
    return plan_application(config, counts)


def test_planner_checks_join_inputs_and_holds_watermarks_back() -> None:
    left, right = SystemStream("mem", "left"), SystemStream("mem", "right")
    plan = _plan({left: 3, right: 3})
    main = plan.stage("main").config
    assert main["stores.join-lr.factory"] == "rocksdb" and main["stores.join-lr.msg.serde"] == "json"
    # the join's unmatched left messages leave up to `within` after the watermark: the stream after it says so,
    # and so does the one after the window with its allowed lateness
    assert main["systems.mem.streams.j-1-after.watermark.holdback.ms"] == "100"
    assert plan.stage("after").config["systems.mem.streams.j-1-again.watermark.holdback.ms"] == "70"
    with pytest.raises(ApiError, match=r"join 'lr': its inputs are not partitioned alike \(mem.left has 3, "
                                       r"mem.right has 2\).*same partitions="):
        _plan({left: 3, right: 2})
    with pytest.raises(ApiError, match=r"join 'lr': its right input mem.right is a broadcast input"):
        _plan({left: 3, right: 1}, **{"task.broadcast.inputs": "mem.right#0"})
    with pytest.raises(ApiError, match=r"join 'lr': its left input mem.left fills an adjunct store.*no watermarks"):
        _plan({left: 3, right: 3}, **{"stores.t.adstore.input": "mem.left", "stores.t.factory": "memory"})


# --- state, hand-worked ----------------------------------------------------------------------------------
def test_sessions_merge_when_a_message_bridges_them_and_retract_what_they_replace(tmp_path: Any) -> None:
    store = _store(tmp_path)
    spec = Windows.session(10, lambda m: m["u"], [0, 0], count_sum, allowed_lateness_ms=100)
    state = SessionState(spec, store)
    for ts, n in ((0, 1), (5, 2), (22, 4)):
        assert state.add("a", ts, {"u": "a", "n": n}) is False
    assert state.take_panes() == []
    assert _panes(state.fire(15)) == [("a", 0, 15, [2, 3], "on_time", 0)]
    # a message behind the watermark but within the allowed lateness: its window [13, 23) bridges [0, 15) and
    # [22, 32) into one session [0, 32), which ends after the watermark, so it is open again (no pane yet;
    # [22, 32) had emitted nothing, so nothing to retract) and fires on time at 32
    assert state.add("a", 13, {"u": "a", "n": 8}) is False
    assert state.take_panes() == []
    assert _panes(state.fire(45)) == [("a", 0, 32, [4, 15], "on_time", 1)]
    # a message before the session's start moves it: the old (key, start) is retracted, the new one fires late
    assert state.add("a", -8, {"u": "a", "n": 16}) is False
    assert _panes(state.take_panes()) == [("a", 0, 32, None, "retract", 2), ("a", -8, 32, [5, 31], "late", 0)]
    # beyond the allowed lateness: dropped and counted, nothing stored
    assert state.add("a", -100, {"u": "a", "n": 1}) is True and state.late == 1
    store.flush()
    again = SessionState(spec, store)  # a restart over the same store
    assert again.fired == 45 and again.late == 1
    assert _panes(again.fire(140)) == []  # kept until end + lateness, then dropped without a pane (nothing new)
    assert list(store.range("s|", "s}")) == [] and list(store.range("g|", "g}")) == []
    store.close()


def test_sessions_without_merge_fold_their_messages_in_event_time_order(tmp_path: Any) -> None:
    spec = Windows.session(10, lambda m: "k", [], lambda m, acc: [*acc, m], early=every(2))
    state = SessionState(spec, _store(tmp_path))
    state.add("k", 7, "b")
    state.add("k", 2, "a")  # arrives second, folds first
    assert _panes(state.take_panes()) == [("k", 2, 17, ["a", "b"], "early", 0)]
    state.add("k", 30, "d")
    state.add("k", 22, "c")  # bridges [2, 17) and [30, 40)? no: [22, 32) overlaps only [30, 40)
    assert _panes(state.take_panes()) == [("k", 22, 40, ["c", "d"], "early", 0)]
    assert _panes(state.flush()) == [("k", 2, 17, ["a", "b"], "on_time", 1), ("k", 22, 40, ["c", "d"], "on_time", 1)]


def test_a_bridging_message_retracts_a_session_that_already_fired(tmp_path: Any) -> None:
    state = SessionState(Windows.session(10, lambda m: "k", 0, lambda m, acc: acc + 1, allowed_lateness_ms=50),
                         _store(tmp_path))
    state.add("k", 0, 1)
    state.add("k", 15, 1)
    assert _panes(state.fire(30)) == [("k", 0, 10, 1, "on_time", 0), ("k", 15, 25, 1, "on_time", 0)]
    state.add("k", 8, 1)  # late, within lateness: [8, 18) bridges both fired sessions
    assert _panes(state.take_panes()) == [("k", 15, 25, None, "retract", 1), ("k", 0, 25, 3, "late", 1)]


def test_triggered_tumbling_window_fires_early_on_time_late_and_a_last_late_pane(tmp_path: Any) -> None:
    store = _store(tmp_path)
    spec = Windows.tumbling(10, lambda m: "k", 0, lambda m, acc: acc + 1, early=every(2), late=every(2),
                            allowed_lateness_ms=20)
    state = window_state(spec, store)
    assert isinstance(state, TriggeredWindowState)
    for ts in (1, 2, 3):
        state.add("k", ts, ts)
    assert _panes(state.take_panes()) == [("k", 0, 10, 2, "early", 0)]
    assert _panes(state.fire(10)) == [("k", 0, 10, 3, "on_time", 1)]
    state.add("k", 4, 4)
    assert state.take_panes() == []  # late trigger: every 2 late messages
    state.add("k", 5, 5)
    assert _panes(state.take_panes()) == [("k", 0, 10, 5, "late", 2)]
    state.add("k", 6, 6)
    assert state.add("k", 35, 35) is False
    # at end + allowed lateness the window is dropped, with a last late pane for what it took since its last one
    assert _panes(state.fire(30)) == [("k", 0, 10, 6, "late", 3)]
    assert state.add("k", 7, 7) is True and state.late == 1  # beyond the allowed lateness
    store.flush()
    again = window_state(spec, store)
    assert _panes(again.flush()) == [("k", 30, 40, 1, "on_time", 0)]
    store.close()


def test_interval_triggers_follow_the_event_time_watermark(tmp_path: Any) -> None:
    spec = Windows.tumbling(100, lambda m: "k", 0, lambda m, acc: acc + 1, early=every(ms=30),
                            late=every(ms=50), allowed_lateness_ms=200)
    state = window_state(spec, _store(tmp_path))
    state.add("k", 5, 1)
    assert state.fire(29) == []
    assert _panes(state.fire(31)) == [("k", 0, 100, 1, "early", 0)]
    assert state.fire(59) == []  # crossed 30 and not 60; and nothing new since the last pane anyway
    state.add("k", 40, 1)
    assert _panes(state.fire(95)) == [("k", 0, 100, 2, "early", 1)]  # crossed 60 and 90: one pane
    assert _panes(state.fire(100)) == [("k", 0, 100, 2, "on_time", 2)]
    state.add("k", 50, 1)  # late: fires when the watermark crosses end + 50
    assert state.take_panes() == [] and state.fire(149) == []
    assert _panes(state.fire(150)) == [("k", 0, 100, 3, "late", 3)]


def test_plain_windows_keep_the_one_firing_state(tmp_path: Any) -> None:
    spec = Windows.tumbling(10, lambda m: "k", 0, lambda m, acc: acc + 1)
    assert type(window_state(spec, _store(tmp_path))) is WindowState
    assert WindowPane("k", 0, 10, 1) == WindowPane("k", 0, 10, 1, PaneKind.ON_TIME, 0)


def test_join_buffers_match_each_pair_once_and_leave_by_the_watermark(tmp_path: Any) -> None:
    store = _store(tmp_path)
    spec = JoinSpec(lambda m: m["k"], lambda m: m["k"], lambda x, y: (x and x["id"], y and y["id"]), within_ms=10,
                    kind="outer")
    state = JoinState(spec, store)
    assert state.add("l", "a", 100, {"k": "a", "id": 1}) == []
    assert state.add("r", "a", 110, {"k": "a", "id": 2}) == [((1, 2), "a", 110)]  # |100 - 110| <= 10
    assert state.add("r", "a", 111, {"k": "a", "id": 3}) == []                    # 11 apart: no pair
    assert state.add("l", "b", 105, {"k": "b", "id": 4}) == []
    # at watermark 116 the entries before 116 - 10 = 106 can match nothing more: b/4 leaves unmatched
    assert state.expire(116) == [((4, None), "b", 105)]
    assert state.add("l", "a", 115, {"k": "a", "id": 5}) is None and state.late == 1  # behind the watermark
    assert state.add("l", "a", 116, {"k": "a", "id": 5}) == [((5, 2), "a", 116), ((5, 3), "a", 116)]
    store.flush()
    again = JoinState(spec, store)  # a restart: the buffers are in the store
    assert again.watermark == 116 and again.late == 1
    assert again.flush() == []  # everything left had matched
    assert list(store.range("b|", "b}")) == [] and list(store.range("x|", "x}")) == []
    store.close()


def test_table_rows_of_panes_carry_the_pane_columns_only_when_the_table_has_them() -> None:
    pane = WindowPane({"user": "u"}, 0, 10, {"edits": 3}, PaneKind.LATE, 2)
    assert table_row(pane) == {"window_start": 0, "window_end": 10, "user": "u", "edits": 3}
    assert table_row(pane, pane_columns=True) == {"window_start": 0, "window_end": 10, "pane": "late",
                                                   "pane_index": 2, "user": "u", "edits": 3}
    retraction = WindowPane({"user": "u"}, 0, 10, None, PaneKind.RETRACT, 3)
    assert table_row(retraction) == {"window_start": 0, "window_end": 10, "user": "u"}


def test_task_control_writes_the_held_back_watermark_to_an_intermediate_output() -> None:
    out, inp = SystemStream("mem", "out"), SystemStream("mem", "in")
    config = Config({"task.intermediate.outputs": "mem.out", "systems.mem.streams.out.watermark.holdback.ms": "250"})
    control = TaskControl("Partition 0", 1, [inp.partition(0)], config)
    control.on_envelope(IncomingMessageEnvelope(inp.partition(0), "0", None, b"x", 1000))
    assert control.advance(0) == 1000
    sent = control.outgoing(0, {out: 2})
    assert [(e.type, e.timestamp) for e in sent] == [(MessageType.WATERMARK, 750)] * 2


# --- drain (the callback; tests/api/test_drain_runner.py drains through the runtime) ------------------------
class DrainApp:
    """A left join of two streams, and a tumbling window of one of them, both in stage ``main``."""

    def describe(self, app: StreamApplication) -> None:
        a, b = app.input("delta.a", serde="json"), app.input("delta.b", serde="json")
        policy = str(app.config.get_str("app.test.on.drain", "emit"))
        a.join(b, lambda m: m["k"], lambda m: m["k"], lambda x, y: {"l": x and x["id"], "r": y and y["id"]},
               within=10, kind="left", name="ab", on_drain=policy).sink(
            lambda m, collector, coordinator: DrainApp.sunk.append(m))
        a.window(Windows.tumbling(100, lambda m: m["k"], 0, lambda m, n: n + 1), name="w").sink(
            lambda pane, collector, coordinator: DrainApp.sunk.append((pane.key, pane.start, pane.value)))

    sunk: list[Any] = []


@pytest.mark.parametrize("policy", ["emit", "keep"])
def test_on_drain_fires_open_windows_and_emits_unmatched_join_sides_where_the_join_says_so(
        make_context, collector, coordinator, policy: str) -> None:
    from sparza.api import StageTask

    cfg = Config({"job.name": "d", "app.class": f"{__name__}:DrainApp", "app.test.on.drain": policy,
                  "stores.join-ab.factory": "rocksdb", "stores.join-ab.key.serde": "string",
                  "stores.join-ab.msg.serde": "json", "stores.window-w.factory": "rocksdb",
                  "stores.window-w.key.serde": "string", "stores.window-w.msg.serde": "json"})
    stage = plan_application(cfg, {SystemStream("delta", "a"): 1, SystemStream("delta", "b"): 1}).stage("main")
    task = StageTask()
    context = make_context(stage.config)
    task.init(context)
    assert isinstance(task, DrainListenerTask)
    DrainApp.sunk.clear()
    a, b = SystemStreamPartition("delta", "a", 0), SystemStreamPartition("delta", "b", 0)
    task.process(IncomingMessageEnvelope(a, "0", None, {"k": "x", "id": 1}, 5), collector, coordinator)
    task.process(IncomingMessageEnvelope(b, "0", None, {"k": "x", "id": 2}, 9), collector, coordinator)
    task.process(IncomingMessageEnvelope(a, "1", None, {"k": "y", "id": 3}, 50), collector, coordinator)
    assert DrainApp.sunk == [{"l": 1, "r": 2}]
    task.on_drain(collector, coordinator)
    task.on_drain(collector, coordinator)  # again: nothing is left to fire
    expected = [{"l": 1, "r": 2}, {"l": 3, "r": None}] if policy == "emit" else [{"l": 1, "r": 2}]
    assert DrainApp.sunk == [*expected, ("x", 0, 1), ("y", 0, 1)]
    left = list(context.get_store("join-ab").range("b|", "b}"))
    assert (left == []) == (policy == "emit")
