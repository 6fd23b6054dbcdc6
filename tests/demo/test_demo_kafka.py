"""``sparza demo --source kafka`` at small scale, run as a user runs it: a subprocess with its own
SPARZA_HOME (so no dev broker is running and the demo starts its own Apache Kafka broker).

The edits, the profile CDC stream and the ``partition_by`` stream are Kafka topics; the window
results are still Avro blobs on Azurite. They are compared, window by window, with the counts
computed directly from the generated input (``expected_demo_windows``): exactly, not roughly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from examples.wikipedia.generate import expected_demo_windows, final_profiles, generate_edits, generate_profiles

from sparza.azure import StorageAccount
from sparza.host import port_open
from sparza.systems.azureblob.reading import decode_blob

pytestmark = pytest.mark.spark

EVENTS = 1_500
SPARZA = str(Path(sys.executable).parent / "sparza")


def _millis(value: Any) -> int:
    return round(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)


def test_demo_on_kafka_topics_matches_the_counts_computed_from_the_input(
        tmp_path: Path, azure_connection_string: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "SPARZA_HOME": str(home), "AZURE_STORAGE_CONNECTION_STRING": azure_connection_string}
    proc = subprocess.run([SPARZA, "demo", "--source", "kafka", "--events", str(EVENTS), "--partitions", "2"],
                          cwd=home, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    [summary_file] = list((home / "demo").glob("*/summary.json"))
    summary = json.loads(summary_file.read_text())
    run = summary["run_id"]

    # The verification passed, and the summary says the source was Kafka: input and intermediate topics.
    assert summary["verified"] is True and "every window matches" in out
    assert summary["source"] == "kafka"
    assert summary["streams"] == [f"kafka.wikipedia-{run}-edits", f"kafka.wikipedia-{run}-profiles",
                                  f"kafka.wikipedia-{run}-by-page"]
    assert f"source: kafka (Kafka topics kafka.wikipedia-{run}-edits" in out
    assert summary["events"] == EVENTS
    assert summary["messages_in"]["main"] == EVENTS      # every edit read once from the topic
    assert summary["repartitioned"] == EVENTS             # and written once into the intermediate topic

    # The windows' totals, read back from the blobs, are exactly the independent computation.
    container = StorageAccount.from_connection_string(azure_connection_string).blob_service_client() \
        .get_container_client(summary["container"])
    records = []
    for blob in container.list_blobs(name_starts_with=summary["stream"] + "/"):
        records.extend(decode_blob(blob.name, container.download_blob(blob.name).readall()))
    got = {(r["page"], _millis(r["window_start"])): (r["edits"], r["bytes_changed"], r["bot_edits"])
           for r in records}
    edits, profiles = generate_edits(EVENTS, seed=7), generate_profiles(seed=11)
    expected = expected_demo_windows(edits, profiles)
    assert len(records) == len(got) == summary["windows"]   # each window exactly once
    assert got == expected
    kept = sum(v[0] for v in got.values())
    assert kept == sum(1 for e in edits if e.user in final_profiles(profiles)) < EVENTS  # deletes joined away
    assert sum(v[1] for v in got.values()) == sum(e.bytes_changed for e in edits if e.user in final_profiles(profiles))

    # The demo started its own broker and stopped it; no Kafka client was left talking to it.
    port = int(re.search(r"Apache Kafka broker started for this run on 127\.0\.0\.1:(\d+)", out).group(1))  # type: ignore[union-attr]
    assert not port_open(port)
    assert "rdkafka" not in proc.stderr and "Connection refused" not in proc.stderr, proc.stderr[-2000:]
