"""The verdict on a scenario's output, whichever engine wrote it: every record the oracle expects, exactly
once, and late routing only where the job's own rules allow it."""

from __future__ import annotations

from collections import Counter

from sparza.testing.harness.outcome import Outcome
from sparza.testing.oracle import Record, compare, expected_records, expected_table_rows

__all__ = ["judge"]


def judge(outcome: Outcome, actual: Counter[Record], routed: Counter[int]) -> None:
    """Compare ``actual`` (the output's records, or a typed table's rows) with the oracle, given the input ids
    the job routed to its late stream (``routed``, id → times); record the problems in ``outcome``."""
    s = outcome.scenario
    if routed:
        repeated = [i for i, n in routed.items() if n > 1]
        if repeated:
            outcome.problems.append(f"{len(repeated)} late messages routed more than once (e.g. ids {repeated[:5]})")
        if s.kind != "window":
            outcome.problems.append(f"{sum(routed.values())} messages routed as late by a job without a window "
                                    f"(e.g. ids {sorted(routed)[:5]}): only event-time operators may call data late")
        elif not s.late:
            outcome.problems.append(f"{len(routed)} messages routed as late although the lateness spans all event "
                                    f"times (e.g. ids {sorted(routed)[:5]})")
    excluded = routed if s.kind == "window" else Counter()
    expected = (expected_table_rows(s, excluded_ids=excluded) if s.output.startswith("table-")
                else expected_records(s, excluded_ids=excluded))
    comparison = compare(expected, actual)
    outcome.comparison = comparison
    if not comparison.ok:
        outcome.problems.append("output: " + comparison.summary())
