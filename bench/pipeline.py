"""A real pipeline end to end: the demo application on sparza vs the same pipeline in Spark Structured Streaming.

Input (generated once, the same for both): ``--events`` Wikipedia-like edits (JSON, keyed by user,
2 partitions of a Delta stream, event time in the row) and a user-profile CDC stream (inserts,
updates, deletes) — ``examples/wikipedia``'s generator and loaders, as ``sparza demo`` writes them.

- **sparza**: ``examples.wikipedia.app.WikipediaPageStats`` as ``sparza demo`` runs it (two stages in
  one SparkSession), in each execution mode ``--mode`` names (``containers``, the default mode, and
  ``batches``, the micro-batch mode): parse → ``partition_by(page)`` → join the profile from a broadcast adjunct store
  bootstrapped from the CDC stream → 1-minute event-time tumbling windows in RocksDB (backed up to
  the blob store) → Avro gzip blobs through the Azure blob producer. Task checkpoints and snapshots go
  to Azurite, the intermediate stream is a Delta stream. The typed page_stats table of the demo is
  left out (the native pipeline has no counterpart).
- **native**: what a Spark user would write: the edits stream's Parquet files as a streaming file
  source, ``from_json``, a stream-static broadcast join with the profiles table (the CDC stream's last
  row per user, deletes removed), ``withWatermark`` + ``groupBy(window(ts, "1 minute"), page).agg``,
  and ``foreachBatch`` writing each batch's closed windows as one Avro gzip blob to the same Azurite.

Each run is its own process (a fresh JVM and Python workers: nothing is warm, memory is the run's
own), rounds alternate the order, and figures are medians. Time runs from a ready SparkSession to
the end of the output (session startup excluded, everything after it included: sparza's source
planning, stream creation, source registration, query start-up and adjunct bootstrap; native's profile
table built from the CDC stream); peak memory is the resident memory of the run's whole process tree
(driver, JVM, Python workers). Both outputs are read back and checked against the windows computed
directly from the input. ``--profile`` adds one py-spy-profiled sparza run (not
timed) and records its top entries.
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

from _procs import SpyProfile, TreeMemory, has, loadavg, spark_durations, timer_total_ms, tree_cpu_seconds  # noqa: E402
from _report import record, table  # noqa: E402

SCALES = {"small": {"events": 20_000, "batch": 5_000, "rounds": 1},
          "full": {"events": 1_000_000, "batch": 100_000, "rounds": 3}}
PARTITIONS = 2
LATENESS_MS = 120_000
ROWS_PER_FILE = 25_000  # the loader commits 50k edits at a time: one file per partition per commit


# --- shared ----------------------------------------------------------------------------------------

MEASURES = ('The demo application (two stages, a broadcast adjunct join, RocksDB windows, Avro blobs) on '
            '1,000,000 events in the container mode and in the micro-batch mode, against the same pipeline written '
            'in native Spark Structured Streaming, in alternating rounds of fresh processes.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""
MODES = ("containers", "batches")
"""sparza's execution modes: the container mode and its baseline, the micro-batch mode."""
RUN_IDS = {"sparza-containers": "sc", "sparza-batches": "sb"}  # short: a run id is the job's job.id


def _config(work: Path, run_id: str, conn: str, batch: int, mode: str = "containers") -> Any:
    from examples.wikipedia.config import demo_config

    config = demo_config(work / "runs" / run_id, run_id, conn, partitions=PARTITIONS, max_batch=batch,
                         lateness_ms=LATENESS_MS)
    values = dict(config.items())
    values.pop("app.wikipedia.table")  # the demo's extra SQL table: the native pipeline has none
    values["systems.delta.delta.root"] = str(work / "input")
    values["spark.master"] = "local[2]"
    values["job.execution.mode"] = mode
    return type(config)(values)


def _spark(name: str) -> Any:
    from sparza.testing import local_spark_session

    return local_spark_session("local[2]", name, **{"spark.sql.shuffle.partitions": str(PARTITIONS),
                                                    "spark.sql.streaming.numRecentProgressUpdates": "1000"})


def prepare(work: Path, conn: str, events: int) -> dict[str, Any]:
    """Generate the input, write it into the Delta streams, return the expected windows."""
    from examples.wikipedia.generate import START_MS, expected_demo_windows, generate_edits, generate_profiles
    from examples.wikipedia.load import create_streams, load_edits, load_profiles

    started = time.perf_counter()
    edits = generate_edits(events, seed=7)
    profiles = generate_profiles(seed=11)
    config = _config(work, "load", conn, 1000)
    create_streams(config, PARTITIONS)
    load_edits(config, edits)
    load_profiles(config, profiles, timestamp=min((e.timestamp for e in edits), default=START_MS))
    expected = expected_demo_windows(edits, profiles)
    print(f"input: {events} edits, {len(profiles)} profile rows, {len(expected)} windows expected "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    return {"|".join(map(str, k)): list(v) for k, v in expected.items()}


def read_windows(conn: str, container: str, prefix: str) -> dict[str, list[int]]:
    """Every window record in the blobs under ``prefix``: ``page|start -> [edits, bytes, bots]``."""
    from sparza.azure import StorageAccount
    from sparza.systems.azureblob.reading import decode_blob

    client = StorageAccount.from_connection_string(conn).blob_service_client().get_container_client(container)
    out: dict[str, list[int]] = {}
    for blob in client.list_blobs(name_starts_with=prefix + "/"):
        for r in decode_blob(blob.name, client.download_blob(blob.name).readall()):
            start = r["window_start"]
            start_ms = round(start.timestamp() * 1000) if hasattr(start, "timestamp") else int(start)
            key = f"{r['page']}|{start_ms}"
            if key in out:
                raise AssertionError(f"window {key} written twice under {prefix}")
            out[key] = [int(r["edits"]), int(r["bytes_changed"]), int(r["bot_edits"])]
    return out


# --- sparza ----------------------------------------------------------------------------------------

TIMERS = [("read", "read-ms"), ("restore", "prepare-ms"), ("process", "process-ms"), ("intent", "intent-write-ms"),
          ("adjunct", "adjunct-commit-ms"), ("snapshot", "snapshot-ms"), ("checkpoint", "checkpoint-write-ms"),
          ("cleanup", "cleanup-ms"), ("commit", "commit-ms")]


def run_sparza(work: Path, conn: str, run_id: str, batch: int, profile: Path | None,
               mode: str = "containers") -> dict[str, Any]:
    """One sparza run in execution ``mode`` (in this process); returns the timings."""
    import contextlib

    from sparza.api import plan_application
    from sparza.runtime import JobRunner
    from sparza.runtime.driver.application import run_together

    config = _config(work, run_id, conn, batch, mode)
    spark = _spark("sparza-bench-pipeline")
    started = time.perf_counter()
    plan = plan_application(config)
    plan.create_streams()
    runners = [JobRunner(s.config, spark=spark, install_signal_handlers=False, status=lambda line: None)
               for s in plan.stages]
    per_stage: dict[str, list[tuple[float, list[Any]]]] = {}
    first_start: dict[str, float] = {}  # when the stage's first batch began, from ``started``
    for stage, runner in zip(plan.stages, runners, strict=True):
        batches = per_stage[stage.name] = []
        original = runner._record

        def recording(results: list[Any], elapsed_ms: float, batch_id: int, _b: Any = batches,
                      _o: Any = original, _n: str = stage.name, **kwargs: Any) -> None:
            # Both modes report here (a micro-batch at its end, a container about once a second): the
            # first batch began about its slowest task's time before its result arrived.
            if results and _n not in first_start:
                first_start[_n] = (time.perf_counter() - started
                                   - max(r.process_ms + r.commit_ms for r in results) / 1000)
            _b.append((elapsed_ms, list(results)))
            _o(results, elapsed_ms, batch_id, **kwargs)

        runner._record = recording
    spy = SpyProfile(profile) if profile is not None else contextlib.nullcontext()
    with spy:
        run_together(runners)
        elapsed = time.perf_counter() - started
    stages = {}
    for stage, runner in zip(plan.stages, runners, strict=True):
        stages[stage.name] = _stage_split(per_stage[stage.name], runner)
        stages[stage.name]["first_start"] = first_start.get(stage.name, 0.0)
        runner.close()
    spark.stop()
    return {"seconds": elapsed, "stages": stages}


def _stage_split(batches: list[tuple[float, list[Any]]], runner: Any) -> dict[str, Any]:
    """Seconds per step over a stage's batches: task steps summed over tasks, Spark's parts per query."""
    sums: dict[str, float] = {}
    messages = 0
    per_task: dict[str, int] = {}
    for _, results in batches:
        for r in results:
            messages += r.messages
            per_task[r.task] = per_task.get(r.task, 0) + r.messages
            task = r.metrics.get("task", {})
            for name, timer in TIMERS:
                total = timer_total_ms(task.get(timer))
                if total is not None:
                    sums[name] = sums.get(name, 0.0) + total / 1000
            for timer, value in task.items():
                total = timer_total_ms(value)
                if timer.startswith("flush-") and timer != "flush-ms" and total is not None:
                    sums[timer[:-3]] = sums.get(timer[:-3], 0.0) + total / 1000
    sums["process"] = sums.get("process", 0.0) - sums.get("read", 0.0) - sums.get("restore", 0.0)
    spark = spark_durations(getattr(runner._query, "recentProgress", None) or [])  # none in container mode
    sums["foreachBatch"] = sum(ms for ms, _ in batches) / 1000
    task_batches = sum(1 for _, results in batches for r in results if r.messages)
    return {"messages": messages, "batches": task_batches, "tasks": sums, "per_task": per_task,
            "first_batch": batches[0][0] / 1000 if batches else 0.0,
            "spark": {k: v / 1000 if k != "batches" else v for k, v in spark.items()}}


# --- native Spark Structured Streaming ------------------------------------------------------------

def run_native(work: Path, conn: str, run_id: str, batch: int) -> dict[str, Any]:
    """The same pipeline written with Spark's own operators (in this process); returns the timings."""
    import contextlib
    import gzip
    import io

    import fastavro
    from azure.core.exceptions import ResourceExistsError
    from examples.wikipedia.app import WINDOW_SCHEMA
    from examples.wikipedia.config import OUTPUT_CONTAINER
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from sparza.azure import StorageAccount

    spark = _spark("native-bench-pipeline")
    started = time.perf_counter()  # the profile table is native's adjunct bootstrap: timed like sparza's
    source = "key binary, value binary, timestamp long, type tinyint, producer string, partition int"
    cdc = (spark.read.schema(source).parquet(str(work / "input" / "profiles"))
           .withColumn("seq", F.monotonically_increasing_id()))   # one file, in CDC order
    latest = (cdc.withColumn("rank", F.row_number().over(Window.partitionBy("key").orderBy(F.col("seq").desc())))
              .where("rank = 1 and value is not null"))
    profiles = latest.select(F.col("key").cast("string").alias("user"),
                             F.from_json(F.col("value").cast("string"), "country string, bot boolean").alias("p")
                             ).select("user", F.col("p.bot").alias("bot"))
    profiles = spark.createDataFrame(profiles.collect(), "user string, bot boolean")  # a small static table
    parsed = (spark.readStream.schema(source)
              .option("maxFilesPerTrigger", max(1, PARTITIONS * batch // ROWS_PER_FILE))
              .parquet(str(work / "input" / "edits"))
              .where("type = 0")
              .select(F.from_json(F.col("value").cast("string"),
                                  "page string, user string, bytes_changed long").alias("e"),
                      F.timestamp_millis("timestamp").alias("ts"))
              .select("e.page", "e.user", "e.bytes_changed", "ts")
              .where("page is not null and user is not null and bytes_changed is not null"))
    windows = (parsed.join(F.broadcast(profiles), "user")
               .withWatermark("ts", f"{LATENESS_MS // 1000} seconds")
               .groupBy(F.window("ts", "1 minute"), "page")
               .agg(F.count(F.lit(1)).alias("edits"), F.sum("bytes_changed").alias("bytes_changed"),
                    F.sum(F.col("bot").cast("int")).alias("bot_edits")))
    container = StorageAccount.from_connection_string(conn).blob_service_client().get_container_client(
        OUTPUT_CONTAINER)
    schema = fastavro.parse_schema(WINDOW_SCHEMA)
    prefix = f"native-{run_id}"
    with contextlib.suppress(ResourceExistsError):
        container.create_container()

    def write_batch(df: Any, batch_id: int) -> None:
        rows = df.select("page", "window.start", "window.end", "edits", "bytes_changed", "bot_edits").collect()
        if not rows:
            return
        buf = io.BytesIO()
        fastavro.writer(buf, schema, ({"page": r[0], "window_start": r[1], "window_end": r[2], "edits": int(r[3]),
                                       "bytes_changed": int(r[4]), "bot_edits": int(r[5])} for r in rows))
        container.upload_blob(f"{prefix}/batch-{batch_id:06d}.avro.gz", gzip.compress(buf.getvalue()),
                              overwrite=True)

    query_started = time.perf_counter()
    query = (windows.writeStream.outputMode("append").foreachBatch(write_batch)
             .option("checkpointLocation", str(work / "runs" / run_id / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    spark_parts = spark_durations(query.recentProgress)
    spark.stop()
    return {"seconds": elapsed, "prefix": prefix, "profile_table_s": query_started - started,
            "spark": {k: v / 1000 if k != "batches" else v for k, v in spark_parts.items()}}


# --- driver ----------------------------------------------------------------------------------------

def child(args: argparse.Namespace) -> None:
    """``--child``: one run in this process; its result as JSON in ``--out``."""
    from sparza.runtime.driver.app import _importable_cwd

    _importable_cwd()
    work = Path(args.work)
    if args.child.startswith("sparza"):
        result = run_sparza(work, args.conn, args.run_id, args.batch,
                            Path(args.profile) if args.profile else None, args.child.partition("-")[2] or "containers")
    else:
        result = run_native(work, args.conn, args.run_id, args.batch)
    Path(args.out).write_text(json.dumps(result))


def spawn(mode: str, work: Path, conn: str, run_id: str, batch: int, profile: Path | None = None,
          storage_pid: int | None = None) -> dict[str, Any]:
    """Run ``mode`` in a child process; its result plus the tree's peak memory and CPU seconds (the child's
    tree, and separately the storage emulator's)."""
    out = work / f"{run_id}.json"
    cmd = [sys.executable, __file__, "--child", mode, "--work", str(work), "--conn", conn, "--run-id", run_id,
           "--batch", str(batch), "--out", str(out)] + (["--profile-out", str(profile)] if profile else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                                       os.environ.get("PYTHONPATH", "")]))
    storage_cpu = tree_cpu_seconds(storage_pid) if storage_pid else 0.0
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL if profile is None else None)
    with TreeMemory(proc.pid) as memory:
        code = proc.wait()
    if code != 0:
        raise RuntimeError(f"{mode} run {run_id} failed with exit code {code}")
    result = json.loads(out.read_text())
    result["peak_mib"] = memory.peak_mib
    result["cpu_s"] = memory.cpu_s
    result["storage_cpu_s"] = (tree_cpu_seconds(storage_pid) - storage_cpu) if storage_pid else 0.0
    return result


CATEGORIES = [
    ("read (Delta → Arrow)", has("read_split", "read_arrow")),
    ("restore / open stores", has("TaskInstance._prepare")),
    ("deserialize (JSON, Avro)", has("json.loads", "loads (json", "_decode", "from_bytes", "raw_decode")),
    ("serialize (JSON, Avro)", has("to_bytes", "json.dumps", "dumps (json", "JSONEncoder")),
    ("window state (store get/put)", has("WindowState", "StoreHandle")),
    ("intermediate/output flush", has("TaskCommit.flush")),
    ("snapshot + checkpoint + cleanup", has("TaskCommit.snapshot", "TaskCommit.write_checkpoint",
                                           "TaskCommit.cleanup", "TaskCommit.write_intent",
                                           "TaskCommit.commit_adjunct")),
    ("operators (map/filter/join/window)", has("StageTask.")),
    ("runtime loop", has("TaskInstance._process")),
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--events", type=int, default=None, help="override the scale's edit count")
    parser.add_argument("--rounds", type=int, default=None, help="override the scale's round count")
    parser.add_argument("--batch", type=int, default=None, help="task.max.batch.messages (events per partition "
                        "and batch; the native run reads as many per batch)")
    parser.add_argument("--profile", action="store_true", help="one extra py-spy-profiled sparza run (first mode)")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both",
                        help="sparza's execution mode(s) (default both: containers, and batches as its baseline)")
    parser.add_argument("--child", choices=(*(f"sparza-{m}" for m in MODES), "native"), help=argparse.SUPPRESS)
    for hidden in ("--work", "--conn", "--run-id", "--out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", dest="profile_out", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.child:
        args.batch = args.batch or SCALES[args.scale]["batch"]
        args.profile = args.profile_out
        child(args)
        return
    scale = dict(SCALES[args.scale])
    events = args.events or scale["events"]
    batch = args.batch or scale["batch"]
    rounds = args.rounds or scale["rounds"]
    from sparza.devservers.storage import AzuriteProcess

    work = Path(tempfile.mkdtemp(prefix="sparza-bench-pipeline-"))
    azurite = AzuriteProcess(work / "azurite")
    azurite.start()
    runs = [*(f"sparza-{m}" for m in (MODES if args.mode == "both" else (args.mode,))), "native"]
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in runs}
    took = time.monotonic()
    profile_summary = None
    try:
        conn = azurite.connection_string
        expected = prepare(work, conn, events)
        for r in range(rounds):
            for mode in (runs if r % 2 == 0 else list(reversed(runs))):
                run_id = f"{RUN_IDS.get(mode, mode)}{r}"
                print(f"-- round {r + 1}: {mode} (load {loadavg()})", flush=True)
                res = spawn(mode, work, conn, run_id, batch, storage_pid=azurite.pid)
                res["load"] = loadavg()
                res["check"] = _check(conn, mode, run_id, res, expected)
                print(f"   {events / res['seconds']:,.0f} events/s, {res['seconds']:.1f} s, "
                      f"peak {res['peak_mib']:.0f} MiB, CPU {res['cpu_s']:.0f} s + Azurite "
                      f"{res['storage_cpu_s']:.0f} s, "
                      f"{res['check']}", flush=True)
                results[mode].append(res)
        if args.profile:
            spy_out = work / "spy.txt"
            print("-- profiled sparza run", flush=True)
            spawn(runs[0], work, conn, "profiled", batch, profile=spy_out)
            profile_summary = SpyProfile(spy_out).summary(has("TaskInstance.run_batch"), CATEGORIES)
            if os.environ.get("SPARZA_BENCH_KEEP_PROFILE"):
                shutil.copy(spy_out, os.environ["SPARZA_BENCH_KEEP_PROFILE"])
    finally:
        azurite.stop()
        shutil.rmtree(work, ignore_errors=True)
    body = render(results, events, batch, rounds, time.monotonic() - took, profile_summary)
    cmd = (f"python bench/pipeline.py --scale {args.scale}" + (f" --events {args.events}" if args.events else "")
           + (f" --rounds {args.rounds}" if args.rounds else "") + (f" --batch {args.batch}" if args.batch else "")
           + (f" --mode {args.mode}" if args.mode != "both" else "") + (" --profile" if args.profile else ""))
    record("pipeline", "Real pipeline: the demo application on sparza vs native Spark Structured Streaming", cmd, body,
           measures=MEASURES)


def _check(conn: str, mode: str, run_id: str, res: dict[str, Any], expected: dict[str, list[int]]) -> str:
    from examples.wikipedia.config import OUTPUT_CONTAINER, output_stream

    sparza = mode.startswith("sparza")
    got = read_windows(conn, OUTPUT_CONTAINER, output_stream(run_id) if sparza else res["prefix"])
    wrong = [k for k, v in got.items() if expected.get(k) != v]
    if wrong:
        raise AssertionError(f"{mode} run {run_id}: {len(wrong)} window(s) differ from the input, e.g. {wrong[:3]}")
    missing = len(expected) - len(got)
    if sparza and missing:
        raise AssertionError(f"sparza run {run_id}: {missing} window(s) missing")
    res["windows"] = len(got)
    # Spark's append mode keeps the windows the watermark has not passed at the end of the input open.
    return f"{len(got)} windows exact" + (f", {missing} still open in Spark's state at the end" if missing else "")


def render(results: dict[str, list[dict[str, Any]]], events: int, batch: int, rounds: int, took: float,
           profile: dict[str, Any] | None) -> str:
    """The report section."""
    med = {m: statistics.median(r["seconds"] for r in rs) for m, rs in results.items()}
    mem = {m: statistics.median(r["peak_mib"] for r in rs) for m, rs in results.items()}
    cpu = {m: statistics.median(r["cpu_s"] + r.get("storage_cpu_s", 0.0) for r in rs) for m, rs in results.items()}
    sparza = [m for m in results if m != "native"]
    ratios = {m: [n["seconds"] / s["seconds"] for s, n in zip(results[m], results["native"], strict=True)]
              for m in sparza}
    names = {"sparza-containers": f"sparza, containers: {PARTITIONS}-stage demo app (adjunct join, RocksDB windows, "
                                  "Avro gzip blobs)",
             "sparza-batches": "sparza, micro-batches: the same app",
             "native": "native Spark Structured Streaming (from_json, broadcast join, window agg, foreachBatch Avro)"}
    rows = [[names[m], f"{med[m]:.1f}", f"{events / med[m]:,.0f}", f"{mem[m]:,.0f}",
             f"{cpu[m]:.0f} ({statistics.median(r.get('storage_cpu_s', 0.0) for r in results[m]):.0f})",
             ", ".join(f"{r['seconds']:.1f}" for r in results[m]), f"{med['native'] / med[m]:.2f}"]
            for m in results]
    body = (f"{events:,} edits (2 partitions), {batch:,} events per partition and batch (native: "
            f"maxFilesPerTrigger {max(1, PARTITIONS * batch // ROWS_PER_FILE)} of {ROWS_PER_FILE:,} rows), "
            f"local[2], Azurite on the same host. {rounds} round(s), each run in a fresh process, order alternating. "
            f"{took:.0f} s in all.\n\n"
            + table(["pipeline", "median s", "events/s", "peak MiB (process tree)",
                     "CPU s: process tree + Azurite (of it Azurite)", "runs (s)", "rate vs native"], rows) + "\n\n")
    lines = []
    for m in sparza:
        mode = m.partition("-")[2]
        lines.append(f"sparza ({mode}) vs native: **{statistics.median(ratios[m]):.2f}x** (median of the per-round "
                     "ratios " + ", ".join(f"{x:.2f}x" for x in ratios[m])
                     + f"; ratio of the median times {med['native'] / med[m]:.2f}x"
                     + ("; goal ≥ 1.2x" if mode == "containers" else "")
                     + f"); CPU seconds per event, native / sparza: {cpu['native'] / cpu[m]:.2f}x.")
    if "sparza-containers" in ratios and "sparza-batches" in ratios:
        lines.append(f"Containers vs micro-batches: {med['sparza-batches'] / med['sparza-containers']:.2f}x "
                     "(ratio of the median times).")
    body += ("  \n".join(lines) + " Checks: " + "; ".join(f"{m} {rs[0]['check']}" for m, rs in results.items())
             + ".\n")
    steps = ["read", "restore", "process", "intent", "flush-delta", "flush-sparza-demo", "adjunct", "snapshot",
             "checkpoint", "cleanup"]
    rows = []
    starts = []
    for m in sparza:
        ordered = sorted(results[m], key=lambda r: r["seconds"])
        run = ordered[len(ordered) // 2]  # the median run of this mode
        mode = m.partition("-")[2]
        for name, st in run["stages"].items():
            t, sp = st["tasks"], st["spark"]
            task_total = sum(t.get(s, 0.0) for s in steps)
            rows.append([f"{mode}: {name}", st["messages"], st["batches"]] + [f"{t.get(s, 0.0):.1f}" for s in steps]
                        + [f"{task_total:.1f}", f"{sp.get('latestOffset', 0) + sp.get('walCommit', 0):.1f}",
                           f"{sp.get('queryPlanning', 0):.1f}", f"{sp.get('commitOffsets', 0):.1f}"])
        starts.append(f"{mode}: " + "; ".join(
            f"{name}: first batch began {st['first_start']:.1f} s after the timer started, messages per task "
            + "/".join(f"{n:,}" for _, n in sorted(st["per_task"].items()))
            for name, st in run["stages"].items()))
    body += ("\n**Where sparza's time goes** (median run of each mode; task steps in task-seconds summed over the "
             "stage's tasks and batches — stages and tasks run in parallel on 2 cores; Spark's parts, micro-batch "
             "mode only, in seconds of its query): read = Delta → Arrow; restore = open/restore stores, adjunct "
             "catch-up; process = the per-message loop (deserialize, operators, serialize, window state); "
             "flush-delta = intermediate stream write; flush-sparza-demo = Avro blob upload.\n\n"
             + table(["mode: stage", "messages", "task batches", *steps, "task total", "Spark: plan + offset log",
                      "query planning", "commit log"], rows))
    body += "\n\nStart-up and balance (same runs): " + ". ".join(starts) + "."
    nat = statistics.median(r["spark"].get("addBatch", 0) for r in results["native"])
    table_s = statistics.median(r.get("profile_table_s", 0.0) for r in results["native"])
    query_s = statistics.median(r["seconds"] - r.get("profile_table_s", 0.0) for r in results["native"])
    body += (f"\n\nNative runs: {results['native'][0]['spark'].get('batches', 0)} batches, addBatch {nat:.1f} s "
             f"(median); building the profile table from the CDC stream (the first Spark job of the fresh session) "
             f"took {table_s:.1f} s of the native time, its query {query_s:.1f} s (medians).\n")
    if profile is not None and profile["samples"]:
        total = profile["samples"]
        body += (f"\n**py-spy profile** of one extra sparza run ({sparza[0].partition('-')[2]}; {total} samples in "
                 "the Python workers' task code, 100 Hz): share by category\n\n"
                 + table(["category", "share"], [[c, f"{100 * n / total:.0f}%"]
                                                 for c, n in profile["categories"].most_common()])
                 + "\n\nTop functions by own time:\n\n"
                 + table(["function", "share"], [[f"`{f}`", f"{100 * n / total:.1f}%"] for f, n in profile["top"]]))
    return body + "\n"


if __name__ == "__main__":
    main()
