"""Keyed count through Spark Connect vs the same job on a local SparkSession, in the same run.

Same job and data for both (``examples/keyed_count``: N 100-byte messages over K keys in P partitions of a
Delta stream, a RocksDB count per key, a running count per message written to a Delta stream), each run by
``JobRunner`` as ``sparza run --once`` runs it:

- **local**: a local[2] SparkSession in this process (Structured Streaming, ``foreachBatch``);
- **connect**: a Spark Connect server (local[2], its own JVM on loopback, started from the installed
  pyspark) and a client session in this process: the client-driven batch loop
  (``runtime/driver/clientloop.py``), the code shipped as ``job.py.files`` (``sparza package``).

Each path first runs once on 10k other messages (JVM, Python workers and imports warm), then the timed
runs alternate local, connect, local, connect on fresh copies of the data, so load on the shared machine
hits both alike. Figures are messages per second from starting the run to its end; session and server
startup are excluded.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
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
ROUNDS = 2


MEASURES = ('The keyed count of the task runtime section run through Spark Connect (the client plans every batch, '
            'the server runs one Spark job per batch), against the same job in a local session.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def job_config(root: Path, max_batch: int, package: Path | None) -> Any:
    from examples.keyed_count.config import job_values

    from sparza.config import Config

    extra = {"job.py.files": str(package), "job.filesystem.shared": "true"} if package else {}
    return Config(job_values(root, **{"job.name": "bench-kc", "task.max.batch.messages": max_batch,
                                      "blob.store.local.fsync": "false", **extra}))


def load(config: Any, messages: int, keys: int, partitions: int) -> None:
    from examples.keyed_count.load import bulk_append, create_streams

    create_streams(config, partitions)
    bulk_append(config, messages, keys, partitions)


def timed_run(spark: Any, config: Any) -> tuple[float, int, int]:
    """Seconds, messages processed and batches of one ``--once`` run."""
    from sparza.runtime import JobRunner

    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    started = time.perf_counter()
    outcome = runner.run()
    elapsed = time.perf_counter() - started
    return elapsed, int(runner.metrics.snapshot()["aggregate"]["messages-processed"]), outcome.batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--messages", type=int, default=None, help="override the scale's message count")
    args = parser.parse_args()
    messages, keys, partitions = SCALES[args.scale]
    if args.messages:
        messages = args.messages
    from sparza.devservers.spark import SparkConnectServer
    from sparza.runtime.driver.app import _importable_cwd
    from sparza.runtime.driver.packaging import build_package
    from sparza.runtime.driver.session import connect_session
    from sparza.testing import local_spark_session

    _importable_cwd()
    base = Path(tempfile.mkdtemp(prefix="sparza-bench-connect-"))
    max_batch = max(messages // partitions // 2, 1000)
    results: dict[str, list[tuple[float, int, int]]] = {"local": [], "connect": []}
    server = SparkConnectServer(base / "server")
    try:
        package = build_package(base / "job.zip", ["examples"]).path
        server.start()
        sessions = {"local": local_spark_session("local[2]", "sparza-bench-connect",
                                                 **{"spark.sql.shuffle.partitions": str(partitions)}),
                    "connect": connect_session(server.url)}
        try:
            for name, spark in sessions.items():  # warm-up: 10k other messages on each path
                warm = job_config(base / f"warm-{name}", 1000, package if name == "connect" else None)
                load(warm, 10_000, 100, partitions)
                timed_run(spark, warm)
            for i in range(ROUNDS):
                for name, spark in sessions.items():
                    config = job_config(base / f"{name}-{i}", max_batch, package if name == "connect" else None)
                    load(config, messages, keys, partitions)
                    result = timed_run(spark, config)
                    assert result[1] == messages, (name, result)
                    results[name].append(result)
                    print(f"round {i + 1} {name}: {messages} in {result[0]:.1f} s ({result[2]} batches)", flush=True)
        finally:
            for spark in sessions.values():
                spark.stop()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    seconds = {name: statistics.median(r[0] for r in runs) for name, runs in results.items()}
    rate = {name: messages / s for name, s in seconds.items()}
    batches = {name: runs[0][2] for name, runs in results.items()}
    rows = [[name, ", ".join(f"{r[0]:.1f}" for r in results[name]), f"{seconds[name]:.1f}", batches[name],
             f"{rate[name]:,.0f}", f"{rate[name] / rate['local']:.2f}"] for name in ("local", "connect")]
    body = (f"{messages:,} messages of 100 bytes, {keys:,} keys, {partitions} partitions; both paths on local[2] "
            "of this host (the Connect server in its own JVM on loopback).\n\n"
            + table(["path", "seconds per round", "median s", "batches", "messages/s", "rate vs local"], rows)
            + f"\n\nSpark Connect vs local session: **{rate['connect'] / rate['local']:.2f}x** the local rate. "
              "\n"
              "Warm: each path ran once on 10k other messages first; timed runs alternate local and connect. "
              "On Connect the client plans every batch and each batch is one Spark job on the server whose result "
              "rows come back over gRPC; locally the batch is a Structured Streaming micro-batch.\n")
    cmd = f"python bench/connect.py --scale {args.scale}" + (f" --messages {args.messages}" if args.messages else "")
    record("runtime-connect", "Task runtime through Spark Connect vs a local session (keyed count)", cmd, body,
           measures=MEASURES)


if __name__ == "__main__":
    main()
