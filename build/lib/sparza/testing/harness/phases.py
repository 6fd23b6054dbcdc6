"""What every engine does alike in a phase of a scenario (:mod:`~sparza.testing.harness.inprocess`,
:mod:`~sparza.testing.harness.spark`): which fault its run gets, the after-run faults that follow it, and the check
after a drain between phases. How a fault is injected is each engine's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from sparza.testing.harness.jobconfig import poison_id
from sparza.testing.harness.outcome import Outcome
from sparza.testing.scenario import Scenario

__all__ = ["Phase", "plan_phase", "run_phase"]


class Phase(NamedTuple):
    """One phase as every engine runs it: its run label, its fault and, for ``poison``, the message id."""

    label: str
    fault: str
    poison: int | None


def plan_phase(s: Scenario, phase: int, fault: str, outcome: Outcome) -> Phase:
    """Phase ``phase`` of ``s`` with ``fault``; a poison fault of a phase without input becomes a clean run
    (``none``), noted in ``outcome``."""
    label = f"phase{phase}"
    poison = poison_id(s, phase) if fault == "poison" else None
    if fault == "poison" and poison is None:
        outcome.notes.append("poison: the phase has no input; nothing to poison")
        return Phase(label, "none", None)
    return Phase(label, fault, poison)


def run_phase(s: Scenario, phase: int, apply: Callable[[str, int], None], damage: Callable[[str, str], None],
              check_upto: Callable[..., None]) -> None:
    """Phase ``phase`` (its input already appended): ``apply(fault, phase)`` runs it with its first fault (or
    ``none``), ``damage(fault, label)`` does each further one to what the run left (the generator makes them
    after-run faults), and ``check_upto(upto=phase)`` judges the output when a drain ended the phase before
    the last one (it brought out everything appended so far)."""
    faults = s.faults_at(phase)
    apply(faults[0] if faults else "none", phase)
    for second in faults[1:]:
        damage(second, f"phase{phase}-second")
    if s.drain != "none" and phase < s.chunks - 1:
        check_upto(upto=phase)
