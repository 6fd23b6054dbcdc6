"""The demo application: its plan (two stages, the profile store and its broadcast input only in stage 2), its
operators, and its exact windows through ``sparza.testing.TestRunner`` (in-process, no Spark, no Azure)."""

from __future__ import annotations

import json
from pathlib import Path

from examples.wikipedia.app import WINDOW_SCHEMA, join_profile, parse_edit, window_record
from examples.wikipedia.config import OUTPUT_CONTAINER, demo_config, output_stream
from examples.wikipedia.generate import (
    expected_demo_windows,
    expected_user_sessions,
    generate_edits,
    generate_profiles,
)

from sparza.api import WindowPane, plan_application
from sparza.serde import AvroSerde
from sparza.streams import SystemStream
from sparza.testing import TestMessage, TestRunner


def _plan(tmp_path: Path, sessions: bool = False):
    config = demo_config(tmp_path, "r1", "UseDevelopmentStorage=true", partitions=2, sessions=sessions)
    return plan_application(config, {SystemStream("delta", "edits"): 2, SystemStream("delta", "profiles"): 1})


def test_two_stages_split_at_partition_by_page(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert [s.name for s in plan.stages] == ["main", "by-page"]
    main, by_page = (s.config for s in plan.stages)
    assert main.get_str("task.inputs") == "delta.edits"
    assert by_page.get_str("task.inputs") == "delta.wikipedia-r1-by-page"
    assert main.get_str("task.intermediate.outputs") == "delta.wikipedia-r1-by-page"


def test_profile_store_and_its_broadcast_input_belong_to_stage_two_only(tmp_path: Path) -> None:
    main, by_page = (s.config for s in _plan(tmp_path).stages)
    assert by_page.get_str("task.broadcast.inputs") == "delta.profiles#0"
    assert by_page.get_str("stores.profiles.adstore.input") == "delta.profiles"
    assert by_page.get_str("stores.window-page-minute.factory") == "rocksdb"
    assert by_page.get_str("stores.window-page-minute.backup.factories") == "blobstore"
    # Stage 1 has no profile store, so it must not read the profile stream either.
    assert main.get_str("task.broadcast.inputs", "") == ""
    assert main.get_str("stores.profiles.adstore.input", None) is None
    assert main.get_str("stores.window-user-sessions.factory", None) is None  # sessions only with --sessions
    # With --sessions stage 1 keeps the users' editing sessions (the edits are partitioned by user): no third stage.
    plan = _plan(tmp_path, sessions=True)
    assert [s.name for s in plan.stages] == ["main", "by-page"]
    main, by_page = (s.config for s in plan.stages)
    assert main.get_str("stores.window-user-sessions.factory") == "rocksdb"
    assert by_page.get_str("stores.window-user-sessions.factory", None) is None


def test_operators() -> None:
    assert parse_edit(b'{"page":"P","user":"u","bytes_changed":-5,"timestamp":1}') == [
        {"page": "P", "user": "u", "bytes_changed": -5}]
    assert parse_edit(b"not json") == [] and parse_edit(b'{"page":"P"}') == []
    joined = join_profile({"page": "P", "user": "u", "bytes_changed": 3}, {"country": "DE", "bot": True})
    assert joined["country"] == "DE" and joined["bot"] is True
    record = window_record(WindowPane("P", 60_000, 120_000, [2, 7, 1]))
    assert record == {"page": "P", "window_start": 60_000, "window_end": 120_000, "edits": 2,
                      "bytes_changed": 7, "bot_edits": 1}
    assert AvroSerde(WINDOW_SCHEMA).from_bytes(AvroSerde(WINDOW_SCHEMA).to_bytes(record))["edits"] == 2


def test_demo_windows_are_exact_through_the_test_runner(tmp_path: Path) -> None:
    edits, profiles = generate_edits(400, seed=7), generate_profiles(seed=11)
    out = f"{OUTPUT_CONTAINER}.{output_stream('r1')}"
    config = demo_config(tmp_path, "r1", "UseDevelopmentStorage=true", partitions=2, max_batch=100, sessions=True)
    with TestRunner(dict(config.items())) as runner:  # the blob store moves to the runner's work dir
        runner.add_input("delta.edits", [TestMessage(json.dumps(e.to_json()).encode(), key=e.user.encode(),
                                                     timestamp=e.timestamp) for e in edits], partitions=2, bounded=True)
        runner.add_input("delta.profiles", [TestMessage(None if p is None else json.dumps(p).encode(),
                                                        key=user.encode(), partition=0, timestamp=0)
                                            for user, p in profiles], bounded=True)
        runner.add_output(out)
        report = runner.run()
        assert report.ended and report.late == 0
        got = {(r["page"], round(r["window_start"].timestamp() * 1000)): (r["edits"], r["bytes_changed"],
                                                                          r["bot_edits"])
               for r in runner.values(out)}  # decoded with the application's Avro serde
        assert len(runner.values(out)) == len(got)  # each window once
        assert got == expected_demo_windows(edits, profiles)
        # The same windows, upserted into the typed page_stats table (real Delta, read with deltalake).
        from deltalake import DeltaTable

        rows = DeltaTable(str(tmp_path / "tables" / "page_stats")).to_pyarrow_table().to_pylist()
        table = {(r["page"], round(r["window_start"].timestamp() * 1000)): (r["edits"], r["bytes_changed"],
                                                                            r["bot_edits"]) for r in rows}
        assert len(rows) == len(table) and table == got
        # Each user's editing sessions, upserted into user_sessions by stage 1 (merged-away sessions deleted).
        rows = DeltaTable(str(tmp_path / "tables" / "user_sessions")).to_pyarrow_table().to_pylist()
        sessions = {(r["user"], round(r["window_start"].timestamp() * 1000)): (
            round(r["window_end"].timestamp() * 1000), r["edits"], r["bytes_changed"]) for r in rows}
        assert len(rows) == len(sessions) and sessions == expected_user_sessions(edits)
        assert {r["pane"] for r in rows} <= {"on_time", "late"}
        # Every stage-2 task kept its window store; all windows fired, so only bookkeeping is left in them.
        assert set(runner.store("window-page-minute")) == {"Partition 0", "Partition 1"}
