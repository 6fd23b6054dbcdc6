"""The verdict on a scenario's output, whichever engine wrote it: every record the oracle expects, exactly
once, and late routing only where the job's own rules allow it."""

from __future__ import annotations

from collections import Counter

from sparza.testing.harness.outcome import Outcome
from sparza.testing.oracle import Record, compare, expected_records, expected_table_rows, reduce_panes

__all__ = ["EVENT_TIME_KINDS", "judge"]

EVENT_TIME_KINDS = ("window", "session", "join")
"""Job kinds whose operators may drop (and the harness jobs route) late messages."""


def judge(outcome: Outcome, actual: Counter[Record], routed: Counter[int]) -> None:
    """Compare ``actual`` (the output's records, or a typed table's rows) with the oracle, given the input ids
    the job routed to its late stream (``routed``, id → times); record the problems in ``outcome``. Windows that
    fire several panes are reduced to their final one first (and their pane sequences checked)."""
    s = outcome.scenario
    if routed:
        repeated = [i for i, n in routed.items() if n > 1]
        if repeated:
            outcome.problems.append(f"{len(repeated)} late messages routed more than once (e.g. ids {repeated[:5]})")
        if s.kind not in EVENT_TIME_KINDS:
            outcome.problems.append(f"{sum(routed.values())} messages routed as late by a job without a window "
                                    f"(e.g. ids {sorted(routed)[:5]}): only event-time operators may call data late")
        elif not s.late:
            outcome.problems.append(f"{len(routed)} messages routed as late although the lateness spans all event "
                                    f"times (e.g. ids {sorted(routed)[:5]})")
    excluded = routed if s.kind in EVENT_TIME_KINDS else Counter()
    actual, pane_problems = reduce_panes(s, actual, upserted=s.output == "table-upsert")
    outcome.problems.extend(pane_problems)
    expected = (expected_table_rows(s, excluded_ids=excluded) if s.output.startswith("table-")
                else expected_records(s, excluded_ids=excluded))
    comparison = compare(expected, actual)
    outcome.comparison = comparison
    if not comparison.ok:
        outcome.problems.append("output: " + comparison.summary())
