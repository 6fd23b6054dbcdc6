"""Benchmark: control messages (SEP-004) on a 2-stage windowed pipeline.

1. **Cost per batch** (library, no Spark): for n upstream tasks x m intermediate partitions, the bytes
   of the watermark messages written per batch (n x m) and the time to build them (every upstream
   task's ``outgoing``) plus to reconcile them (every downstream task's ``on_envelope`` for its n
   messages and ``advance``). Baseline, same run: TaskControl's per-message work for the batch's user
   messages (``--messages`` per upstream task), i.e. what a batch costs without control messages.
   Times are the measuring thread's CPU time (``time.thread_time``), interleaved round by round: on
   this shared machine wall time mostly measures the other sessions' load.
2. **Event-to-window-output latency** (real Spark + Delta, ``sparza.api.examples.WindowedCount``):
   events are appended in real time (event time = wall clock); latency of a window = commit time of
   its output row - window end. With control messages windows fire from watermarks during the run;
   the baseline is the same pipeline without control messages, where windows are flushed only at
   the end (stage 2 reads the intermediate stream as a bounded input after stage 1 finished).

``--scale small`` (seconds, CI smoke) or ``--scale full``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import record, table

from sparza.config import Config
from sparza.control import TaskControl
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStream

SRC = SystemStream("delta", "events")
MID = SystemStream("delta", "app-1-mid")


MEASURES = ('What watermark control messages cost a batch as upstream tasks and partitions grow, against the same '
            "batch's work on user messages; and how soon a window's result is written after the window ends when "
            'watermarks travel through an intermediate stream, against flushing the windows only at the end.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def cost_per_batch(n: int, m: int, messages: int, rounds: int) -> dict[str, float]:
    """Bytes and ms per batch of control messages for n upstream x m downstream tasks."""
    up_cfg = Config({"task.intermediate.outputs": str(MID)})
    down_cfg = Config({f"systems.{MID.system}.streams.{MID.stream}.samza.intermediate": "true"})
    ups = [TaskControl(f"Partition {i}", n, [SRC.partition(i)], up_cfg) for i in range(n)]
    downs = [TaskControl(f"Partition {j}", m, [MID.partition(j)], down_cfg) for j in range(m)]
    control_s = data_s = 0.0
    bytes_per_batch = 0
    offset = 0
    for r in range(rounds):
        now = 1_000 * (r + 1)
        # Baseline: the batch's user messages through TaskControl (what every batch pays anyway).
        started = time.thread_time()
        for i, up in enumerate(ups):
            ssp = SRC.partition(i)
            for k in range(messages):
                offset += 1
                env = IncomingMessageEnvelope(ssp, str(offset), None, b"x", now + k)
                up.on_envelope(env)
                up.is_late(env)
            up.advance(now)
        data_s += time.thread_time() - started
        # Control: build every upstream task's watermarks, deliver each partition's n messages.
        started = time.thread_time()
        out = [env for up in ups for env in up.outgoing(now, {MID: m})]
        by_partition: dict[int, list[Any]] = {}
        for env in out:
            by_partition.setdefault(env.partition, []).append(env)
        for j, down in enumerate(downs):
            ssp = MID.partition(j)
            for env in by_partition.get(j, []):
                offset += 1
                down.on_envelope(IncomingMessageEnvelope(ssp, str(offset), None, env.message, env.timestamp,
                                                         type=env.type))
            down.advance(now)
        control_s += time.thread_time() - started
        bytes_per_batch = sum(len(env.message) for env in out)
    assert all(d.watermark() is not None for d in downs)
    return {"messages": n * m, "bytes": bytes_per_batch, "control_ms": control_s * 1000 / rounds,
            "data_ms": data_s * 1000 / rounds}


# --- end-to-end latency ------------------------------------------------------------------------------

def _config(work: Path, window_ms: int, batch: int) -> Config:
    return Config({
        "job.name": "bench", "job.id": "1", "job.logged.store.base.dir": str(work / "state"),
        "app.class": "sparza.api.examples.WindowedCount", "app.example.window.ms": str(window_ms),
        "task.max.batch.messages": str(batch), "task.commit.ms": "200",
        "systems.delta.samza.factory": "delta", "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work / "streams"),
        "blob.store.manager.factory": "local", "blob.store.local.root": str(work / "blobstore"),
        "spark.master": "local[2]", "spark.sql.shuffle.partitions": "2",
    })


def _commit_times(config: Config, stream: str) -> dict[int, int]:
    from deltalake import DeltaTable

    root = config.get_str("systems.delta.delta.root")
    return {int(h["version"]): int(h["timestamp"]) for h in DeltaTable(f"{root}/{stream}").history()}


def _latencies(config: Config) -> list[int]:
    from sparza.streams import SystemStreamPartition
    from sparza.systems.delta import DeltaSystemConsumer

    times = _commit_times(config, "out")
    out = []
    for env in DeltaSystemConsumer("delta", config).read(SystemStreamPartition("delta", "out", 0), None):
        if env.type == MessageType.USER:
            pane = json.loads(env.message)
            out.append(times[int(env.offset.split(":")[0])] - pane["end"])
    return out


def _feeder(config: Config, stop: threading.Event, rate_per_s: int, partitions: int, keys: int) -> None:
    from sparza.streams import OutgoingMessageEnvelope
    from sparza.systems.delta import DeltaSystemProducer

    producer = DeltaSystemProducer("delta", config)
    producer.register("feeder")
    i = 0
    while not stop.is_set():
        now = int(time.time() * 1000)
        for _ in range(max(1, rate_per_s // 4)):
            producer.send("feeder", OutgoingMessageEnvelope(
                SRC, json.dumps({"key": f"k{i % keys}", "n": 1}).encode(), partition=i % partitions, timestamp=now))
            i += 1
        producer.flush("feeder")
        stop.wait(0.25)


def _run(spark: Any, configs: list[Config], until: threading.Event | None,
         started: Any = None) -> list[Any]:
    from sparza.runtime.driver.runner import JobRunner

    runners = [JobRunner(c, spark=spark, install_signal_handlers=False, status=lambda line: None) for c in configs]
    threads = [threading.Thread(target=r.run, daemon=True) for r in runners]
    for r, t in zip(runners, threads, strict=True):
        t.start()
        while t.is_alive() and (getattr(r, "_query", None) is None or r._query.lastProgress is None):
            t.join(0.2)
    if started is not None:
        started()  # every query runs: start the clock (events) only now, so startup is not measured
    if until is not None:
        until.wait()
        for r in runners:
            r.request_stop("bench done")
    for t in threads:
        t.join()
    return runners


def latency(work: Path, seconds: float, window_ms: int, rate: int, partitions: int, *, control: bool) -> list[int]:
    """Pane latencies (ms) with control messages, or without them (windows flushed at the end)."""
    from sparza.api import plan_application
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime.driver.runner import build_spark_session
    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin

    cfg = _config(work, window_ms, batch=max(100, rate))
    admin = DeltaSystemAdmin("delta", cfg)
    admin.create_stream(StreamSpec("events", partitions))
    admin.create_stream(StreamSpec("out", 1))
    plan = plan_application(cfg)
    plan.create_streams()
    main, second = plan.stages
    spark = build_spark_session(JobConfig.from_config(main.config), "local[2]", "sparza-bench-control")
    stop = threading.Event()
    feeder = threading.Thread(target=_feeder, args=(cfg, stop, rate, partitions, 7), daemon=True)
    timer = threading.Timer(seconds, stop.set)

    def begin() -> None:
        feeder.start()
        timer.start()

    if control:
        _run(spark, [main.config, second.config], until=stop, started=begin)
    else:
        mid = second.intermediate_inputs[0]
        no_control = {"task.intermediate.outputs": ""}
        _run(spark, [main.config.with_overrides(no_control)], until=stop, started=begin)
        # Stage 2 afterwards, the intermediate stream as a bounded input whose event-time watermark
        # never passes a window (lateness 10^12): every window is flushed at its end.
        bounded = {f"systems.{mid.system}.streams.{mid.stream}.samza.intermediate": "false",
                   f"systems.{mid.system}.streams.{mid.stream}.bounded": "true",
                   f"systems.{mid.system}.streams.{mid.stream}.watermark.lateness.ms": str(10**12)}
        _run(spark, [second.config.with_overrides(bounded)], until=None)
    feeder.join()
    return _latencies(cfg)


def _pct(values: list[int], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return str(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    parser.add_argument("--skip-spark", action="store_true", help="only the library cost table")
    args = parser.parse_args()
    small = args.scale == "small"
    grid = [(2, 2), (4, 4), (8, 8)] if small else [(2, 2), (4, 4), (8, 8), (16, 16), (32, 32), (64, 64)]
    messages, rounds = (200, 20) if small else (1000, 50)
    rows = []
    for n, m in grid:
        r = cost_per_batch(n, m, messages, rounds)
        rows.append([f"{n} x {m}", r["messages"], r["bytes"], f"{r['control_ms']:.2f}",
                     f"{r['data_ms']:.2f}", f"{100 * r['control_ms'] / r['data_ms']:.1f} %"])
    body = ("### Control messages per batch (library)\n\n"
            f"Watermark messages written by n upstream tasks to m partitions in one batch, built and reconciled; "
            f"baseline: the same TaskControl handling {messages} user messages per upstream task in that batch. "
            f"CPU time of the measuring thread, mean of {rounds} rounds.\n\n"
            + table(["n x m", "messages", "bytes", "control ms/batch", "baseline: data ms/batch", "overhead"], rows))
    if not args.skip_spark:
        seconds, rate, window = (8.0, 40, 1000) if small else (40.0, 200, 2000)
        lat_rows = []
        for control in (True, False):
            with tempfile.TemporaryDirectory(prefix="sparza-bench-control-") as tmp:
                values = latency(Path(tmp), seconds, window, rate, 2, control=control)
            lat_rows.append(["with control messages (watermarks)" if control else
                             "baseline: no control messages, windows flushed at the end",
                             len(values), _pct(values, 0.5), _pct(values, 0.95), max(values) if values else "-"])
        body += ("\n\n### Event-to-window-output latency (Spark + Delta, 2 stages)\n\n"
                 f"WindowedCount, {window} ms tumbling windows, events appended for {seconds:.0f} s at ~{rate}/s "
                 "in real time (2 source partitions, 2 intermediate partitions); latency = output commit time - "
                 "window end.\n\n"
                 + table(["run", "windows", "p50 ms", "p95 ms", "max ms"], lat_rows))
    cmd = f"python bench/control.py --scale {args.scale}" + (" --skip-spark" if args.skip_spark else "")
    record("control", "Control messages: cost per batch and window latency (SEP-004)", cmd, body, measures=MEASURES)


if __name__ == "__main__":
    main()
