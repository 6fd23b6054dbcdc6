"""app.output(..., schema=...): checked when described, planned into delta.table.* keys, panes as rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from sparza.api import ApiError, StreamApplication, WindowPane, plan_application
from sparza.api.stage_task import table_row
from sparza.config import Config
from sparza.streams import SystemStream
from sparza.systems.delta.settings import DeltaSystemSettings
from sparza.systems.delta.tables import TableSpec, table_spec_from_config

EVENTS = SystemStream("delta", "events")
PREFIX = "systems.delta.streams.window_stats.delta.table."


def _config(**extra: str) -> Config:
    return Config({"job.name": "shop", "app.class": "sparza.api.examples.WindowedCountTable",
                   "systems.delta.samza.factory": "delta", "systems.delta.delta.root": "/tmp/x", **extra})


def test_planner_writes_the_table_keys_into_every_stage_and_config_wins():
    plan = plan_application(_config(), {EVENTS: 2})
    stage = plan.stage("by-key").config
    assert stage[PREFIX + "mode"] == "upsert" and stage[PREFIX + "key"] == "key,window_start"
    spec: TableSpec = table_spec_from_config(DeltaSystemSettings("delta", stage), "window_stats")
    assert spec.schema.names == ["key", "window_start", "window_end", "count", "sum"]
    assert spec.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    assert not spec.schema.field("key").nullable and spec.key == ("key", "window_start")
    assert json.loads(stage[PREFIX + "schema"])["type"] == "struct"
    given = plan_application(_config(**{PREFIX + "partition.by": "key"}), {EVENTS: 2}).stage("by-key").config
    assert given[PREFIX + "partition.by"] == "key" and given[PREFIX + "mode"] == "upsert"


def test_bad_table_declarations_fail_when_described():
    app = StreamApplication(Config())
    with pytest.raises(ApiError, match="key column 'page' is not in the schema"):
        app.output("delta.t", schema="views long", mode="upsert", key=["page"])
    with pytest.raises(ApiError, match="upsert needs key columns"):
        app.output("delta.t", schema="views long", mode="upsert")
    with pytest.raises(ApiError, match="needs schema"):
        app.output("delta.t", mode="upsert", key="page")
    with pytest.raises(ApiError, match="typed tables need a delta system"):
        plan_application(_config(**{"systems.delta.samza.factory": "azureblob"}), {EVENTS: 2})


def test_window_panes_become_rows():
    assert table_row(WindowPane({"page": "a"}, 0, 60_000, {"views": 3})) == {
        "window_start": 0, "window_end": 60_000, "page": "a", "views": 3}
    assert table_row(WindowPane("a", 0, 10, 3)) == {"window_start": 0, "window_end": 10, "key": "a", "value": 3}
    assert table_row({"x": 1}) == {"x": 1}
    with pytest.raises(ApiError, match="'window_start'"):
        table_row(WindowPane({"window_start": 1}, 0, 10, 3))
