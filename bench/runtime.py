"""Keyed count throughput: sparza's runtime vs Spark's transformWithStateInPandas vs a plain Python loop.

Same data for all three: N 100-byte messages over K keys in P partitions of a Delta stream.

- **sparza**: the example job (``examples/keyed_count``: RocksDB store, a running count per message
  written to a Delta stream) run by ``JobRunner`` exactly as ``sparza run --once`` runs it, on local[2].
- **peer**: the same running count with Spark's own ``transformWithStateInPandas`` (RocksDB state
  store provider, P shuffle partitions), reading the stream's Parquet files as a streaming file
  source and writing the running counts to Parquet, AvailableNow.
- **ceiling**: one Python process looping over the same rows in memory (dict counts, one output
  tuple per message): the most any Python per-message code could do.

Figures are messages per second from building the streaming query to its end. Both Spark paths run
in one SparkSession after a small warm-up run of each on separate data (10k messages), so neither
pays the JVM's and the Python worker pool's first-use costs for the other; SparkSession startup is
excluded. ``--cold`` skips the warm-up (then whichever runs first pays those costs).
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

SCALES = {"small": (100_000, 1_000, 8), "full": (2_000_000, 10_000, 8)}


def job_config(root: Path, max_batch: int) -> Any:
    from examples.keyed_count.config import job_values

    from sparza.config import Config

    return Config(job_values(root, **{"job.name": "bench-kc", "task.max.batch.messages": max_batch,
                                      "blob.store.local.fsync": "false"}))


def load(config: Any, messages: int, keys: int, partitions: int) -> float:
    from examples.keyed_count.load import bulk_append, create_streams

    started = time.perf_counter()
    create_streams(config, partitions)
    bulk_append(config, messages, keys, partitions)
    return time.perf_counter() - started


def run_sparza(spark: Any, config: Any) -> tuple[float, int]:
    from sparza.runtime import JobRunner

    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    started = time.perf_counter()
    runner.run()
    elapsed = time.perf_counter() - started
    processed = runner.metrics.snapshot()["aggregate"]["messages-processed"]
    return elapsed, int(processed)


def run_peer(spark: Any, root: Path, partitions: int) -> tuple[float, int]:
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class RunningCount(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", StructType([StructField("c", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            c = self.count.get()[0] if self.count.exists() else 0
            for pdf in rows:
                n = len(pdf)
                counts = range(c + 1, c + n + 1)
                c += n
                yield pd.DataFrame({"key": [key[0]] * n, "count": list(counts)})
            self.count.update((c,))

        def close(self) -> None:
            pass

    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    started = time.perf_counter()
    source = (spark.readStream.schema("key binary, value binary, timestamp long, type tinyint, producer string, "
                                      "partition int")
              .parquet(str(root / "streams" / "events")))
    out_dir = root / "peer-out"
    query = (source.selectExpr("cast(key as string) as key", "value")
             .groupBy("key")
             .transformWithStateInPandas(RunningCount(), "key string, count long", "Append", "None")
             .writeStream.format("parquet").option("path", str(out_dir))
             .option("checkpointLocation", str(root / "peer-checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    rows = spark.read.parquet(str(out_dir)).count()
    return elapsed, int(rows)


def run_ceiling(config: Any, partitions: int) -> tuple[float, int]:
    from sparza.streams import SystemStreamPartition
    from sparza.systems.delta import DeltaSystemConsumer

    consumer = DeltaSystemConsumer("delta", config)
    keys: list[bytes] = []
    values: list[bytes] = []
    for p in range(partitions):
        for batch in consumer.read_arrow(SystemStreamPartition("delta", "events", p), None, None, False):
            keys.extend(batch.column("key").to_pylist())
            values.extend(batch.column("value").to_pylist())
    started = time.perf_counter()
    counts: dict[str, int] = {}
    out = []
    for key, _value in zip(keys, values, strict=True):
        k = key.decode()
        c = counts.get(k, 0) + 1
        counts[k] = c
        out.append((k, c))
    elapsed = time.perf_counter() - started
    return elapsed, len(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--messages", type=int, default=None, help="override the scale's message count")
    parser.add_argument("--cold", action="store_true", help="no warm-up runs before the timed ones")
    args = parser.parse_args()
    messages, keys, partitions = SCALES[args.scale]
    if args.messages:
        messages = args.messages
    from sparza.runtime.app import _importable_cwd
    from sparza.testing import local_spark_session

    _importable_cwd()
    root = Path(tempfile.mkdtemp(prefix="sparza-bench-runtime-"))
    try:
        config = job_config(root, max_batch=max(messages // partitions // 2, 1000))
        load_s = load(config, messages, keys, partitions)
        print(f"loaded {messages} messages in {load_s:.1f} s")
        spark = local_spark_session("local[2]", "sparza-bench-runtime",
                                    **{"spark.sql.shuffle.partitions": str(partitions)})
        try:
            if not args.cold:
                warm_root = root / "warm-up"
                warm = job_config(warm_root, max_batch=1000)
                load(warm, 10_000, 100, partitions)
                run_sparza(spark, warm)
                run_peer(spark, warm_root, partitions)
            sparza_s, sparza_n = run_sparza(spark, config)
            print(f"sparza: {sparza_n} in {sparza_s:.1f} s")
            peer_s, peer_n = run_peer(spark, root, partitions)
            print(f"peer: {peer_n} in {peer_s:.1f} s")
        finally:
            spark.stop()
        ceiling_s, ceiling_n = run_ceiling(config, partitions)
        assert sparza_n == messages and peer_n == messages and ceiling_n == messages, (sparza_n, peer_n, ceiling_n)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rate = {name: messages / s for name, s in (("sparza", sparza_s), ("peer", peer_s), ("ceiling", ceiling_s))}
    rows = [
        ["sparza run (keyed count, RocksDB store, Delta output)", f"{sparza_s:.1f}", f"{rate['sparza']:,.0f}", "1.00"],
        ["transformWithStateInPandas (RocksDB state, Parquet output)", f"{peer_s:.1f}", f"{rate['peer']:,.0f}",
         f"{rate['peer'] / rate['sparza']:.2f}"],
        ["plain Python loop in memory (ceiling)", f"{ceiling_s:.2f}", f"{rate['ceiling']:,.0f}",
         f"{rate['ceiling'] / rate['sparza']:.2f}"],
    ]
    body = (f"{messages:,} messages of 100 bytes, {keys:,} keys, {partitions} partitions, local[2].\n\n"
            + table(["path", "seconds", "messages/s", "rate vs sparza"], rows)
            + f"\n\n{'Cold: no warm-up run' if args.cold else 'Warm: each path ran once on 10k other messages first'}."
            + f"\n\nsparza vs peer: **{rate['sparza'] / rate['peer']:.2f}x** (goal ≥ 2x); "
              f"sparza vs ceiling: **{100 * rate['sparza'] / rate['ceiling']:.1f}%** (goal ≥ 25%).\n"
              "Time from building the query to its end; SparkSession startup excluded. Every message is counted "
              "in RocksDB (json serde) and its running count written to a Delta stream.\n")
    cmd = (f"python bench/runtime.py --scale {args.scale}" + (f" --messages {args.messages}" if args.messages else "")
           + (" --cold" if args.cold else ""))
    record("runtime-cold" if args.cold else "runtime",
           "Task runtime: keyed count on Spark vs transformWithStateInPandas vs a Python loop"
           + (" (cold: no warm-up)" if args.cold else ""), cmd, body)


if __name__ == "__main__":
    main()
