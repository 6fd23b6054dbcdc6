"""End-to-end latency through running jobs: single messages through one stage, window ends through two.

1. **Single message, one stage** (``examples/keyed_count``: RocksDB store backed up to a local blob
   store, Delta output, 2 tasks): one message is appended to the input (a Delta commit); its latency
   is the commit time of the output row (Delta history) minus the end of the append. Messages are
   sent one at a time, each after the previous one's output appeared, with a random pause so sends
   do not lock onto the trigger's phase. Measured at ``task.commit.ms: 0`` (a batch as soon as data
   is there) and at the default trigger (1000 ms: the trigger interval is the floor, on average half
   of it is spent waiting for the next trigger). The **fixed cost of a 1-message batch** is Spark's
   ``triggerExecution`` of those batches (planning, offset log, the tasks, commit log), with its
   parts and the tasks' own commit steps.
   **Spark's floor** for the same fixed cost: a native query (a Parquet file source, one 1-row file
   per message, into a ``foreachBatch`` that collects the row) at ``task.commit.ms: 0``'s trigger, in
   the same session: what a micro-batch of one row costs here with no sparza code in it.
2. **Window end → output, two stages** (``sparza.api.examples.WindowedCount``: ``partition_by`` key
   then a 2 s tumbling count): events are appended in real time (event time = wall clock, 200/s);
   a window's latency is the commit time of its output row minus the window's end.

Both jobs share one SparkSession (local[2]) and run after a warm-up; session startup is excluded.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _procs import spark_durations, timer_total_ms  # noqa: E402
from _report import pct, record, table  # noqa: E402

SCALES = {"small": {"messages": 6, "window_seconds": 15}, "full": {"messages": 40, "window_seconds": 45}}
WINDOW_MS = 2000
WINDOW_RATE = 200


MEASURES = ("The time from writing one message to its output committed (one stage), from a window's end to its "
            "result (two stages), and the fixed cost of a 1-message batch, against Spark's own 1-row micro-batch "
            'in the same session.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


class _Recorder:
    """Collects every batch's task results and wall time of a JobRunner (wraps its ``_record``)."""

    def __init__(self, runner: Any) -> None:
        self.batches: list[tuple[float, list[Any]]] = []
        original = runner._record

        def recording(results: list[Any], elapsed_ms: float, batch_id: int, **kwargs: Any) -> None:
            self.batches.append((elapsed_ms, list(results)))
            original(results, elapsed_ms, batch_id, **kwargs)

        runner._record = recording


def _start(runner: Any) -> threading.Thread:
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    while thread.is_alive() and getattr(runner, "_query", None) is None:
        time.sleep(0.05)
    return thread


def _output_times(root: Path, stream: str, after_version: int) -> dict[int, int]:
    from deltalake import DeltaTable

    return {int(h["version"]): int(h["timestamp"]) for h in DeltaTable(str(root / stream)).history()
            if int(h["version"]) > after_version}


def single_message(spark: Any, work: Path, commit_ms: int, count: int) -> dict[str, Any]:
    """Latencies (ms) of ``count`` single messages through the keyed count at ``task.commit.ms``."""
    from deltalake import DeltaTable
    from examples.keyed_count.config import job_values
    from examples.keyed_count.load import create_streams

    from sparza.config import Config
    from sparza.runtime import JobRunner
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems.delta import DeltaSystemProducer

    # The micro-batch mode: this measures a micro-batch's fixed cost against Spark's own (its progress
    # reports); the container mode's latency is bench/kafka_latency.py's.
    config = Config(job_values(work, **{"job.name": f"lat{commit_ms}", "task.commit.ms": commit_ms,
                                        "job.execution.mode": "batches", "blob.store.local.fsync": "false"}))
    create_streams(config, 2)
    streams = work / "streams"
    producer = DeltaSystemProducer("delta", config)
    producer.register("bench")
    runner = JobRunner(config, spark=spark, install_signal_handlers=False, status=lambda line: None)
    recorder = _Recorder(runner)
    thread = _start(runner)
    out = DeltaTable(str(streams / "counts"))
    latencies: list[float] = []
    measured_from = 0
    try:
        for i in range(count + 2):  # the first two warm the Python workers up: not measured
            if i == 2:
                measured_from = len(recorder.batches)
            version = out.version()
            time.sleep(random.uniform(0.05, 0.3))
            producer.send("bench", OutgoingMessageEnvelope(SystemStream("delta", "events"), b"x" * 100,
                                                           key=f"k{i}".encode(), timestamp=int(time.time() * 1000)))
            producer.flush("bench")
            sent_ms = time.time() * 1000
            deadline = time.monotonic() + 60
            while out.version() == version:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise RuntimeError(f"no output for message {i} within 60 s (commit.ms {commit_ms})")
                time.sleep(0.01)
                out.update_incremental()
            if i >= 2:
                committed = min(_output_times(streams, "counts", version).values())
                latencies.append(committed - sent_ms)
        progress = list(runner._query.recentProgress)
    finally:
        runner.request_stop("bench done")
        thread.join(120)
    batches = recorder.batches[measured_from:]
    one = [(ms, results) for ms, results in batches if sum(r.messages for r in results) == 1]
    ran = [p for p in progress if p["durationMs"].get("addBatch")]  # idle triggers run no batch
    spark_parts = spark_durations(ran[-len(batches):] if batches else [])
    steps = _step_means([results for _, results in one])
    return {"commit_ms": commit_ms, "latencies": latencies,
            "batch_ms": [ms for ms, _ in one], "spark": spark_parts, "steps": steps,
            "triggers": [float(p["durationMs"].get("triggerExecution", 0)) for p in ran][-len(batches):]}


def native_floor(spark: Any, work: Path, count: int) -> dict[str, Any]:
    """Spark's own 1-row micro-batch: a Parquet file source into a ``foreachBatch`` that collects the row."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    source = work / "native-in"
    source.mkdir(parents=True)
    done: list[float] = []  # when each batch's foreachBatch had the row

    def on_batch(df: Any, batch_id: int) -> None:
        df.collect()
        done.append(time.time() * 1000)

    latencies: list[float] = []
    query = (spark.readStream.schema("key binary, value binary, timestamp long").parquet(str(source))
             .writeStream.foreachBatch(on_batch).option("checkpointLocation", str(work / "native-checkpoint"))
             .start())
    try:
        for i in range(count + 2):  # the first two warm the Python side up, as for sparza
            seen = len(done)
            time.sleep(random.uniform(0.05, 0.3))
            staged = work / f"staged-{i}.parquet"
            pq.write_table(pa.table({"key": [f"k{i}".encode()], "value": [b"x" * 100],
                                     "timestamp": [int(time.time() * 1000)]}), staged)
            os.replace(staged, source / staged.name)  # atomic: the source never lists a half-written file
            sent_ms = time.time() * 1000
            deadline = time.monotonic() + 60
            while len(done) == seen:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"native query: no batch for file {i} within 60 s")
                time.sleep(0.005)
            if i >= 2:
                latencies.append(done[-1] - sent_ms)
        progress = [p for p in query.recentProgress if p.get("numInputRows") == 1][2:]
    finally:
        query.stop()
    return {"spark": spark_durations(progress), "latencies": latencies,
            "triggers": [float(p["durationMs"].get("triggerExecution", 0)) for p in progress]}


_STEP_TIMERS = [("read", "task", "read-ms"), ("process", "task", "process-ms"),
                ("intent", "task", "intent-write-ms"), ("flush", "task", "flush-ms"),
                ("snapshot", "task", "snapshot-ms"), ("checkpoint", "task", "checkpoint-write-ms"),
                ("cleanup", "task", "cleanup-ms"), ("commit", "task", "commit-ms")]


def _step_means(batches: list[list[Any]]) -> dict[str, float]:
    """Mean per batch of each task step's time, taking the slowest task of each batch."""
    sums: dict[str, list[float]] = {name: [] for name, _, _ in _STEP_TIMERS}
    for results in batches:
        for name, group, timer in _STEP_TIMERS:
            worst = 0.0
            for r in results:
                total = timer_total_ms(r.metrics.get(group, {}).get(timer))
                if total is not None:
                    worst = max(worst, total)
            sums[name].append(worst)
    return {name: statistics.mean(v) for name, v in sums.items() if v}


# --- window end -> output through two stages ------------------------------------------------------

def window_latency(spark: Any, work: Path, seconds: float, commit_ms: int) -> list[float]:
    """Latencies (ms) of the windows of WindowedCount while events arrive in real time."""
    from sparza.api import plan_application
    from sparza.config import Config
    from sparza.runtime import JobRunner
    from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemConsumer, DeltaSystemProducer

    config = Config({
        "job.name": f"win{commit_ms}", "job.id": "1", "job.logged.store.base.dir": str(work / "state"),
        "app.class": "sparza.api.examples.WindowedCount", "app.example.window.ms": str(WINDOW_MS),
        "task.max.batch.messages": "10000", "task.commit.ms": str(commit_ms),
        "systems.delta.samza.factory": "delta", "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work / "streams"),
        "blob.store.manager.factory": "local", "blob.store.local.root": str(work / "blobstore"),
        "blob.store.local.fsync": "false",
    })
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("events", 2))
    admin.create_stream(StreamSpec("out", 1))
    plan = plan_application(config)
    plan.create_streams()
    runners = [JobRunner(s.config, spark=spark, install_signal_handlers=False, status=lambda line: None)
               for s in plan.stages]
    threads = [_start(r) for r in runners]
    producer = DeltaSystemProducer("delta", config)
    producer.register("feeder")
    events = SystemStream("delta", "events")
    stop_at = time.monotonic() + seconds
    i = 0
    try:
        while time.monotonic() < stop_at:
            now = int(time.time() * 1000)
            for _ in range(WINDOW_RATE // 10):
                producer.send("feeder", OutgoingMessageEnvelope(
                    events, json.dumps({"key": f"k{i % 7}", "n": 1}).encode(), partition=i % 2, timestamp=now))
                i += 1
            producer.flush("feeder")
            time.sleep(0.1)
        time.sleep(4 * WINDOW_MS / 1000)  # let the last full windows fire
    finally:
        for r in runners:
            r.request_stop("bench done")
        for t in threads:
            t.join(120)
    times = _output_times(work / "streams", "out", -1)
    started_ms = None
    latencies = []
    for env in DeltaSystemConsumer("delta", config).read(SystemStreamPartition("delta", "out", 0), None):
        if env.type != MessageType.USER:
            continue
        pane = json.loads(env.message)
        started_ms = started_ms or pane["start"]
        if pane["start"] == started_ms:
            continue  # the first window began before the feeder: it is partial
        latencies.append(times[int(env.offset.split(":")[0])] - pane["end"])
    return latencies


def _fmt(values: list[float]) -> tuple[str, str, str]:
    if not values:
        return "-", "-", "-"
    return f"{pct(values, 0.5):.0f}", f"{pct(values, 0.95):.0f}", f"{max(values):.0f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default: 1 small, 2 full)")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    rounds = args.rounds or (1 if args.scale == "small" else 2)
    from sparza.runtime.driver.app import _importable_cwd
    from sparza.testing import local_spark_session

    _importable_cwd()
    work = Path(tempfile.mkdtemp(prefix="sparza-bench-latency-"))
    single: dict[int, list[dict[str, Any]]] = {0: [], 1000: []}
    windows: dict[int, list[float]] = {200: [], 0: []}
    native: list[dict[str, Any]] = []
    started = time.monotonic()
    spark = local_spark_session("local[2]", "sparza-bench-latency", **{"spark.sql.shuffle.partitions": "2"})
    try:
        run: list[tuple[str, Callable[[Path], None]]] = []
        for r in range(rounds):
            for commit_ms in ((0, 1000) if r % 2 == 0 else (1000, 0)):
                run.append((f"single{commit_ms}-{r}", lambda w, c=commit_ms: single[c].append(
                    single_message(spark, w, c, scale["messages"]))))
            run.append((f"native-{r}", lambda w: native.append(native_floor(spark, w, scale["messages"]))))
            for commit_ms in ((200, 0) if r % 2 == 0 else (0, 200)):
                run.append((f"window{commit_ms}-{r}", lambda w, c=commit_ms: windows[c].extend(
                    window_latency(spark, w, scale["window_seconds"], c))))
        for name, fn in run:
            print(f"-- {name}", flush=True)
            fn(work / name)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - started
    body = render(single, windows, native, rounds, scale, took)
    record("latency", "Latency: single messages through one stage, window ends through two",
           f"python bench/latency.py --scale {args.scale}" + (f" --rounds {args.rounds}" if args.rounds else ""),
           body, measures=MEASURES)


def render(single: dict[int, list[dict[str, Any]]], windows: dict[int, list[float]], native: list[dict[str, Any]],
           rounds: int, scale: dict[str, int], took: float) -> str:
    """The report section."""
    rows = []
    for commit_ms, runs in single.items():
        lat = [v for run in runs for v in run["latencies"]]
        batch = [v for run in runs for v in run["triggers"]]
        p50, p95, mx = _fmt(lat)
        rows.append([f"single message, keyed count, task.commit.ms {commit_ms}", len(lat), p50, p95, mx,
                     f"{statistics.median(batch):.0f}" if batch else "-",
                     "0.3 s p50; batch 150 ms" if commit_ms == 0 else f"trigger {commit_ms} ms"])
    floor = [v for run in native for v in run["triggers"]]
    lat = [v for run in native for v in run["latencies"]]
    rows.append(["Spark's floor: native 1-row batch (Parquet file source → foreachBatch collect)", len(lat),
                 *_fmt(lat), f"{statistics.median(floor):.0f}" if floor else "-", "(baseline)"])
    for commit_ms, lat in windows.items():
        p50, p95, mx = _fmt(lat)
        rows.append([f"window end → output, 2 stages, task.commit.ms {commit_ms}", len(lat), p50, p95, mx, "-",
                     "3 s p50" if commit_ms == 200 else "-"])
    body = (f"{rounds} interleaved round(s); single messages: {scale['messages']} per run (after 2 warm-up "
            f"messages); windows: {WINDOW_MS} ms tumbling, {WINDOW_RATE} events/s for {scale['window_seconds']} s "
            f"per run. local[2], 2 partitions per stage; {took:.0f} s in all.\n\n"
            + table(["what", "n", "p50 ms", "p95 ms", "max ms", "1-message batch ms (Spark trigger, median)", "goal"],
                    rows))
    parts = []
    for commit_ms, runs in single.items():
        spark = _merge([run["spark"] for run in runs])
        steps = _merge_mean([run["steps"] for run in runs])
        n = max(spark.get("batches", 0), 1)
        parts.append([f"task.commit.ms {commit_ms}"]
                     + [f"{spark.get(p, 0) / n:.0f}" for p in ("latestOffset", "walCommit", "queryPlanning",
                                                              "addBatch", "commitOffsets")]
                     + [f"{steps.get(s, 0):.0f}" for s in ("read", "process", "intent", "flush", "snapshot",
                                                           "checkpoint", "cleanup")])
    spark = _merge([run["spark"] for run in native])
    n = max(spark.get("batches", 0), 1)
    parts.append(["native floor"] + [f"{spark.get(p, 0) / n:.0f}" for p in ("latestOffset", "walCommit",
                                                                         "queryPlanning", "addBatch",
                                                                         "commitOffsets")] + ["-"] * 7)
    body += ("\n\nWhere a batch's time goes (ms per batch, mean; Spark's parts from its progress reports, the task's "
             "from its slowest task in the 1-message batches):\n\n"
             + table(["trigger", "latestOffset", "offset log", "planning", "addBatch (tasks)", "commit log",
                      "task read", "process", "intent", "flush", "snapshot", "checkpoint", "cleanup"], parts))
    return body + "\n"


def _merge(dicts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _merge_mean(dicts: list[dict[str, float]]) -> dict[str, float]:
    merged = _merge(dicts)
    return {k: v / len(dicts) for k, v in merged.items()} if dicts else {}


if __name__ == "__main__":
    main()
