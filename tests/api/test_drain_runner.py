"""Drain through ``sparza.testing.TestRunner`` (the runtime's planner, task instances and commit, without Spark):
a drain requested at a random moment (after a random number of batches, with input appended before and
after), windows, sessions and joins open across several tasks and two stages, skewed keys, out-of-order and
late event times, empty partitions, small batches; then more input and a second drain.

The oracle is plain Python: everything appended before a drain's request comes out by the time the drain
completes, each window, session and join computed over that phase's messages alone (a drain fires what is
open and empties the operators' state, so nothing of one phase meets the next), less what the job routed as
late; after the drain the job continues with the next phase. Panes are updates: a window's result is its newest
pane in the phase.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest
from tests.api.test_operators_runner import (
    LATE,
    _timed,
    expected_pairs,
    expected_sessions,
    expected_windows,
    final_panes,
)

from sparza.engine.commit import CommitStep
from sparza.testing import TestMessage, TestRunner
from sparza.testing.faults import InjectedFault

APPS = "tests.api.operator_apps"


# --- phases ----------------------------------------------------------------------------------------------
def _split(rng: random.Random, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                      list[dict[str, Any]]]:
    """Before any batch, appended between batches before the drain, after the drain."""
    a = rng.randint(1, max(1, len(items) // 2))
    b = rng.randint(a, max(a, 3 * len(items) // 4))
    return items[:a], items[a:b], items[b:]


class _Phases:
    """Runs a job through: phase A (appended by the caller), 0-3 batches, phase B appended, drain; phase C
    appended, 0-2 batches, drain. Gives what each output stream got by the end of each drain."""

    def __init__(self, runner: TestRunner, rng: random.Random, partitions: int, outputs: list[str]) -> None:
        self.runner, self.rng, self.partitions, self.outputs = runner, rng, partitions, outputs
        empty = set(rng.sample(range(partitions), rng.randint(0, partitions - 1))) if partitions > 1 else set()
        self.live = [p for p in range(partitions) if p not in empty]
        self.seen: dict[str, dict[int, int]] = {o: {} for o in outputs}

    def messages(self, items: list[dict[str, Any]]) -> list[TestMessage]:
        return [TestMessage({k: v for k, v in item.items() if k != "ts"}, partition=self.rng.choice(self.live),
                            timestamp=item["ts"]) for item in items]

    def new_outputs(self, stream: str) -> list[Any]:
        """The values ``stream`` got since the last call (per partition, by offset)."""
        out = []
        for partition, messages in self.runner.outputs_by_partition(stream).items():
            start = self.seen[stream].get(partition, 0)
            out.extend(json.loads(m.value) if isinstance(m.value, bytes) else m.value for m in messages[start:])
            self.seen[stream][partition] = len(messages)
        return out

    def run(self, b: dict[str, list[dict[str, Any]]], c: dict[str, list[dict[str, Any]]], *,
            before_drain: Any = None) -> list[dict[str, list[Any]]]:
        """``b`` / ``c``: stream → that phase's items."""
        runner = self.runner
        results: list[dict[str, list[Any]]] = []
        for _ in range(self.rng.randint(0, 3)):
            runner.run_batch()
        for stream, items in b.items():
            runner.add_input(stream, self.messages(items))
        if before_drain is not None:
            before_drain()
        report = runner.drain()
        assert report.drained and not report.ended
        results.append({o: self.new_outputs(o) for o in self.outputs})
        for stream, items in c.items():
            runner.add_input(stream, self.messages(items))
        for _ in range(self.rng.randint(0, 2)):
            runner.run_batch()
        second = runner.drain()
        assert second.drained and second.drained != report.drained  # a drain of its own
        results.append({o: self.new_outputs(o) for o in self.outputs})
        return results


def _routed(outputs: dict[str, list[Any]]) -> set[int]:
    return {m["id"] for m in outputs.get("mem.late", [])}


# --- windows ---------------------------------------------------------------------------------------------
def _window_run(seed: int, fault: tuple[CommitStep, str, bool] | None = None) -> None:
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(rng.randint(1, 6))]
    weights = [1.0 / (i + 1) ** 1.5 for i in range(len(keys))]
    size = rng.choice([40, 100, 250])
    slide = size if rng.random() < 0.6 else size // rng.choice([2, 5])
    n = rng.randint(20, 70)
    late_share = rng.choice([0.0, 0.1]) if slide == size else 0.0
    events = [{"id": i, "key": rng.choices(keys, weights)[0], "n": rng.randrange(100), "ts": t}
              for i, t in enumerate(_timed(rng, n, 10, late_share))]
    partitions = rng.randint(1, 3)
    config = {**LATE, "app.test.size.ms": str(size), "app.test.slide.ms": str(slide),
              "app.test.partitions": str(rng.randint(1, 3)), "task.max.batch.messages": str(rng.choice([2, 5, 100])),
              "systems.mem.streams.events.watermark.lateness.ms": str(rng.choice([0, 30]))}
    if slide != size:
        # A message late for some of its sliding windows stays in the others (and is routed): which ones, only the
        # watermarks say, so sliding inputs are checked without late data (as in test_operators_runner.py).
        config["systems.mem.streams.events.watermark.lateness.ms"] = "100000"
    with TestRunner.of(f"{APPS}:TriggeredCounts", config) as runner:
        a, b, c = _split(rng, events)
        phases = _Phases(runner, rng, partitions, ["mem.counts", "mem.late"])
        runner.add_input("mem.events", phases.messages(a), partitions=partitions)
        runner.add_output("mem.counts", partitions=2).add_output("mem.late")

        def crash() -> None:
            if fault is not None:
                step, job, keep_plan = fault
                runner.fail_at(step, job=job)
                with pytest.raises(InjectedFault):
                    runner.drain()
                runner.restart(keep_plan=keep_plan)

        results = phases.run({"mem.events": b}, {"mem.events": c}, before_drain=crash)
    routed = _routed(results[0]) | _routed(results[1])
    assert slide == size or not routed
    for phase, items in zip(results, (a + b, c), strict=True):
        records = phase["mem.counts"]
        got = {(r["key"], r["start"]): (r["count"], r["sum"]) for r in records}
        assert len(got) == len(records), "a window fired twice in one phase"
        assert all(r["pane"] == "on_time" for r in records)
        assert got == expected_windows([e for e in items if e["id"] not in routed], size, slide)
    assert len(routed) == sum(len(p["mem.late"]) for p in results), "a late message was routed twice"


@pytest.mark.parametrize("seed", range(16))
def test_a_drain_fires_every_open_window_and_the_job_continues_after_it(seed: int) -> None:
    _window_run(seed)


FAULTS = [(CommitStep.AFTER_FLUSH, "by-key", True), (CommitStep.AFTER_CHECKPOINT, "main", False),
          (CommitStep.AFTER_INTENT, "by-key", False), (CommitStep.AFTER_SNAPSHOT, "main", True)]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f"{f[0].value}-{f[1]}-{'plan' if f[2] else 'replan'}")
@pytest.mark.parametrize("seed", [3, 11])
def test_a_failure_during_a_drain_then_a_restart_drains_to_the_same_windows(
        seed: int, fault: tuple[CommitStep, str, bool]) -> None:
    # The request stays until every task completed it, with the offsets observed at the request: the restarted
    # run drains exactly there, and a replayed batch decides as its first attempt did (its intent's drain).
    _window_run(seed, fault)


# --- sessions ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_a_drain_fires_every_open_session_and_the_next_phase_starts_new_ones(seed: int) -> None:
    rng = random.Random(1000 + seed)
    users = [f"u{i}" for i in range(rng.randint(1, 5))]
    gap = rng.choice([25, 60, 200])
    n = rng.randint(20, 60)
    edits = [{"id": i, "user": rng.choice(users), "n": rng.randrange(50), "ts": t}
             for i, t in enumerate(_timed(rng, n, 10, rng.choice([0.0, 0.1])))]
    partitions = rng.randint(1, 3)
    config = {**LATE, "app.test.gap.ms": str(gap), "app.test.merge": rng.choice(["true", "false"]),
              "app.test.partitions": str(rng.randint(1, 3)), "task.max.batch.messages": str(rng.choice([2, 5, 100])),
              "systems.mem.streams.edits.watermark.lateness.ms": str(rng.choice([0, 30]))}
    with TestRunner.of(f"{APPS}:EditSessions", config) as runner:
        a, b, c = _split(rng, edits)
        phases = _Phases(runner, rng, partitions, ["mem.sessions", "mem.late"])
        runner.add_input("mem.edits", phases.messages(a), partitions=partitions)
        runner.add_output("mem.sessions", partitions=2).add_output("mem.late")
        results = phases.run({"mem.edits": b}, {"mem.edits": c})
    routed = _routed(results[0]) | _routed(results[1])
    for phase, items in zip(results, (a + b, c), strict=True):
        finals, problems = final_panes(phase["mem.sessions"], sessions=True)
        assert problems == []
        got = {ident: (r["end"], r["count"], r["sum"]) for ident, r in finals.items()}
        assert got == expected_sessions([e for e in items if e["id"] not in routed], gap)


# --- joins ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_a_drain_emits_the_unmatched_sides_of_joins_and_pairs_never_cross_it(seed: int) -> None:
    rng = random.Random(2000 + seed)
    keys = [f"o{i}" for i in range(rng.randint(1, 6))]
    kind = rng.choice(["inner", "left", "outer"])
    within = rng.choice([0, 15, 60, 400])
    n = rng.randint(20, 60)
    late_share = rng.choice([0.0, 0.1])
    orders = [{"id": i, "order": rng.choice(keys), "ts": t} for i, t in enumerate(_timed(rng, n, 10, late_share))]
    payments = [{"id": 1000 + i, "order": rng.choice(keys), "ts": t}
                for i, t in enumerate(_timed(rng, rng.randint(0, n), 10, late_share))]
    partitions = rng.randint(1, 3)
    config = {**LATE, "app.test.within.ms": str(within), "app.test.join.kind": kind,
              "app.test.partitions": str(rng.randint(1, 3)), "task.max.batch.messages": str(rng.choice([2, 5, 100])),
              "systems.mem.streams.orders.watermark.lateness.ms": str(rng.choice([0, 30])),
              "systems.mem.streams.payments.watermark.lateness.ms": str(rng.choice([0, 30]))}
    with TestRunner.of(f"{APPS}:OrdersPayments", config) as runner:
        oa, ob, oc = _split(rng, orders)
        pa, pb, pc = _split(rng, payments) if payments else ([], [], [])
        phases = _Phases(runner, rng, partitions, ["mem.joined", "mem.late"])
        runner.add_input("mem.orders", phases.messages(oa), partitions=partitions)
        runner.add_input("mem.payments", phases.messages(pa), partitions=partitions)
        runner.add_output("mem.joined", partitions=2).add_output("mem.late")
        results = phases.run({"mem.orders": ob, "mem.payments": pb}, {"mem.orders": oc, "mem.payments": pc})
    routed = _routed(results[0]) | _routed(results[1])
    for phase, (os_, ps) in zip(results, ((oa + ob, pa + pb), (oc, pc)), strict=True):
        got = Counter((v["l"], v["r"]) for v in phase["mem.joined"])
        assert got == expected_pairs([o for o in os_ if o["id"] not in routed],
                                     [p for p in ps if p["id"] not in routed], within, kind)


# --- a low-level task ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_a_low_level_task_is_told_once_per_drain_and_keeps_counting_after_it(seed: int) -> None:
    rng = random.Random(3000 + seed)
    partitions = rng.randint(1, 4)
    keys = [f"k{i}" for i in range(rng.randint(1, 5))]
    config = {"stores.counts.factory": rng.choice(["rocksdb", "memory"]), "stores.counts.key.serde": "string",
              "stores.counts.msg.serde": "json", "systems.mem.samza.key.serde": "string",
              "systems.mem.streams.totals.samza.msg.serde": "json",
              "task.max.batch.messages": str(rng.choice([1, 4, 100]))}
    with TestRunner.of(f"{APPS}:DrainingCount", config) as runner:
        counts: Counter[tuple[int, str]] = Counter()

        def add(n: int) -> list[TestMessage]:
            messages = [TestMessage(b"x", key=rng.choice(keys), partition=rng.randrange(partitions)) for _ in range(n)]
            counts.update((m.partition, m.key) for m in messages)  # type: ignore[misc]
            return messages

        runner.add_input("mem.in", add(rng.randint(0, 30)), partitions=partitions).add_output("mem.totals")
        seen = 0
        for drain in (1, 2, 3):
            for _ in range(rng.randint(0, 2)):
                runner.run_batch()
            report = runner.drain()
            assert report.drained
            totals = runner.values("mem.totals")[seen:]
            seen += len(totals)
            # every count so far, once, from the drain numbered ``drain`` (on_drain ran once per task and drain)
            assert {(int(t["task"].split()[1]), t["key"]): t["count"] for t in totals} == dict(counts)
            assert len(totals) == len(counts) and {t["drain"] for t in totals} <= {drain}
            if drain < 3:   # the third drain gets no new input: the task is still told, and counts nothing new
                runner.add_input("mem.in", add(rng.randint(1, 20)))
        stores = runner.store("counts")
        assert all(store.get("#drains") == 3 for store in stores.values())


def test_one_drain_request_covers_every_stage_and_stays_until_every_task_of_each_drained() -> None:
    from sparza.engine.drain import read_drain

    with TestRunner.of(f"{APPS}:TriggeredCounts", {"app.test.size.ms": "100"}) as runner:
        runner.add_input("mem.events", [TestMessage(json.dumps({"key": "a", "n": 1}).encode(), timestamp=5)],
                         partitions=2).add_output("mem.counts", partitions=2)
        runner.run_batch()
        assert read_drain(runner.config) is None
        runner.fail_at(CommitStep.AFTER_FLUSH, job="by-key")   # the window stage fails in its draining batch
        with pytest.raises(InjectedFault):
            runner.drain()
        # The source stage drained; the request stays (one document for both stages) until the other did too.
        pending = read_drain(runner.config)
        assert pending is not None and sorted(pending.jobs) == ["triggeredcounts-by-key-1", "triggeredcounts-main-1"]
        assert sorted(pending.ends) == ["mem.events#0", "mem.events#1"]  # sources only, not the intermediate stream
        runner.restart(keep_plan=False)
        assert runner.drain().drained == pending.id  # the same drain completes
        assert read_drain(runner.config) is None
        assert runner.values("mem.counts") == [{"key": "a", "start": 0, "end": 100, "count": 1, "sum": 1,
                                                "pane": "on_time", "index": 0}]
