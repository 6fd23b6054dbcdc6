"""The demo's data generator: seeded, Zipf-shaped, and the expected windows it implies."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from examples.wikipedia.generate import (
    expected_demo_windows,
    expected_windows,
    final_profiles,
    generate_edits,
    generate_profiles,
    profiles_for_users,
    read_edits_jsonl,
    write_jsonl,
)


def test_same_seed_same_data_other_seed_other_data() -> None:
    assert generate_edits(500, seed=3) == generate_edits(500, seed=3)
    assert generate_edits(500, seed=3) != generate_edits(500, seed=4)
    assert generate_profiles(seed=1) == generate_profiles(seed=1)


def test_pages_are_skewed_and_times_span_hours() -> None:
    edits = generate_edits(5_000)
    pages = Counter(e.page for e in edits).most_common()
    assert pages[0][1] > 20 * pages[-1][1]  # a hot head and a long tail
    span = max(e.timestamp for e in edits) - min(e.timestamp for e in edits)
    assert 2.9 * 3_600_000 < span < 3.1 * 3_600_000


def test_cdc_rows_insert_update_and_delete() -> None:
    rows = generate_profiles(200)
    users = [u for u, _ in rows]
    assert len(set(users)) == 200 and len(rows) > 200
    deleted = {u for u, p in rows if p is None}
    assert deleted and not (deleted & set(final_profiles(rows)))
    assert len(final_profiles(rows)) == 200 - len(deleted)


def test_expected_demo_windows_drop_deleted_users_and_count_bots() -> None:
    edits = generate_edits(3_000)
    rows = generate_profiles()
    table = final_profiles(rows)
    demo = expected_demo_windows(edits, rows)
    plain = expected_windows(edits)
    assert sum(v[0] for v in demo.values()) == sum(1 for e in edits if e.user in table)
    assert sum(v[0] for v in plain.values()) == len(edits)
    bots = {u for u, p in table.items() if p["bot"]}
    assert sum(v[2] for v in demo.values()) == sum(1 for e in edits if e.user in bots)


def test_real_input_round_trip_and_profiles_for_its_users(tmp_path: Path) -> None:
    edits = generate_edits(50)
    path = tmp_path / "edits.jsonl"
    write_jsonl(path, [e.to_json() for e in edits])
    assert list(read_edits_jsonl(path)) == edits
    rows = profiles_for_users(["ann", "bob", "cy"])
    assert {u for u, _ in rows} <= {"ann", "bob", "cy"}
    path.write_text(json.dumps({"page": "x"}) + "\n")
    with pytest.raises(ValueError, match="edits.jsonl:1"):
        list(read_edits_jsonl(path))
