"""The verdict on a scenario's output, whichever engine wrote it: every record the oracle expects, exactly
once, and late routing only where the job's own rules allow it."""

from __future__ import annotations

import dataclasses
from collections import Counter

from sparza.testing.harness.outcome import Outcome
from sparza.testing.oracle import Record, compare, expected_records, expected_table_rows, reduce_panes

__all__ = ["EVENT_TIME_KINDS", "judge"]

EVENT_TIME_KINDS = ("window", "session", "join")
"""Job kinds whose operators may drop (and the harness jobs route) late messages."""


def judge(outcome: Outcome, actual: Counter[Record], routed: Counter[int], *, upto: int | None = None,
          reader_problems: list[str] | None = None) -> None:
    """Compare ``actual`` (the output's records, or a typed table's rows) with the oracle, given the input ids
    the job routed to its late stream (``routed``, id → times); record the problems in ``outcome`` (after the
    engine's own ``reader_problems``). Windows that fire several panes are reduced to their final one first
    (and their pane sequences checked). ``upto`` (a drain scenario after phase ``upto``) judges against the
    oracle of the chunks up to that phase, which the phase's drain must have brought out completely; its
    problems say which phase's drain they follow."""
    s = outcome.scenario
    if upto is not None:
        s = dataclasses.replace(s, messages=[m for m in s.messages if m.chunk <= upto])
    problems = list(reader_problems or [])
    if routed:
        repeated = [i for i, n in routed.items() if n > 1]
        if repeated:
            problems.append(f"{len(repeated)} late messages routed more than once (e.g. ids {repeated[:5]})")
        if s.kind not in EVENT_TIME_KINDS:
            problems.append(f"{sum(routed.values())} messages routed as late by a job without a window "
                            f"(e.g. ids {sorted(routed)[:5]}): only event-time operators may call data late")
        elif not s.late:
            problems.append(f"{len(routed)} messages routed as late although the lateness spans all event "
                            f"times (e.g. ids {sorted(routed)[:5]})")
    excluded = routed if s.kind in EVENT_TIME_KINDS else Counter()
    actual, pane_problems = reduce_panes(s, actual, upserted=s.output == "table-upsert")
    problems.extend(pane_problems)
    expected = (expected_table_rows(s, excluded_ids=excluded) if s.output.startswith("table-")
                else expected_records(s, excluded_ids=excluded))
    comparison = compare(expected, actual)
    if upto is None:
        outcome.comparison = comparison
    if not comparison.ok:
        problems.append("output: " + comparison.summary())
    outcome.problems.extend(problems if upto is None else [f"after the drain of phase {upto}: {p}" for p in problems])
