"""The demo application's plan: two stages, the profile store and its broadcast input only in stage 2."""

from __future__ import annotations

from pathlib import Path

from examples.wikipedia.app import WINDOW_SCHEMA, join_profile, parse_edit, window_record
from examples.wikipedia.config import demo_config

from sparza.api import WindowPane, plan_application
from sparza.serde import AvroSerde
from sparza.streams import SystemStream


def _plan(tmp_path: Path):
    config = demo_config(tmp_path, "r1", "UseDevelopmentStorage=true", partitions=2)
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
