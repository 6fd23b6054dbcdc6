"""The same example jobs give the same outputs through ``TestRunner`` (in-process, in-memory streams) as through
the runtime on Spark (``JobRunner`` / ``run_application``, what ``sparza run --once`` runs) over Delta streams.

One Spark test: the keyed count (task.class, RocksDB store) and the demo application (two stages, a broadcast
adjunct store bootstrapped from a CDC stream, event-time windows in RocksDB, Avro output). For the demo on
Spark the blob store is local and the window results go to a Delta stream instead of Azure blobs, so the test
needs no storage account; the application and the rest of its config are the demo's.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from examples.keyed_count.config import job_values
from examples.keyed_count.load import append_messages, create_streams
from examples.wikipedia.app import WINDOW_SCHEMA
from examples.wikipedia.config import OUTPUT_CONTAINER, demo_config, output_stream
from examples.wikipedia.generate import expected_demo_windows, generate_edits, generate_profiles
from examples.wikipedia.load import create_streams as create_demo_streams
from examples.wikipedia.load import load_edits, load_profiles

from sparza.config import Config
from sparza.runtime import JobRunner
from sparza.runtime.driver.application import run_application
from sparza.serde import AvroSerde
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin
from sparza.testing import TestMessage, TestRunner

pytestmark = pytest.mark.spark

MESSAGES, KEYS = 600, 7
EDITS = 300


def _delta_rows(path: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=["partition", "key", "value", "type"])
    return [row for row in table.to_pylist() if row["type"] == 0]


def _millis(value: Any) -> int:
    return round(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)


def _windows(records: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((r["page"], _millis(r["window_start"]), _millis(r["window_end"]), r["edits"], r["bytes_changed"],
                    r["bot_edits"]) for r in records)


def _keyed_count_messages() -> list[TestMessage]:
    """What ``append_messages(config, MESSAGES, KEYS)`` writes to Delta, as test messages."""
    return [TestMessage((f"message-{i}-".encode() + b"x" * 100)[:100], key=f"k{i % KEYS}".encode(),
                        timestamp=1_700_000_000_000 + i) for i in range(MESSAGES)]


def _demo_config(root: Path) -> Config:
    config = demo_config(root, "eq", "UseDevelopmentStorage=true", partitions=2, max_batch=100)
    return config.with_overrides({
        "blob.store.manager.factory": "local", "blob.store.local.root": str(root / "blobstore"),
        f"systems.{OUTPUT_CONTAINER}.samza.factory": "delta",
        f"systems.{OUTPUT_CONTAINER}.delta.root": str(root / "out"),
    })


def test_keyed_count_and_demo_app_give_the_same_outputs_through_test_runner_and_spark(spark, work_dir: Path):
    # --- the keyed count ---------------------------------------------------------------------
    spark_config = Config(job_values(work_dir / "kc-spark", **{"task.max.batch.messages": "250"}))
    create_streams(spark_config, 2)
    append_messages(spark_config, MESSAGES, KEYS, commit_size=200)
    JobRunner(spark_config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None).run()
    on_spark = Counter((r["partition"], r["key"].decode(), r["value"]) for r in
                       _delta_rows(work_dir / "kc-spark" / "streams" / "counts"))

    with TestRunner(job_values(work_dir / "kc-runner", **{"task.max.batch.messages": "250"})) as runner:
        runner.add_input("delta.events", _keyed_count_messages(), partitions=2).add_output("delta.counts",
                                                                                            partitions=2)
        runner.run()
        in_runner = Counter((m.partition, m.key, json.dumps(m.value, separators=(",", ":")).encode())
                            for m in runner.outputs("delta.counts"))
        counts = runner.store("counts")
    assert sum(on_spark.values()) == MESSAGES
    assert in_runner == on_spark  # same messages in the same partitions
    assert {k: v for task in counts.values() for k, v in task.items()} == {
        f"k{k}": len(range(k, MESSAGES, KEYS)) for k in range(KEYS)}

    # --- the demo application ----------------------------------------------------------------
    edits, profiles = generate_edits(EDITS, seed=7), generate_profiles(seed=11)
    out = f"{OUTPUT_CONTAINER}.{output_stream('eq')}"
    root = work_dir / "demo-spark"
    config = _demo_config(root)
    create_demo_streams(config, 2)
    DeltaSystemAdmin(OUTPUT_CONTAINER, config).create_stream(StreamSpec(output_stream("eq"), 1))
    load_edits(config, edits)
    load_profiles(config, profiles, timestamp=1_767_225_600_000)
    run_application(config, spark=spark, once=True, install_signal_handlers=False)
    avro = AvroSerde(WINDOW_SCHEMA)
    spark_windows = _windows([avro.from_bytes(r["value"]) for r in _delta_rows(root / "out" / output_stream("eq"))])

    with TestRunner(dict(_demo_config(work_dir / "demo-runner").items())) as runner:
        runner.add_input("delta.edits", [
            TestMessage(json.dumps(e.to_json(), separators=(",", ":")).encode(), key=e.user.encode(),
                        timestamp=e.timestamp) for e in edits], partitions=2, bounded=True)
        runner.add_input("delta.profiles", [
            TestMessage(None if p is None else json.dumps(p, separators=(",", ":")).encode(), key=user.encode(),
                        partition=0, timestamp=1_767_225_600_000) for user, p in profiles], bounded=True)
        runner.add_output(out)
        assert runner.run().ended
        runner_windows = _windows(runner.values(out))
    expected = expected_demo_windows(edits, profiles)
    assert sum(spark_windows.values()) == len(expected)
    assert runner_windows == spark_windows
    assert {(w[0], w[1]): (w[3], w[4], w[5]) for w in runner_windows} == expected
