"""The fault harness draws day-two operations (a savepoint restored over the job, a rewind in place to a
savepoint's state, the input's partitions grown) between runs, only where they apply, without changing any other
draw; and the in-process engine runs them with the oracle's exact output (seeds whose count job goes on after the
operation, so a savepoint that lost state or a new partition counted by the wrong task would show)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sparza.testing.harness import run_inprocess_scenario
from sparza.testing.scenario import AFTER_RUN_FAULTS, DAYOPS_FAULTS, generate


def test_day_two_operations_are_drawn_apart_and_leave_older_draws_alone() -> None:
    drawn = [generate(seed) for seed in range(1, 800)]
    ops = [s for s in drawn if s.fault2 in DAYOPS_FAULTS]
    assert {s.fault2 for s in ops} == set(DAYOPS_FAULTS) and set(DAYOPS_FAULTS) <= AFTER_RUN_FAULTS
    assert any(s.kind == "count" and not s.bounded for s in ops)
    grown = [s for s in ops if s.fault2 == "partition-growth"]
    assert {s.api for s in grown} == {"task", "app"} and {s.grow_policy for s in grown} >= {"group", "fail", "auto"}
    for s in drawn:
        plain = generate(s.seed, dayops=False)
        if s.fault2 not in DAYOPS_FAULTS:
            assert s == plain
            continue
        assert s.processors == 1 and plain.fault2 == "none"
        assert f"fault2={s.fault2}@phase{s.fault2_phase}" in s.describe()
        if s.fault2 == "partition-growth":
            assert not s.bounded and s.fault2_phase < s.chunks - 1 and s.partitions < s.grow_to <= 2 * s.partitions
            assert f"grow={s.partitions}->{s.grow_to}/{s.grow_policy}" in s.describe()
            # Only the later chunks moved, each message within its task, each key of a task to one partition.
            later: dict[tuple[str, int], set[int]] = {}
            for m, was in zip(s.messages, plain.messages, strict=True):
                assert (m.id, m.key, m.chunk) == (was.id, was.key, was.chunk)
                assert m.partition == was.partition if m.chunk <= s.fault2_phase else \
                    m.partition % s.partitions == was.partition
                if m.chunk > s.fault2_phase:
                    later.setdefault((m.key, was.partition), set()).add(m.partition)
            assert all(len(partitions) == 1 for partitions in later.values())
            assert dataclasses.replace(s, fault2="none", fault2_phase=plain.fault2_phase, grow_to=0,
                                       grow_policy="auto", grow_then="", messages=plain.messages) == plain
            continue
        assert s.api == "task" and s.backup
        assert dataclasses.replace(s, fault2="none", fault2_phase=plain.fault2_phase, backup=plain.backup) == plain


@pytest.mark.parametrize("fault", DAYOPS_FAULTS)
@pytest.mark.parametrize("seed", [43, 50])
def test_the_in_process_engine_runs_them_exactly(tmp_path: Path, seed: int, fault: str) -> None:
    scenario = generate(seed, fault=fault)
    assert scenario.kind == "count" and not scenario.bounded and scenario.fault_phase < scenario.chunks - 1
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.problems
    assert any(note.startswith(f"{fault}:") for note in outcome.notes), outcome.notes


def test_a_growth_the_job_reads_on_through_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose expansion policy is fail must stop at the grown input: one that read on (the policy ignored) is
    reported, and so is its count of the new partitions (4 -> 8, SEP-5 grouping on, then the oracle's)."""
    import sparza.engine.job
    import sparza.engine.partitions

    scenario = generate(4110)
    assert (scenario.kind, scenario.fault2, scenario.grow_policy, scenario.grow_then) == (
        "count", "partition-growth", "fail", "group")
    outcome = run_inprocess_scenario(scenario, tmp_path / "ok")
    assert outcome.ok, outcome.problems
    monkeypatch.setattr(sparza.engine.partitions, "expansion_policy", lambda config: "group")
    monkeypatch.setattr(sparza.engine.job, "expansion_policy", lambda config: "group")
    outcome = run_inprocess_scenario(scenario, tmp_path / "read-on")
    assert not outcome.ok and any("the job read on" in p for p in outcome.problems), outcome.problems


def test_an_application_whose_input_grows_regroups_its_first_stage_and_stays_exact(tmp_path: Path) -> None:
    """Sliding windows behind partition_by(key): the input grows 5 -> 9 between the runs; the run after it stops
    (job.partition.expansion: fail) naming the stream; with group set the first stage regroups, the intermediate
    stream keeps its partitions, and every pane is the oracle's."""
    scenario = generate(1833)
    assert (scenario.api, scenario.kind, scenario.fault2, scenario.grow_to) == ("app", "window", "partition-growth", 9)
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.problems
    assert any(note.startswith("partition-growth: kafka.in 5 -> 9") and "stopped naming the stream" in note
               for note in outcome.notes), outcome.notes


# Found by the soak (seed 107845149): a savepoint drawn right after the purged-snapshot fault, in the same phase (no run
# between them), cannot be taken (the job's committed snapshots are gone), yet the harness expected it to be and ended
# in a harness error. It must be refused saying that state is gone; the harness then brings the blobs back and takes
# it again. 2741 is the same for a rewind in place (one task rewound).
@pytest.mark.parametrize("seed", [107845149, 2741])
def test_a_savepoint_right_after_a_purge_is_refused_then_taken_once_the_blobs_are_back(tmp_path: Path,
                                                                                        seed: int) -> None:
    scenario = generate(seed)
    assert (scenario.fault, scenario.fault2) in (("purged-snapshot", "savepoint-restore"),
                                                 ("purged-snapshot", "rewind-in-place"))
    assert scenario.fault_phase == scenario.fault2_phase
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()
    assert any(note.startswith(f"{scenario.fault2}: refused after the purge (SavepointError)") for note in outcome.notes
               ), outcome.notes


def test_a_savepoint_refused_after_a_purge_without_saying_why_is_found(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the first savepoint after the purge refused with a reason that names nothing gone
    (the one taken once the blobs are back copies as it should)."""
    import sparza.ops.savepoints
    from sparza.ops import SavepointError

    copy = sparza.ops.savepoints._copy_for_savepoint
    refused: list[str] = []

    def mute(*args: Any, **kwargs: Any) -> str:
        if not refused:
            refused.append("once")
            raise SavepointError("savepoint cannot be taken")
        return copy(*args, **kwargs)

    monkeypatch.setattr(sparza.ops.savepoints, "_copy_for_savepoint", mute)
    outcome = run_inprocess_scenario(generate(107845149), tmp_path)
    assert refused and outcome.problems, outcome.problems
    assert all("without saying that state is gone" in p for p in outcome.problems), outcome.problems
