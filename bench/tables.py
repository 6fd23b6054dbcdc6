"""Typed result tables: the keyed count written by ``sparza run`` as an append table and as an upserted view,
against ``deltalake`` writing the same rows in the same commits (``write_deltalake`` / ``DeltaTable.merge``).

Same input for both: N 100-byte messages over K keys in P partitions of a Delta stream.

- **sparza**: the example job (``examples/keyed_count``) run by ``JobRunner`` exactly as ``sparza run --once``
  runs it on local[2], its output ``counts`` a typed table: ``append`` (one row ``key, count`` per message) or
  ``upsert`` keyed by ``key`` (the current count per key; one merge per task and batch, with app
  transactions, P tasks merging concurrently).
- **deltalake**: one Python process writing the rows the job writes, one commit per (task, batch) as the job
  does: ``write_deltalake(mode="append")`` or ``DeltaTable.merge`` of the batch's latest count per key, one
  after the other (no concurrency, no app transactions, no Spark).

Figures are messages per second; the sparza time includes the whole job (reading, counting in RocksDB,
checkpoints), the deltalake time only the table writes, so the ratio is what the job pays on top of its
output writes. SparkSession startup is excluded; a 5k-message warm-up run comes first.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _report import record, table  # noqa: E402

SCALES = {"small": (20_000, 500, 4, 2_500), "full": (200_000, 5_000, 4, 10_000)}
"""messages, keys, partitions, task.max.batch.messages"""

SCHEMA = "key string not null, count long not null"


MEASURES = ('Writing typed result tables (append, and upsert by key) through `sparza run`, against deltalake '
            'writing the same rows directly.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def job_config(root: Path, mode: str, max_batch: int) -> Any:
    from examples.keyed_count.config import job_values

    from sparza.config import Config

    table = {"systems.delta.streams.counts.delta.location": str(root / "tables" / f"counts-{mode}"),
             "systems.delta.streams.counts.delta.table.schema": SCHEMA,
             "systems.delta.streams.counts.delta.table.mode": mode}
    if mode == "upsert":
        table["systems.delta.streams.counts.delta.table.key"] = "key"
    return Config(job_values(root, **{"job.name": f"bench-tables-{mode}", "task.max.batch.messages": max_batch,
                                      "blob.store.local.fsync": "false", **table}))


def load(config: Any, messages: int, keys: int, partitions: int) -> None:
    from examples.keyed_count.load import bulk_append

    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin

    DeltaSystemAdmin("delta", config).create_stream(StreamSpec("events", partitions))
    bulk_append(config, messages, keys, partitions)


def run_sparza(spark: Any, config: Any) -> float:
    from sparza.runtime import JobRunner

    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    started = time.perf_counter()
    runner.run()
    return time.perf_counter() - started


def batches(config: Any, partitions: int, max_batch: int) -> list[list[tuple[str, int]]]:
    """The job's output rows, grouped as the job commits them: per task, per batch of ``max_batch`` messages."""
    from sparza.streams import SystemStreamPartition
    from sparza.systems.delta import DeltaSystemConsumer

    consumer = DeltaSystemConsumer("delta", config)
    out = []
    for p in range(partitions):
        keys: list[str] = []
        for batch in consumer.read_arrow(SystemStreamPartition("delta", "events", p), None, None, False):
            keys.extend(k.decode() for k in batch.column("key").to_pylist())
        counts: dict[str, int] = {}
        rows = []
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
            rows.append((k, counts[k]))
        out += [rows[i:i + max_batch] for i in range(0, len(rows), max_batch)]
    return out


def run_deltalake(location: Path, mode: str, groups: list[list[tuple[str, int]]]) -> float:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    schema = pa.schema([pa.field("key", pa.string(), False), pa.field("count", pa.int64(), False)])
    DeltaTable.create(str(location), schema)
    started = time.perf_counter()
    for rows in groups:
        if mode == "upsert":
            latest = dict(rows)
            data = pa.table({"key": list(latest), "count": list(latest.values())}, schema=schema)
            (DeltaTable(str(location)).merge(data, "t.key = s.key", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        else:
            data = pa.table({"key": [k for k, _ in rows], "count": [c for _, c in rows]}, schema=schema)
            write_deltalake(str(location), data, mode="append")
    return time.perf_counter() - started


def check(location: Path, mode: str, groups: list[list[tuple[str, int]]]) -> None:
    """The sparza table holds exactly the expected rows (so the two sides did the same work)."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(location)).to_pyarrow_table().to_pylist()
    got = sorted((r["key"], r["count"]) for r in rows)
    flat = [row for group in groups for row in group]
    want = sorted(flat) if mode == "append" else sorted(dict(sorted(flat, key=lambda r: r[1])).items())
    assert got == want, f"{mode}: the job's table differs from the expected rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    args = parser.parse_args()
    messages, keys, partitions, max_batch = SCALES[args.scale]
    from sparza.runtime.driver.app import _importable_cwd
    from sparza.testing import local_spark_session

    _importable_cwd()
    root = Path(tempfile.mkdtemp(prefix="sparza-bench-tables-"))
    results: dict[str, tuple[float, float, int]] = {}
    try:
        spark = local_spark_session("local[2]", "sparza-bench-tables")
        try:
            warm = job_config(root / "warm-up", "upsert", 1000)
            load(warm, 5_000, 100, partitions)
            run_sparza(spark, warm)
            for mode in ("append", "upsert"):
                mode_root = root / mode
                config = job_config(mode_root, mode, max_batch)
                load(config, messages, keys, partitions)
                sparza_s = run_sparza(spark, config)
                groups = batches(config, partitions, max_batch)
                check(mode_root / "tables" / f"counts-{mode}", mode, groups)
                plain_s = run_deltalake(mode_root / "plain", mode, groups)
                results[mode] = (sparza_s, plain_s, len(groups))
                print(f"{mode}: sparza {sparza_s:.1f} s, deltalake {plain_s:.1f} s, {len(groups)} commits")
        finally:
            spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for mode, (sparza_s, plain_s, commits) in results.items():
        rows.append([f"{mode}: sparza run (keyed count → typed table)", commits, f"{sparza_s:.1f}",
                     f"{messages / sparza_s:,.0f}", "1.00"])
        rows.append([f"{mode}: deltalake {'merge' if mode == 'upsert' else 'write_deltalake'} of the same rows",
                     commits, f"{plain_s:.1f}", f"{messages / plain_s:,.0f}", f"{sparza_s / plain_s:.2f}x faster"
                     if plain_s < sparza_s else f"{plain_s / sparza_s:.2f}x slower"])
    body = (f"{messages:,} messages of 100 bytes, {keys:,} keys, {partitions} partitions (tasks), "
            f"task.max.batch.messages {max_batch:,}, local[2].\n\n"
            + table(["path", "commits", "seconds", "messages/s", "vs sparza"], rows)
            + "\n\nsparza's time is the whole job (read, count in RocksDB, checkpoint, write the table with app "
              "transactions; upserts merge concurrently from the tasks and retry on conflict); deltalake's is "
              "only its table writes, one after the other. Both tables were checked to hold the same rows.\n")
    record("tables", "Typed result tables: sparza run vs deltalake writes of the same rows",
           f"python bench/tables.py --scale {args.scale}", body, measures=MEASURES)


if __name__ == "__main__":
    main()
