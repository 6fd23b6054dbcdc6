"""The Grafana dashboard under docs/grafana: importable (the fields Grafana's importer needs, a Prometheus
datasource variable), every query in the PromQL subset its renderer evaluates, every metric it reads
exported by a real run, and the renderer's evaluation right on known samples."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "docs" / "grafana"


def _renderer():
    spec = importlib.util.spec_from_file_location("render_dashboard", GRAFANA / "render_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads((GRAFANA / "sparza-dashboard.json").read_text())


def test_the_dashboard_has_what_grafanas_import_needs(dashboard):
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    assert [i["pluginId"] for i in dashboard["__inputs"]] == ["prometheus"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["job"]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] >= 1, panel["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("timeseries", "stat")
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))


def test_every_query_is_in_the_subset_and_reads_metrics_a_real_run_exported(dashboard):
    render = _renderer()
    exported = set((GRAFANA / "scraped-metrics.txt").read_text().split())
    used: set[str] = set()
    for panel, target in render.panel_queries(dashboard):
        assert 'sparza_job=~"$job"' in target["expr"], panel["title"]  # every query follows the job picker
        used |= render.metric_names(target["expr"])  # raises UnsupportedQuery outside the subset
    assert used and used <= exported, sorted(used - exported)
    for name in ("sparza_event_write_rate_total", "sparza_files_uploaded_total", "sparza_task_watermark",
                 "sparza_bootstrap_lag", "sparza_input_lag", "sparza_heartbeats_total", "sparza_barrier_ms_count"):
        assert name in used, name  # each seed has a panel


def test_the_renderer_evaluates_rates_aggregations_and_division():
    render = _renderer()
    series = render.Series()
    for t, a, b in [(0, 0, 0), (10, 100, 5), (20, 150, 10), (30, 30, 15)]:  # `a` resets at t=30
        series.add(t, "x_total", frozenset({("task", "0"), ("group", "g")}), a)
        series.add(t, "x_total", frozenset({("task", "1"), ("group", "g")}), b)
    q = render.Parser(render.substitute_variables('sum by (group) (rate(x_total{group=~"$job"}[1m]))')).parse()
    assert render.evaluate(q, series, 30) == {frozenset({("group", "g")}): (150 + 30 + 15) / 30}
    q = render.Parser('sum(increase(x_total{task="0"}[1m])) / sum(increase(x_total{task="1"}[1m]))').parse()
    assert render.evaluate(q, series, 30) == {frozenset(): 180 / 15}
    q = render.Parser('max by (task) (x_total{group!="h"}) - 1').parse()
    assert render.evaluate(q, series, 20) == {frozenset({("task", "0")}): 149, frozenset({("task", "1")}): 9}
    with pytest.raises(render.UnsupportedQuery):
        render.Parser("histogram_quantile(0.9, x_total)").parse()


def test_the_rendered_picture_is_in_the_docs():
    image = REPO / "docs" / "images" / "grafana-dashboard.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "images/grafana-dashboard.png" in (REPO / "docs" / "operations.md").read_text()
