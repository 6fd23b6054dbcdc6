"""tests/scheduling.py: the order ``make test`` hands its xdist workers the tests in."""

from __future__ import annotations

from tests.scheduling import REPO_ROOT, arrange, chunk_sizes, read_durations


def test_chunks_are_the_sizes_worksteal_first_sends() -> None:
    assert chunk_sizes(7, 2) == [3, 4] and chunk_sizes(10, 3) == [3, 3, 4] and sum(chunk_sizes(1642, 2)) == 1642


def test_each_worker_chunk_starts_with_its_greedy_share_of_the_long_tests_and_the_short_keep_their_order() -> None:
    ids = [f"t{i}" for i in range(20)]
    durations = {"t3": 100.0, "t17": 90.0, "t9": 60.0, "t12": 40.0, "t5": 5.0}  # t5 is under the threshold
    out = arrange(ids, ids, durations, workers=2)
    assert sorted(out) == sorted(ids)
    first, second = out[:10], out[10:]
    assert first[:2] == ["t3", "t12"] and second[:2] == ["t17", "t9"]  # 100+40 against 90+60
    short = [i for i in out if durations.get(i, 0.0) < 10.0]
    assert short == [i for i in ids if durations.get(i, 0.0) < 10.0]


def test_one_worker_or_no_known_long_test_keeps_the_collection_order() -> None:
    ids = [f"t{i}" for i in range(5)]
    assert arrange(ids, ids, {"t4": 50.0}, workers=1) == ids
    assert arrange(ids, ids, {}, workers=2) == ids


def test_more_long_tests_than_a_chunk_holds_still_runs_every_test_once() -> None:
    ids = [f"t{i}" for i in range(6)]
    durations = {i: 100.0 + n for n, i in enumerate(ids)}
    out = arrange(ids, ids, durations, workers=4)
    assert sorted(out) == sorted(ids)


def test_the_recorded_slow_tests_name_existing_test_files() -> None:
    durations = read_durations()
    assert len(durations) > 50
    missing = {nid.split("::", 1)[0] for nid in durations} - {
        str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "tests").rglob("test_*.py")}
    assert not missing, f"tests/slow_tests.txt names files that are gone (regenerate it): {sorted(missing)}"
