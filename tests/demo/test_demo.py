"""``sparza demo`` at small scale, run as a user runs it: a subprocess with its own SPARZA_HOME.

The output blobs are read back from Azurite and compared, window by window, with the counts
computed directly from the generated input (``expected_demo_windows``): exactly, not roughly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from examples.wikipedia.generate import expected_demo_windows, final_profiles, generate_edits, generate_profiles

from sparza.azure import StorageAccount
from sparza.systems.azureblob.reading import decode_blob

pytestmark = pytest.mark.spark

EVENTS = 2_000
REPO = Path(__file__).resolve().parents[2]
SPARZA = str(Path(sys.executable).parent / "sparza")


def _millis(value: Any) -> int:
    return round(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, azure_connection_string: str) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("demo-home")
    env = {**os.environ, "SPARZA_HOME": str(home), "AZURE_STORAGE_CONNECTION_STRING": azure_connection_string}
    proc = subprocess.run([SPARZA, "demo", "--events", str(EVENTS)], cwd=home, env=env, capture_output=True,
                          text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summaries = list((home / "demo").glob("*/summary.json"))
    assert len(summaries) == 1
    return {"stdout": proc.stdout, "summary": json.loads(summaries[0].read_text()), "env": env, "home": home}


def test_output_blobs_match_counts_computed_from_the_input(demo_run: dict[str, Any],
                                                           azure_connection_string: str) -> None:
    summary = demo_run["summary"]
    container = StorageAccount.from_connection_string(azure_connection_string).blob_service_client() \
        .get_container_client(summary["container"])
    records = []
    names = []
    for blob in container.list_blobs(name_starts_with=summary["stream"] + "/"):
        names.append(blob.name)
        assert blob.name.endswith(".avro.gz")
        records.extend(decode_blob(blob.name, container.download_blob(blob.name).readall()))
    got = {(r["page"], _millis(r["window_start"])): (r["edits"], r["bytes_changed"], r["bot_edits"])
           for r in records}
    edits, profiles = generate_edits(EVENTS, seed=7), generate_profiles(seed=11)
    expected = expected_demo_windows(edits, profiles)
    assert len(records) == len(got)  # each window exactly once
    assert got == expected
    for r in records:
        assert _millis(r["window_end"]) - _millis(r["window_start"]) == 60_000
    # The join dropped the edits of deleted users, and only those.
    kept = sum(v[0] for v in got.values())
    assert kept == sum(1 for e in edits if e.user in final_profiles(profiles)) < EVENTS
    assert sorted(names) == sorted(b["name"] for b in summary["blobs"])


def test_summary_reports_the_run(demo_run: dict[str, Any]) -> None:
    summary, out = demo_run["summary"], demo_run["stdout"]
    assert summary["verified"] is True
    assert summary["events"] == EVENTS
    assert summary["messages_in"]["main"] == EVENTS
    assert summary["repartitioned"] == EVENTS
    assert summary["windows"] == len(expected_demo_windows(generate_edits(EVENTS, seed=7),
                                                           generate_profiles(seed=11)))
    # Window stores of both stage-2 tasks and the broadcast profile snapshot are named.
    stores = {store for stores in summary["snapshots"].values() for store in stores}
    assert "window-page-minute" in stores and "profiles (adjunct)" in stores
    assert "every window matches" in out
    assert f"sparza blobs ls {summary['container']} {summary['stream']}/" in out
    for blob in summary["blobs"][:1]:
        assert blob["name"] in out


def test_read_back_commands_print_the_windows(demo_run: dict[str, Any]) -> None:
    summary, env = demo_run["summary"], demo_run["env"]
    ls = subprocess.run([SPARZA, "blobs", "ls", summary["container"], summary["stream"] + "/"], env=env,
                        capture_output=True, text=True, timeout=60, check=True)
    assert len(ls.stdout.strip().splitlines()) == len(summary["blobs"])
    first = summary["blobs"][0]
    cat = subprocess.run([SPARZA, "blobs", "cat", summary["container"], first["name"]], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in cat.stdout.splitlines()]
    assert len(lines) == first["records"]
    assert {"page", "window_start", "window_end", "edits", "bytes_changed", "bot_edits"} <= set(lines[0])


def test_the_page_stats_table_holds_every_window_and_answers_the_printed_query(demo_run: dict[str, Any]) -> None:
    """The windows are also upserted into a typed Delta table: Polars reads exactly the expected windows,
    and the DuckDB command the summary prints runs and shows the busiest page-minute first."""
    import polars as pl

    summary, out = demo_run["summary"], demo_run["stdout"]
    expected = expected_demo_windows(generate_edits(EVENTS, seed=7), generate_profiles(seed=11))
    rows = pl.read_delta(summary["table"]).to_dicts()
    got = {(r["page"], _millis(r["window_start"])): (r["edits"], r["bytes_changed"], r["bot_edits"]) for r in rows}
    assert len(rows) == len(got) == summary["table_rows"] and got == expected
    lines = out.splitlines()
    command = lines[lines.index(next(line for line in lines if line.startswith("query the table"))) + 1].strip()
    assert command.startswith(sys.executable)
    shown = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120, check=True).stdout
    busiest = min(expected.items(), key=lambda kv: (-kv[1][0], kv[0][0]))[0][0]   # ORDER BY edits DESC, page
    assert busiest in shown.splitlines()[4]   # the first data row of DuckDB's box
