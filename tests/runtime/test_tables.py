"""Typed result tables through `sparza run`: the keyed count written as an append table and as an upserted
materialized view, with a one-time task failure after the flush (Spark retries the task, the replay must
commit nothing twice), read back with deltalake, DuckDB, Polars and Spark and compared with a plain count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import expected_counts, job_values, run_sparza, write_config

from sparza.config import Config
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin
from sparza.testing.faults import fault_keys

pytestmark = pytest.mark.slow


def _job(work_dir: Path, partitions: int, overrides: dict[str, str], **table: str) -> Config:
    """The keyed-count job with its output ``counts`` as a typed table (created by the job's first flush)."""
    values = {"systems.delta.streams.counts.delta.location": str(work_dir / "tables" / "counts"),
              # The shared 2-core machine can be so loaded that a Python worker takes over Spark's default
              # 15 s to connect back (seen: "Python worker failed to connect back" before the first batch).
              "spark.python.authenticate.socketTimeout": "120s", **overrides}
    values.update({f"systems.delta.streams.counts.delta.table.{k}": v for k, v in table.items()})
    config = Config(job_values(work_dir, **values))
    DeltaSystemAdmin("delta", config).create_stream(StreamSpec("events", partitions))
    return config


def _transactions(location: Path) -> list[tuple[str, int]]:
    """Every (app id, version) the table's commits carry, read from the Delta log's JSON files."""
    found = []
    for path in sorted((location / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        txns = [(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a]
        has_data = any("add" in a or "remove" in a for a in actions)
        assert len(txns) == (1 if has_data and path.name != "00000000000000000000.json" else len(txns))
        found += txns
    return found


def test_append_table_gets_every_update_exactly_once_despite_a_retried_task(work_dir):
    marker = work_dir / "failed-once"
    config = _job(work_dir, 2, {**fault_keys(marker), "task.max.batch.messages": "400"},
                  schema="key string not null, count long not null, at timestamp", **{"timestamp.column": "at"})
    append_messages(config, 900, 5, commit_size=300)
    result = run_sparza("run", "--config", str(write_config(config, work_dir / "job.yaml")), "--once",
                        "--master", "local[2,2]", timeout=900)
    assert result.returncode == 0, result.stderr
    assert marker.exists()   # a task did fail after its flush, and Spark ran it again

    from deltalake import DeltaTable

    rows = DeltaTable(str(work_dir / "tables" / "counts")).to_pyarrow_table().to_pylist()
    # Independent expectation: key k_j gets counts 1..n_j, each exactly once.
    expected = sorted((k, c) for k, n in expected_counts(900, 5).items() for c in range(1, n + 1))
    assert sorted((r["key"], r["count"]) for r in rows) == expected
    assert all(r["at"] is None for r in rows)   # the task sends no event time: null, never the wall clock
    assert set(rows[0]) == {"key", "count", "at"}                            # real columns, no control rows
    txns = _transactions(work_dir / "tables" / "counts")
    assert len(txns) == len(set(txns)) and {app for app, _ in txns} == {"kc-1/Partition 0", "kc-1/Partition 1"}


def test_upserted_view_holds_the_final_count_per_key_with_four_tasks(work_dir, request):
    marker = work_dir / "failed-once"
    config = _job(work_dir, 4, {**fault_keys(marker), "task.max.batch.messages": "100"},
                  schema="key string not null, count long", mode="upsert", key="key")
    append_messages(config, 1200, 37, commit_size=400)
    result = run_sparza("run", "--config", str(write_config(config, work_dir / "job.yaml")), "--once",
                        "--master", "local[2,2]", timeout=900)
    assert result.returncode == 0, result.stderr
    assert marker.exists()
    expected = expected_counts(1200, 37)
    location = work_dir / "tables" / "counts"

    from deltalake import DeltaTable

    table = DeltaTable(str(location))
    got = {r["key"]: r["count"] for r in table.to_pyarrow_table().to_pylist()}
    assert got == expected and table.count() == 37
    # Four tasks merged concurrently, each batch exactly once: every data commit carries one transaction
    # and no (task, batch) transaction was committed twice.
    txns = _transactions(location)
    assert len(txns) == len(set(txns)) and {app for app, _ in txns} == {f"kc-1/Partition {p}" for p in range(4)}

    import duckdb
    import polars

    files = table.file_uris()
    assert dict(duckdb.connect().execute("SELECT key, count FROM read_parquet(?)", [files]).fetchall()) == expected
    frame = polars.read_delta(str(location))
    assert dict(zip(frame["key"].to_list(), frame["count"].to_list(), strict=True)) == expected
    # Spark SQL over the Parquet files the Delta log names (no Delta jars needed in the session); the shared
    # session starts only now, so its JVM does not compete with the job's.
    spark = request.getfixturevalue("spark")
    spark.read.parquet(*files).createOrReplaceTempView("counts_view")
    rows = spark.sql("SELECT key, count FROM counts_view").collect()
    assert {r["key"]: r["count"] for r in rows} == expected and len(rows) == 37


def test_high_level_windows_upserted_into_a_typed_table(work_dir, request):
    """`send_to(app.output(..., schema=..., mode="upsert", key=[...]))` of window panes, compared with a plain
    Python count per key and window."""
    from sparza.runtime.driver.application import run_application
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems.delta import DeltaSystemProducer

    config = Config({
        "job.name": "stats", "app.class": "sparza.api.examples.WindowedCountTable",
        "app.example.window.ms": "100", "app.example.partitions": "2",
        "job.logged.store.base.dir": str(work_dir / "state"), "task.commit.ms": "0",
        "task.max.batch.messages": "40",
        "systems.delta.samza.factory": "delta", "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work_dir / "streams"),
        "systems.delta.streams.events.bounded": "true",
        "blob.store.local.root": str(work_dir / "blobstore"),
    })
    DeltaSystemAdmin("delta", config).create_stream(StreamSpec("events", 2))
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    events = [(f"k{i % 5}", i % 9, 1000 + i * 7) for i in range(150)]
    for i, (key, n, ts) in enumerate(events):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"),
                                                      json.dumps({"key": key, "n": n}).encode(), key=key.encode(),
                                                      partition=i % 2, timestamp=ts))
    producer.flush("test")
    outcome = run_application(config, spark=request.getfixturevalue("spark"), install_signal_handlers=False)
    assert outcome.reason == "all inputs ended"

    expected: dict[tuple[str, int], list[int]] = {}
    for key, n, ts in events:
        acc = expected.setdefault((key, ts - ts % 100), [0, 0])
        acc[0] += 1
        acc[1] += n
    from deltalake import DeltaTable

    rows = DeltaTable(str(work_dir / "streams" / "window_stats")).to_pyarrow_table().to_pylist()
    got = {(r["key"], int(r["window_start"].timestamp() * 1000)): [r["count"], r["sum"]] for r in rows}
    assert got == expected and len(rows) == len(expected)
    assert all(int((r["window_end"] - r["window_start"]).total_seconds() * 1000) == 100 for r in rows)
