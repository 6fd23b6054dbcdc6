"""The fault harness draws day-two operations (a savepoint restored over the job, a rewind in place to a
savepoint's state) between runs, only where sparza.ops supports them, without changing any other draw; and the
in-process engine runs them with the oracle's exact output (seeds whose count job goes on after the operation,
so a savepoint that lost state would show)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparza.testing.harness import run_inprocess_scenario
from sparza.testing.scenario import AFTER_RUN_FAULTS, DAYOPS_FAULTS, generate


def test_day_two_operations_are_drawn_apart_and_leave_older_draws_alone() -> None:
    drawn = [generate(seed) for seed in range(1, 800)]
    ops = [s for s in drawn if s.fault2 in DAYOPS_FAULTS]
    assert {s.fault2 for s in ops} == set(DAYOPS_FAULTS) and set(DAYOPS_FAULTS) <= AFTER_RUN_FAULTS
    assert any(s.kind == "count" and not s.bounded for s in ops)
    for s in drawn:
        plain = generate(s.seed, dayops=False)
        if s.fault2 not in DAYOPS_FAULTS:
            assert s == plain
            continue
        assert s.api == "task" and s.processors == 1 and s.backup and plain.fault2 == "none"
        assert dataclasses.replace(s, fault2="none", fault2_phase=plain.fault2_phase, backup=plain.backup) == plain
        assert f"fault2={s.fault2}@phase{s.fault2_phase}" in s.describe()


@pytest.mark.parametrize("fault", DAYOPS_FAULTS)
@pytest.mark.parametrize("seed", [43, 50])
def test_the_in_process_engine_runs_them_exactly(tmp_path: Path, seed: int, fault: str) -> None:
    scenario = generate(seed, fault=fault)
    assert scenario.kind == "count" and not scenario.bounded and scenario.fault_phase < scenario.chunks - 1
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.problems
    assert any(note.startswith(f"{fault}:") for note in outcome.notes), outcome.notes
