"""Keyed count throughput: sparza's runtime (containers, micro-batches) vs transformWithStateInPandas vs a Python loop.

Same data for all: N 100-byte messages over K keys in P partitions of a Delta stream.

- **sparza**: the example job (``examples/keyed_count``: RocksDB store backed up to a local blob store,
  a running count per message written to a Delta stream) run by ``JobRunner`` exactly as ``sparza run
  --once`` runs it, on local[2], with the per-message task (``task.KeyedCountTask``: ``process``), in
  each execution mode ``--mode`` names: ``containers`` (long-running containers, the default) and
  ``batches`` (one Structured Streaming micro-batch per batch: the baseline of the container mode).
- **sparza batch**: the same job and output with ``batch_task.KeyedCountBatchTask`` (``process_batch``:
  Arrow columns, one store read and write per key and batch, outputs sent as Arrow rows), in the same modes.
- **peer**: the same running count with Spark's own ``transformWithStateInPandas`` (RocksDB state
  store provider, P shuffle partitions), reading the stream's Parquet files as a streaming file
  source and writing the running counts to Parquet, AvailableNow.
- **ceiling**: one Python process looping over the same rows in memory (dict counts, one output
  tuple per message): the most any Python per-message code could do.

Figures are messages per second from building the streaming query to its end (SparkSession startup
excluded), medians of ``--rounds`` rounds whose order alternates. **Warm** (default): one SparkSession;
each Spark path first runs once on 10k other messages, so none pays the JVM's and the Python workers'
first-use costs for another. **Cold** (``--cold``): every timed run in a fresh process (a new JVM and
new Python workers), so each path pays its own first-use costs and nothing else's (in one shared session,
whichever path ran first would pay the JVM's warm-up for the other).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _procs import loadavg, timer_total_ms  # noqa: E402
from _report import record, table  # noqa: E402

from sparza import stop_containers  # noqa: E402

SCALES = {"small": (100_000, 1_000, 8), "full": (2_000_000, 10_000, 8)}
MODES = ("containers", "batches")
TASKS = {"sparza": "examples.keyed_count.task.KeyedCountTask",
         "batch": "examples.keyed_count.batch_task.KeyedCountBatchTask"}
TASK_NAMES = {"sparza": "per-message task (process)", "batch": "batch task (process_batch, Arrow)"}


def sparza_paths(modes: tuple[str, ...]) -> list[str]:
    """``<task>-<mode>`` for each sparza task and execution mode, batch task first."""
    return [f"{task}-{mode}" for task in ("batch", "sparza") for mode in modes]


def split_path(path: str) -> tuple[str, str]:
    """``(task, mode)`` of a sparza path."""
    task, _, mode = path.partition("-")
    return task, mode


MEASURES = ('A keyed count in RocksDB with each running count written to a Delta stream, through `sparza run` as '
            'a per-message task and as a batch task, in the container mode and in the micro-batch mode, against '
            '`transformWithStateInPandas` doing the same and a plain Python loop over the rows in memory (the '
            'ceiling).')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""
MEASURES_COLD = ('The keyed count of the task runtime section with every timed run in a fresh JVM and fresh Python '
                 'workers, no warm-up.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def job_config(root: Path, max_batch: int, *, name: str = "bench-kc", task: str = TASKS["sparza"],
               output: str = "counts", mode: str = "containers") -> Any:
    from examples.keyed_count.config import job_values

    from sparza.config import Config

    return Config(job_values(root, **{"job.name": name, "task.max.batch.messages": max_batch, "task.class": task,
                                      "job.execution.mode": mode,
                                      "keyed_count.output": f"delta.{output}",
                                      f"systems.delta.streams.{output}.samza.key.serde": "string",
                                      f"systems.delta.streams.{output}.samza.msg.serde": "json",
                                      "blob.store.local.fsync": "false"}))


def load(config: Any, messages: int, keys: int, partitions: int) -> float:
    from examples.keyed_count.load import bulk_append, create_streams

    started = time.perf_counter()
    create_streams(config, partitions)
    bulk_append(config, messages, keys, partitions)
    return time.perf_counter() - started


def run_sparza(spark: Any, root: Path, run: str, path: str, max_batch: int,
               partitions: int) -> tuple[float, int, dict[str, float]]:
    """One sparza run (its own job name and output stream) over the events under ``root``; its time, the
    messages it processed, and where the time went (:func:`_split`)."""
    from sparza.runtime import JobRunner
    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin

    task, mode = split_path(path)
    config = job_config(root, max_batch, name=f"kc-{run}", task=TASKS[task], output=f"counts-{run}", mode=mode)
    DeltaSystemAdmin("delta", config).create_stream(StreamSpec(f"counts-{run}", partitions))
    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    first: list[float] = []
    results: list[Any] = []
    record_batch = runner._record

    def recording(batch: list[Any], elapsed_ms: float, batch_id: int, **kwargs: Any) -> None:
        # Both modes report here (a micro-batch at its end, a container about once a second): the first
        # batch began about its slowest task's time before its result arrived.
        if not first and batch:
            first.append(time.perf_counter() - max(r.process_ms + r.commit_ms for r in batch) / 1000)
        results.extend(batch)
        record_batch(batch, elapsed_ms, batch_id, **kwargs)

    runner._record = recording
    started = time.perf_counter()
    runner.run()
    ended = time.perf_counter()
    processed = runner.metrics.snapshot()["aggregate"]["messages-processed"]
    return ended - started, int(processed), _split(started, ended, first, results)


def _split(started: float, ended: float, first: list[float], results: list[Any]) -> dict[str, float]:
    """Seconds from starting the job to its first batch and from there to its end, the task batches with
    messages, and task-seconds per step summed over tasks and batches (read = Delta → Arrow, process = the
    task's own code, commit)."""
    steps = {"read": 0.0, "restore": 0.0, "process": 0.0, "commit": 0.0}
    for r in results:
        task = r.metrics.get("task", {})
        for step, timer in (("read", "read-ms"), ("restore", "prepare-ms"), ("process", "process-ms"),
                            ("commit", "commit-ms")):
            steps[step] += (timer_total_ms(task.get(timer)) or 0.0) / 1000
    steps["process"] -= steps["read"] + steps["restore"]
    start = (first[0] - started) if first else 0.0
    return {"startup": start, "batches": (ended - started) - start,
            "count": float(sum(1 for r in results if r.messages)), **steps}


def run_peer(spark: Any, root: Path, run: str, partitions: int) -> tuple[float, int]:
    """transformWithStateInPandas over the events' Parquet files, running counts to Parquet."""
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
    out_dir = root / f"peer-out-{run}"
    query = (source.selectExpr("cast(key as string) as key", "value")
             .groupBy("key")
             .transformWithStateInPandas(RunningCount(), "key string, count long", "Append", "None")
             .writeStream.format("parquet").option("path", str(out_dir))
             .option("checkpointLocation", str(root / f"peer-checkpoint-{run}"))
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


def _spark(partitions: int) -> Any:
    from sparza.testing import local_spark_session

    return local_spark_session("local[2]", "sparza-bench-runtime", **{"spark.sql.shuffle.partitions": str(partitions)})


def timed_run(spark: Any, root: Path, run: str, path: str, max_batch: int,
              partitions: int) -> tuple[float, int, dict[str, float]]:
    """One timed run of ``path`` in ``spark`` (the split is empty for the peer)."""
    if path == "peer":
        return (*run_peer(spark, root, run, partitions), {})
    return run_sparza(spark, root, run, path, max_batch, partitions)


def child(args: argparse.Namespace) -> None:
    """``--child``: one cold run in this process (a fresh JVM and Python workers); its result as JSON."""
    from sparza.runtime.driver.app import _importable_cwd

    _importable_cwd()
    spark = _spark(args.partitions)
    try:
        seconds, count, split = timed_run(spark, Path(args.root), args.run, args.child, args.max_batch,
                                          args.partitions)
    finally:
        stop_containers(spark)  # before the session stops: no container task cut off
        spark.stop()
    Path(args.out).write_text(json.dumps({"seconds": seconds, "count": count, "split": split}))


def cold_run(root: Path, run: str, path: str, max_batch: int, partitions: int) -> tuple[float, int, dict[str, float]]:
    out = root / f"{run}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, __file__, "--child", path, "--root", str(root), "--run", run, "--max-batch",
                    str(max_batch), "--partitions", str(partitions), "--out", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    return float(result["seconds"]), int(result["count"]), dict(result["split"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--messages", type=int, default=None, help="override the scale's message count")
    parser.add_argument("--cold", action="store_true", help="every timed run in a fresh process, no warm-up")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default: 1 small, 2 full)")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both",
                        help="sparza's execution mode(s) (default both: containers, and batches as its baseline)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    for hidden in ("--root", "--run", "--out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--max-batch", dest="max_batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--partitions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    messages, keys, partitions = SCALES[args.scale]
    if args.messages:
        messages = args.messages
    rounds = args.rounds or (1 if args.scale == "small" else 2)
    paths = [*sparza_paths(MODES if args.mode == "both" else (args.mode,)), "peer"]
    from sparza.runtime.driver.app import _importable_cwd

    _importable_cwd()
    root = Path(tempfile.mkdtemp(prefix="sparza-bench-runtime-"))
    max_batch = max(messages // partitions // 2, 1000)
    times: dict[str, list[float]] = {p: [] for p in paths}
    splits: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    try:
        config = job_config(root, max_batch)
        load_s = load(config, messages, keys, partitions)
        print(f"loaded {messages} messages in {load_s:.1f} s", flush=True)
        order = [list(paths) if r % 2 == 0 else list(reversed(paths)) for r in range(rounds)]
        spark = None if args.cold else _spark(partitions)
        try:
            if spark is not None:  # warm-up: each Spark path once on other data
                warm_root = root / "warm-up"
                load(job_config(warm_root, 1000), 10_000, 100, partitions)
                for path in paths:
                    timed_run(spark, warm_root, f"warm-{path}", path, 1000, partitions)
            for r, ordered in enumerate(order):
                for path in ordered:
                    run = f"{path}-{r}"
                    if spark is None:
                        seconds, count, split = cold_run(root, run, path, max_batch, partitions)
                    else:
                        seconds, count, split = timed_run(spark, root, run, path, max_batch, partitions)
                    assert count == messages, (path, count, messages)
                    times[path].append(seconds)
                    splits[path].append(split)
                    print(f"round {r + 1} {path}: {messages / seconds:,.0f} msg/s ({seconds:.1f} s, load "
                          f"{loadavg()})", flush=True)
        finally:
            if spark is not None:
                stop_containers(spark)  # before the session stops: no container task cut off
                spark.stop()
        ceiling_s, ceiling_n = run_ceiling(config, partitions)
        assert ceiling_n == messages
    finally:
        shutil.rmtree(root, ignore_errors=True)
    body = render(times, ceiling_s, messages, keys, partitions, rounds, args.cold, splits)
    cmd = (f"python bench/runtime.py --scale {args.scale}" + (f" --messages {args.messages}" if args.messages else "")
           + (f" --rounds {args.rounds}" if args.rounds else "") + (f" --mode {args.mode}" if args.mode != "both"
                                                                    else "")
           + (" --cold" if args.cold else ""))
    record("runtime-cold" if args.cold else "runtime",
           "Task runtime: keyed count, containers vs micro-batches vs transformWithStateInPandas vs a Python loop"
           + (" (cold: no warm-up)" if args.cold else ""), cmd, body,
           measures=MEASURES_COLD if args.cold else MEASURES)


def _name(path: str) -> str:
    if path == "peer":
        return "transformWithStateInPandas (RocksDB state, Parquet output)"
    task, mode = split_path(path)
    return f"sparza run, {TASK_NAMES[task]}, {mode}"


def render(times: dict[str, list[float]], ceiling_s: float, messages: int, keys: int, partitions: int, rounds: int,
           cold: bool, splits: dict[str, list[dict[str, float]]]) -> str:
    """The report section."""
    med = {p: statistics.median(v) for p, v in times.items()}
    rate = {p: messages / s for p, s in med.items()}
    rate["ceiling"] = messages / ceiling_s
    sparza = [p for p in times if p != "peer"]

    def vs_batches(path: str) -> str:
        task, mode = split_path(path)
        base = f"{task}-batches"
        return f"{rate[path] / rate[base]:.2f}x" if mode == "containers" and base in rate else "-"

    rows = [[_name(p), f"{med[p]:.1f}", ", ".join(f"{s:.1f}" for s in times[p]), f"{rate[p]:,.0f}",
             f"{rate[p] / rate['peer']:.2f}x", vs_batches(p) if p != "peer" else "-",
             f"{100 * rate[p] / rate['ceiling']:.1f}%"] for p in times]
    rows.append(["plain Python loop in memory (ceiling)", f"{ceiling_s:.2f}", "-", f"{rate['ceiling']:,.0f}",
                 f"{rate['ceiling'] / rate['peer']:.2f}x", "-", "100%"])
    how = ("Cold: every timed run in a fresh process (new JVM, new Python workers), no warm-up." if cold else
           "Warm: one SparkSession; each Spark path ran once on 10k other messages first.")
    lines = []
    for task in ("batch", "sparza"):
        c, b = f"{task}-containers", f"{task}-batches"
        if c in rate:
            line = f"{TASK_NAMES[task]}: containers **{rate[c] / rate['peer']:.2f}x** the peer (goal ≥ 4x)"
            if b in rate:
                line += (f", **{rate[c] / rate[b]:.2f}x** the micro-batch mode (goal ≥ 1.5x; micro-batches "
                         f"{rate[b] / rate['peer']:.2f}x the peer)")
            lines.append(line + f"; {100 * rate[c] / rate['ceiling']:.1f}% of the ceiling.")
        elif b in rate:
            lines.append(f"{TASK_NAMES[task]}: micro-batches {rate[b] / rate['peer']:.2f}x the peer.")
    return (f"{messages:,} messages of 100 bytes, {keys:,} keys, {partitions} partitions, local[2]; {rounds} round(s), "
            f"order alternating, medians. {how}\n\n"
            + table(["path", "median s", "runs (s)", "messages/s", "vs peer", "vs micro-batches", "vs ceiling"], rows)
            + "\n\n" + "  \n".join(lines) + "\n"
            "Time from starting the job to its end; SparkSession startup excluded. Every message is counted "
            "in RocksDB (json serde) and its running count written to a Delta stream; both sparza tasks write "
            "the same rows.\n"
            + _render_split({p: splits[p] for p in sparza}, messages, rate["ceiling"]))


def _render_split(splits: dict[str, list[dict[str, float]]], messages: int, ceiling_rate: float) -> str:
    """Where the sparza paths' time goes (means over the rounds), and the rate of the task's own code
    alone: what the Python-loop comparison leaves out (reading, committing state and output, Spark)."""
    rows = []
    for path, runs in splits.items():
        if not runs:
            continue
        mean = {k: statistics.mean(s[k] for s in runs) for k in runs[0]}
        own = messages / mean["process"] if mean["process"] > 0 else float("nan")
        task, mode = split_path(path)
        rows.append([f"{TASK_NAMES[task].split(' (')[0]}, {mode}", f"{mean['startup']:.2f}",
                     f"{mean['batches']:.2f} ({mean['count']:.0f})",
                     f"{mean['read']:.2f}", f"{mean['restore']:.2f}", f"{mean['process']:.2f}",
                     f"{mean['commit']:.2f}", f"{own:,.0f}", f"{100 * own / ceiling_rate:.0f}%"])
    if not rows:
        return ""
    return ("\nWhere sparza's time goes (seconds, mean of the rounds): job start to its first batch (containers: "
            "the epoch's Spark job, the containers' start and task init included); from there to the end (task "
            "batches with messages); and task-seconds summed over the tasks (2 run at once): read = Delta → "
            "Arrow, process = the task's own code (deserialize, count in the store, send), commit = flush, "
            "snapshot, checkpoint. The last columns are the rate of the task's own code alone and its share of "
            "the Python loop's.\n\n"
            + table(["path", "start → first batch", "first batch → end (task batches)", "read", "restore",
                     "process", "commit", "own code msg/s (task-s)", "vs ceiling"], rows) + "\n")


if __name__ == "__main__":
    main()
