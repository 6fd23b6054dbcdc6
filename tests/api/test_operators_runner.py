"""Stream-stream joins, session windows and triggers through ``sparza.testing.TestRunner`` (the runtime's own
batch planner, task instances and commit, without Spark), on generated inputs: skewed keys, out-of-order
event times, late data, empty partitions, several tasks, small batches, restarts and failures injected
between commit steps.

The oracle is plain Python written from the documented rules, not from the operators' code: a message the
job routed to the late stream is left out (which messages are late depends on the watermarks, which the
operators decide; that they are exactly the ones left out of the results is what the comparison checks),
and the rest must give exactly the oracle's pairs, sessions and windows. Panes are updates, so a window's
result is its newest pane; every pane sequence is checked too (indexes 0..n-1 once each, a retraction last,
nothing early after the end).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pytest

from sparza.engine.commit import CommitStep
from sparza.testing import TestMessage, TestRunner
from sparza.testing.faults import InjectedFault

APPS = "tests.api.operator_apps"
T = TypeVar("T")
LATE = {"task.late.messages.policy": "route", "task.late.messages.stream": "mem.late"}


# --- the oracle ------------------------------------------------------------------------------------------
def expected_pairs(orders: list[dict[str, Any]], payments: list[dict[str, Any]], within: int,
                   kind: str) -> Counter[tuple[Any, Any]]:
    """Every (order id, payment id) pair of one order within ``within`` ms; unmatched ones as (id, None) /
    (None, id) for left and outer joins."""
    out: Counter[tuple[Any, Any]] = Counter()
    matched_o: set[int] = set()
    matched_p: set[int] = set()
    for o in orders:
        for p in payments:
            if o["order"] == p["order"] and abs(o["ts"] - p["ts"]) <= within:
                out[(o["id"], p["id"])] += 1
                matched_o.add(o["id"])
                matched_p.add(p["id"])
    if kind in ("left", "outer"):
        out.update((o["id"], None) for o in orders if o["id"] not in matched_o)
    if kind == "outer":
        out.update((None, p["id"]) for p in payments if p["id"] not in matched_p)
    return out


def expected_sessions(edits: list[dict[str, Any]], gap: int) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``{(user, start): (end, count, sum)}``: a user's edits in event-time order, a new session whenever the
    next edit is ``gap`` or more after the previous one; a session ends ``gap`` after its last edit."""
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    by_user: dict[str, list[dict[str, Any]]] = {}
    for e in edits:
        by_user.setdefault(e["user"], []).append(e)
    for user, items in by_user.items():
        items.sort(key=lambda e: e["ts"])
        session = [items[0]]
        for e in [*items[1:], None]:
            if e is not None and e["ts"] - session[-1]["ts"] < gap:
                session.append(e)
                continue
            out[(user, session[0]["ts"])] = (session[-1]["ts"] + gap, len(session), sum(x["n"] for x in session))
            if e is not None:
                session = [e]
    return out


def expected_windows(events: list[dict[str, Any]], size: int, slide: int) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(key, start): (count, sum)}`` over windows ``[start, start + size)`` with starts every ``slide``."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for e in events:
        start = e["ts"] - e["ts"] % slide
        while start > e["ts"] - size:
            count, total = out.get((e["key"], start), (0, 0))
            out[(e["key"], start)] = (count + 1, total + e["n"])
            start -= slide
    return out


def final_panes(records: list[dict[str, Any]], *, sessions: bool) -> tuple[dict[tuple[Any, int], dict[str, Any]],
                                                                             list[str]]:
    """The newest pane of every (key, start) that was not retracted, and what is wrong with the sequences."""
    problems: list[str] = []
    groups: dict[tuple[Any, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["key"], r["start"]), []).append(r)
    finals: dict[tuple[Any, int], dict[str, Any]] = {}
    for ident, panes in groups.items():
        panes.sort(key=lambda r: r["index"])
        indexes = [r["index"] for r in panes]
        if indexes != list(range(len(panes))):
            problems.append(f"{ident}: pane indexes {indexes} (lost or repeated panes)")
        kinds = [r["pane"] for r in panes]
        if "retract" in kinds[:-1] or (not sessions and "retract" in kinds):
            problems.append(f"{ident}: panes after a retraction, or a retraction outside sessions: {kinds}")
        if kinds[-1] == "early":
            problems.append(f"{ident}: its last pane is early (end-of-stream fires every window on time): {kinds}")
        if not sessions and "on_time" in kinds and any(k == "early" for k in kinds[kinds.index("on_time"):]):
            problems.append(f"{ident}: an early pane after the on-time one: {kinds}")
        if kinds[-1] != "retract":
            finals[ident] = panes[-1]
    return finals, problems


# --- generated inputs ------------------------------------------------------------------------------------
def _keys(rng: random.Random, count: int) -> tuple[list[str], list[float]]:
    names = [f"k{i}" for i in range(count)]
    return names, [1.0 / (i + 1) ** 1.5 for i in range(count)]  # skewed: k0 gets most messages


def _timed(rng: random.Random, n: int, step: int, late_share: float) -> list[int]:
    """Event times ``i * step``, shuffled within runs of 8 (out of order); a share far behind (late)."""
    times = [i * step for i in range(n)]
    for begin in range(0, n, 8):
        chunk = times[begin:begin + 8]
        rng.shuffle(chunk)
        times[begin:begin + 8] = chunk
    return [t - rng.randint(20, 60) * step if rng.random() < late_share else t for t in times]


def _partition_of(rng: random.Random, partitions: int, empty: set[int]) -> int:
    return rng.choice([p for p in range(partitions) if p not in empty])


def _messages(items: list[dict[str, Any]], partitions: int, rng: random.Random) -> list[TestMessage]:
    empty = set(rng.sample(range(partitions), rng.randint(0, partitions - 1))) if partitions > 1 else set()
    return [TestMessage({k: v for k, v in item.items() if k != "ts"}, partition=_partition_of(rng, partitions, empty),
                        timestamp=item["ts"]) for item in items]


def _routed(runner: TestRunner) -> set[int]:
    routed = [m["id"] for m in runner.values("mem.late", msg_serde="json")]
    assert len(routed) == len(set(routed)), "a late message was routed twice"
    return set(routed)


def _config(config: dict[str, str], fault: tuple[CommitStep, str, int, bool] | None) -> dict[str, str]:
    # A fault in batch 2 or 3 needs that many batches: runs with a fault (and the clean runs they are compared
    # with) read 3 messages per partition and batch.
    return config if fault is None else {**config, "task.max.batch.messages": "3"}


def _run(runner: TestRunner, fault: tuple[CommitStep, str, int, bool] | None) -> None:
    if fault is not None:
        step, job, batch, keep_plan = fault
        runner.fail_at(step, job=job, batch=batch)
        with pytest.raises(InjectedFault):
            runner.run()
        runner.restart(keep_plan=keep_plan)
    report = runner.run()
    assert report.ended
    if fault is None:
        # What the operators dropped as late is counted where `sparza run` reports it (status line, summary,
        # the late-messages metric): exactly the messages routed.
        assert report.late == len(_routed(runner))


# Each seed's fault-free run, kept for the process: the per-seed tests and the tests over many seeds (every pane
# kind drawn, late messages routed, the late-join seeds) check the same runs, and a run is deterministic (the same
# seed gives the same output), so the second test reads the first one's run instead of repeating it (the 24 window
# seeds again took 58 s of a loaded suite). Runs with a fault are never kept. Callers only read the results.
_CLEAN_RUNS: dict[tuple[str, int], Any] = {}


def _clean_run(kind: str, seed: int, run: Callable[[], T]) -> T:
    if (kind, seed) not in _CLEAN_RUNS:
        _CLEAN_RUNS[(kind, seed)] = run()
    return cast(T, _CLEAN_RUNS[(kind, seed)])


FAULTS = [None, (CommitStep.AFTER_FLUSH, "by-user", 2, True), (CommitStep.AFTER_CHECKPOINT, "main", 2, False),
          (CommitStep.AFTER_SNAPSHOT, "by-user", 3, False)]


# --- joins -----------------------------------------------------------------------------------------------
def _join_input(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str], int]:
    rng = random.Random(seed)
    keys, weights = _keys(rng, rng.randint(1, 8))
    late_share = rng.choice([0.0, 0.1])
    n = rng.randint(15, 45)
    orders = [{"id": i, "order": rng.choices(keys, weights)[0], "ts": t}
              for i, t in enumerate(_timed(rng, n, 10, late_share))]
    payments = [{"id": 1000 + i, "order": rng.choices(keys, weights)[0], "ts": t}
                for i, t in enumerate(_timed(rng, rng.randint(0, 45), 10, late_share))]
    config = {**LATE, "app.test.within.ms": str(rng.choice([0, 15, 60, 400])),
              "app.test.join.kind": rng.choice(["inner", "left", "outer"]),
              "app.test.partitions": str(rng.randint(1, 3)), "app.test.lateness.ms": str(rng.choice([0, 0, 50])),
              "task.max.batch.messages": str(rng.choice([3, 6, 100])),
              "systems.mem.streams.orders.watermark.lateness.ms": str(rng.choice([0, 30])),
              "systems.mem.streams.payments.watermark.lateness.ms": str(rng.choice([0, 30]))}
    return orders, payments, config, rng.randint(1, 3)


def _join_result(seed: int, fault: tuple[CommitStep, str, int, bool] | None = None,
                 ) -> tuple[Counter[tuple[Any, Any]], set[int], list[Any]]:
    if fault is None:
        return _clean_run("join", seed, lambda: _join_run(seed, None))
    return _join_run(seed, fault)


def _join_run(seed: int, fault: tuple[CommitStep, str, int, bool] | None = None,
                 clean_of: tuple[CommitStep, str, int, bool] | None = None,
                 ) -> tuple[Counter[tuple[Any, Any]], set[int], list[Any]]:
    orders, payments, config, partitions = _join_input(seed)
    rng = random.Random(seed + 1)
    with TestRunner.of(f"{APPS}:OrdersPayments", _config(config, fault or clean_of)) as runner:
        runner.add_input("mem.orders", _messages(orders, partitions, rng), partitions=partitions, bounded=True)
        runner.add_input("mem.payments", _messages(payments, partitions, rng), partitions=partitions, bounded=True)
        runner.add_output("mem.joined", partitions=2).add_output("mem.late")
        _run(runner, fault)
        values = runner.values("mem.joined")
        got = Counter((v["l"], v["r"]) for v in values)
        return got, _routed(runner), values


@pytest.mark.parametrize("seed", range(24))
def test_join_matches_every_pair_within_the_bound_once_and_emits_unmatched_sides(seed: int) -> None:
    orders, payments, config, _ = _join_input(seed)
    got, routed, _ = _join_result(seed)
    kept_orders = [o for o in orders if o["id"] not in routed]
    kept_payments = [p for p in payments if p["id"] not in routed]
    assert got == expected_pairs(kept_orders, kept_payments, int(config["app.test.within.ms"]),
                                 config["app.test.join.kind"])


@pytest.mark.parametrize("seed", [6, 9, 13])  # seeds whose small batches make messages late (checked below)
def test_join_drops_late_messages_counted_and_routed_and_matches_the_rest(seed: int) -> None:
    orders, payments, config, _ = _join_input(seed)
    got, routed, _ = _join_result(seed)
    assert routed, "expected late messages in this input"
    kept = ([o for o in orders if o["id"] not in routed], [p for p in payments if p["id"] not in routed])
    assert got == expected_pairs(*kept, int(config["app.test.within.ms"]), config["app.test.join.kind"])
    # what is left out is exactly what was late: every routed message is one the oracle would have matched or
    # emitted, and the report counted it
    assert routed <= {o["id"] for o in orders} | {p["id"] for p in payments}


@pytest.mark.parametrize("fault", FAULTS[1:], ids=lambda f: f"{f[0].value}-{f[1]}-keep{f[3]}")
@pytest.mark.parametrize("seed", [3, 7])
def test_join_after_a_failure_between_commit_steps_and_a_restart_is_exact(
        seed: int, fault: tuple[CommitStep, str, int, bool]) -> None:
    job = "orders-by-order_payments-by-order" if fault[1] == "by-user" else "main-1"  # main-1 reads payments
    chosen = (fault[0], job, fault[2], fault[3])
    orders, payments, config, _ = _join_input(seed)
    got, routed_again, _ = _join_result(seed, chosen)
    kept = ([o for o in orders if o["id"] not in routed_again], [p for p in payments if p["id"] not in routed_again])
    assert got == expected_pairs(*kept, int(config["app.test.within.ms"]), config["app.test.join.kind"])
    # No host keeps a plan beside the task checkpoints: after the restart the tasks plan from them (an open intent
    # replays its batch exactly), and where later batches end follows the rounds: other messages may be late, so
    # the comparison is with the oracle for what was routed, not with the clean run byte for byte.


def test_samza_spelling_of_the_join_runs_in_one_stage() -> None:
    orders = [TestMessage({"id": i, "order": i % 3}, partition=i % 2, timestamp=i * 400) for i in range(6)]
    payments = [TestMessage({"id": 10 + i, "order": i % 3}, partition=i % 2, timestamp=i * 400 + 900)
                for i in range(6)]
    with TestRunner.of(f"{APPS}:SamzaJoin") as runner:
        runner.add_input("mem.orders", orders, partitions=2, bounded=True)
        runner.add_input("mem.payments", payments, partitions=2, bounded=True).add_output("mem.joined", partitions=2)
        assert runner.jobs == ["main"]
        assert runner.run().ended
        got = Counter((v["l"], v["r"]) for v in runner.values("mem.joined"))
    items = [{"id": i, "order": i % 3, "ts": i * 400} for i in range(6)]
    pays = [{"id": 10 + i, "order": i % 3, "ts": i * 400 + 900} for i in range(6)]
    # The TestMessages above put order i in partition i % 2, so only pairs of one partition can meet, as in
    # Samza (a join runs inside one task): the oracle is told the same.
    expected = Counter({pair: n for pair, n in expected_pairs(items, pays, 1000, "inner").items()
                        if pair[0] % 2 == (pair[1] - 10) % 2})
    assert got == expected and got


def test_unmatched_left_messages_reach_a_window_after_the_join_before_it_fires() -> None:
    """The join holds the watermark of the operators after it back by its bound: the unmatched orders it emits
    when their bound expires are counted by the window, not dropped as late."""
    rng = random.Random(5)
    orders = [{"id": i, "order": i, "ts": i * 100} for i in range(40)]
    payments = [{"id": 1000 + i, "order": i, "ts": i * 100 + 50} for i in range(40) if rng.random() < 0.5]
    config = {**LATE, "app.test.within.ms": "300", "app.test.size.ms": "1000", "app.test.partitions": "2",
              "task.max.batch.messages": "4"}
    with TestRunner.of(f"{APPS}:JoinThenWindow", config) as runner:
        runner.add_input("mem.orders", _messages(orders, 2, rng), partitions=2, bounded=True)
        runner.add_input("mem.payments", _messages(payments, 2, rng), partitions=2, bounded=True)
        runner.add_output("mem.paid").add_output("mem.late")
        report = runner.run()
        assert report.ended and report.late == 0 and not _routed(runner)
        got: Counter[tuple[str, int]] = Counter()
        for v in runner.values("mem.paid"):  # each task counts its own orders: add the tasks' panes up
            got[(v["key"], v["start"])] += v["count"]
    paid = {p["order"] for p in payments}
    expected: Counter[tuple[str, int]] = Counter()
    for o in orders:
        # a pair carries the later event time of its two messages, an unmatched order its own
        ts = o["ts"] + 50 if o["order"] in paid else o["ts"]
        expected[("paid" if o["order"] in paid else "unpaid", ts - ts % 1000)] += 1
    assert got == expected


# --- sessions --------------------------------------------------------------------------------------------
def _session_input(seed: int) -> tuple[list[dict[str, Any]], dict[str, str], int]:
    rng = random.Random(1000 + seed)
    users, weights = _keys(rng, rng.randint(1, 6))
    n = rng.randint(10, 70)
    # bursts of activity with pauses: event times in clusters, so sessions form, merge and stay apart
    times = _timed(rng, n, rng.choice([20, 60, 150]), rng.choice([0.0, 0.08]))
    edits = [{"id": i, "user": rng.choices(users, weights)[0], "n": rng.randrange(100), "ts": t}
             for i, t in enumerate(times)]
    config = {**LATE, "app.test.gap.ms": str(rng.choice([50, 200, 700])),
              "app.test.merge": rng.choice(["true", "false"]),
              "app.test.early": rng.choice(["", "", "count:2", "ms:300"]),
              "app.test.lateness.ms": str(rng.choice([0, 0, 400, 3000])),
              "app.test.partitions": str(rng.randint(1, 3)),
              "task.max.batch.messages": str(rng.choice([2, 4, 100])),
              "systems.mem.streams.edits.watermark.lateness.ms": str(rng.choice([0, 100]))}
    if config["app.test.lateness.ms"] != "0":
        config["app.test.late"] = rng.choice(["", "count:2", "ms:500"])
    return edits, config, rng.randint(1, 4)


def _session_result(seed: int, fault: tuple[CommitStep, str, int, bool] | None = None,
                    ) -> tuple[list[dict[str, Any]], set[int]]:
    if fault is None:
        return _clean_run("session", seed, lambda: _session_run(seed, None))
    return _session_run(seed, fault)


def _session_run(seed: int, fault: tuple[CommitStep, str, int, bool] | None = None,
                    clean_of: tuple[CommitStep, str, int, bool] | None = None) -> tuple[list[dict[str, Any]], set[int]]:
    edits, config, partitions = _session_input(seed)
    rng = random.Random(seed + 7)
    with TestRunner.of(f"{APPS}:EditSessions", _config(config, fault or clean_of)) as runner:
        runner.add_input("mem.edits", _messages(edits, partitions, rng), partitions=partitions, bounded=True)
        runner.add_output("mem.sessions", partitions=2).add_output("mem.late")
        _run(runner, fault)
        return runner.values("mem.sessions"), _routed(runner)


def _check_sessions(seed: int, records: list[dict[str, Any]], routed: set[int]) -> None:
    edits, config, _ = _session_input(seed)
    finals, problems = final_panes(records, sessions=True)
    assert not problems
    expected = expected_sessions([e for e in edits if e["id"] not in routed], int(config["app.test.gap.ms"]))
    assert {k: (v["end"], v["count"], v["sum"]) for k, v in finals.items()} == expected


@pytest.mark.parametrize("seed", range(20))
def test_sessions_merge_fire_and_update_exactly_as_the_oracle_says(seed: int) -> None:
    records, routed = _session_result(seed)
    _check_sessions(seed, records, routed)


def test_sessions_with_late_data_retract_merged_sessions_and_fire_late_panes() -> None:
    """Some generated seeds merge sessions that had fired (retractions) and update kept ones (late panes):
    both kinds show up, and the finals are still exact."""
    kinds: Counter[str] = Counter()
    for seed in range(20):
        records, routed = _session_result(seed)
        _check_sessions(seed, records, routed)
        kinds.update(r["pane"] for r in records)
    assert kinds["retract"] and kinds["late"] and kinds["early"] and kinds["on_time"]


@pytest.mark.parametrize("fault", FAULTS[1:], ids=lambda f: f"{f[0].value}-{f[1]}-keep{f[3]}")
@pytest.mark.parametrize("seed", [2, 9])
def test_sessions_after_a_failure_between_commit_steps_and_a_restart_are_exact(
        seed: int, fault: tuple[CommitStep, str, int, bool]) -> None:
    records, routed_again = _session_result(seed, fault)
    _check_sessions(seed, records, routed_again)  # against the oracle (batches may end elsewhere after a restart)


# --- triggers on tumbling and sliding windows ------------------------------------------------------------
def _window_input(seed: int) -> tuple[list[dict[str, Any]], dict[str, str], int]:
    rng = random.Random(2000 + seed)
    keys, weights = _keys(rng, rng.randint(1, 6))
    n = rng.randint(10, 80)
    sliding = rng.random() < 0.3
    events = [{"id": i, "key": rng.choices(keys, weights)[0], "n": rng.randrange(100), "ts": t}
              for i, t in enumerate(_timed(rng, n, 25, 0.0 if sliding else rng.choice([0.0, 0.1])))]
    size = rng.choice([100, 250, 1000])
    config = {**LATE, "app.test.size.ms": str(size), "app.test.slide.ms": str(size // 2 if sliding else size),
              "app.test.early": rng.choice(["", "count:1", "count:3", "ms:40", "ms:200"]),
              "app.test.lateness.ms": str(rng.choice([0, 300, 2000])),
              "app.test.partitions": str(rng.randint(1, 3)),
              "task.max.batch.messages": str(rng.choice([3, 8, 100])),
              "systems.mem.streams.events.watermark.lateness.ms": str(rng.choice([0, 50]))}
    if sliding:
        # A message late for some of its sliding windows stays in the others (and is routed): which ones, only
        # the watermarks say, so sliding inputs are checked without late data (the source lateness spans them).
        config["systems.mem.streams.events.watermark.lateness.ms"] = "100000"
    if config["app.test.lateness.ms"] != "0":
        config["app.test.late"] = rng.choice(["", "count:2", "ms:100"])
    return events, config, rng.randint(1, 4)


def _window_result(seed: int, fault: tuple[CommitStep, str, int, bool] | None = None,
                   ) -> tuple[list[dict[str, Any]], set[int]]:
    if fault is None:
        return _clean_run("window", seed, lambda: _window_run(seed, None))
    return _window_run(seed, fault)


def _window_run(seed: int, fault: tuple[CommitStep, str, int, bool] | None = None,
                   clean_of: tuple[CommitStep, str, int, bool] | None = None) -> tuple[list[dict[str, Any]], set[int]]:
    events, config, partitions = _window_input(seed)
    rng = random.Random(seed + 11)
    with TestRunner.of(f"{APPS}:TriggeredCounts", _config(config, fault or clean_of)) as runner:
        runner.add_input("mem.events", _messages(events, partitions, rng), partitions=partitions, bounded=True)
        runner.add_output("mem.counts", partitions=2).add_output("mem.late")
        _run(runner, fault)
        return runner.values("mem.counts"), _routed(runner)


def _check_windows(seed: int, records: list[dict[str, Any]], routed: set[int]) -> None:
    events, config, _ = _window_input(seed)
    finals, problems = final_panes(records, sessions=False)
    assert not problems
    size, slide = int(config["app.test.size.ms"]), int(config["app.test.slide.ms"])
    assert slide == size or not routed  # late data only in tumbling inputs: a routed message left every window
    expected = expected_windows([e for e in events if e["id"] not in routed], size, slide)
    assert {k: (v["count"], v["sum"]) for k, v in finals.items()} == expected
    early = config["app.test.early"]
    if early.startswith("count:"):  # a count trigger fires after every n messages of an open window
        n = int(early.split(":")[1])
        for ident, (count, _) in expected.items():
            fired = [r["count"] for r in records if (r["key"], r["start"]) == ident and r["pane"] == "early"]
            assert fired == [n * k for k in range(1, len(fired) + 1)]
            assert len(fired) <= count // n


@pytest.mark.parametrize("seed", range(24))
def test_window_triggers_fire_early_on_time_and_late_panes_whose_newest_is_exact(seed: int) -> None:
    records, routed = _window_result(seed)
    _check_windows(seed, records, routed)


def test_every_pane_kind_is_drawn_and_late_beyond_the_allowed_lateness_is_routed() -> None:
    kinds: Counter[str] = Counter()
    routed_any = False
    for seed in range(24):
        records, routed = _window_result(seed)
        kinds.update(r["pane"] for r in records)
        routed_any = routed_any or bool(routed)
    assert kinds["early"] and kinds["on_time"] and kinds["late"] and routed_any


@pytest.mark.parametrize("fault", FAULTS[1:], ids=lambda f: f"{f[0].value}-{f[1]}-keep{f[3]}")
@pytest.mark.parametrize("seed", [1, 4])
def test_triggered_windows_after_a_failure_between_commit_steps_and_a_restart_are_exact(
        seed: int, fault: tuple[CommitStep, str, int, bool]) -> None:
    job = "by-key" if fault[1] == "by-user" else fault[1]
    chosen = (fault[0], job, fault[2], fault[3])
    records, routed_again = _window_result(seed, chosen)
    _check_windows(seed, records, routed_again)  # against the oracle (batches may end elsewhere after a restart)
