"""Single-message latency Kafka → stateful task → Kafka, exactly once, container mode vs the micro-batch mode.

The job is the keyed count (``examples/keyed_count``: a RocksDB store backed up to a local blob store) with
a Kafka topic in and a Kafka topic out (2 partitions each, so 2 tasks) on a local Apache Kafka broker, at
``task.commit.ms: 50``; its output is written in one Kafka transaction per task and batch. A plain
confluent-kafka producer (``linger.ms: 0``, one record per request) sends the input; a confluent-kafka
consumer with ``isolation.level: read_committed`` reads the output. A message's latency is the time from
just before ``produce()`` to the moment the consumer's ``poll()`` returned its output record (one clock:
both run in this process).

- **single**: one message at a time, each after the previous one's output arrived and a random pause of
  50-250 ms (so sends do not lock onto the run loop's or the trigger's phase).
- **burst**: ``--burst`` messages sent back to back, then a pause after all their outputs arrived.

Each run is one job in ``--mode`` (``containers``: the container run loop; ``batches``: one Structured
Streaming micro-batch per trigger of ``task.commit.ms``) in one SparkSession (local[2]) shared by all
runs; rounds alternate the order of the modes. Before measuring, warm-up messages are sent until one
output arrived, plus three more (the Python workers, the containers and the producers are then up).
The runtime's per-step timers of the batches that ran during the measured part give the time split.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _kafka import committed_reader  # noqa: E402
from _procs import loadavg, timer_total_ms  # noqa: E402
from _report import pct, record, table  # noqa: E402

SCALES = {"small": {"messages": 20, "bursts": 2, "burst": 20, "rounds": 1},
          "full": {"messages": 150, "bursts": 8, "burst": 50, "rounds": 2}}
MODES = ("containers", "batches")
COMMIT_MS = 50
PARTITIONS = 2
GOALS = {"containers": "p50 ≤ 60 ms, p99 ≤ 150 ms", "batches": "(baseline)"}

MEASURES = ("The time from producing one message to a Kafka topic to reading its output `read_committed` from "
            "another, through the keyed count (RocksDB state, exactly-once Kafka transactions) at "
            "`task.commit.ms: 50`, in the container mode against the micro-batch mode in the same run.")
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


class Recorder:
    """Every result a JobRunner records (wraps its ``_record``; both modes call it)."""

    def __init__(self, runner: Any) -> None:
        self.results: list[Any] = []
        self.measuring = False
        original = runner._record

        def recording(results: list[Any], elapsed_ms: float, batch_id: int, **kwargs: Any) -> None:
            if self.measuring:
                self.results.extend(results)
            original(results, elapsed_ms, batch_id, **kwargs)

        runner._record = recording


class OutputReader:
    """A read_committed consumer of the output topic in a thread: when each key's first output arrived."""

    def __init__(self, servers: str, topic: str, partitions: int = PARTITIONS) -> None:
        self.arrived: dict[str, float] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._consumer = committed_reader(servers, topic, f"{topic}-reader", partitions, fetch_wait_ms=5)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.01)
            if msg is None or msg.error() is not None:
                continue
            now = time.time() * 1000
            key = msg.key().decode()
            with self._cond:
                self.arrived.setdefault(key, now)
                self._cond.notify_all()

    def wait(self, keys: list[str], timeout_s: float, alive: Any) -> None:
        """Block until every key in ``keys`` arrived; raise after ``timeout_s`` or when ``alive()`` is False."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not all(k in self.arrived for k in keys):
                if time.monotonic() > deadline or not alive():
                    missing = [k for k in keys if k not in self.arrived]
                    raise RuntimeError(f"no output for {len(missing)} message(s) (e.g. {missing[:3]}) within "
                                       f"{timeout_s:.0f} s")
                self._cond.wait(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def job_config(work: Path, servers: str, name: str, mode: str, poll_ms: int | None = None) -> Any:
    from examples.keyed_count.config import job_values

    from sparza.config import Config

    return Config(job_values(work, **{
        "job.name": name, "task.commit.ms": COMMIT_MS, "job.execution.mode": mode, "blob.store.local.fsync": "false",
        "task.inputs": f"kafka.{name}-events", "keyed_count.output": f"kafka.{name}-counts",
        "systems.kafka.samza.factory": "kafka", "systems.kafka.consumer.bootstrap.servers": servers,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.kafka.streams.{name}-counts.samza.key.serde": "string",
        f"systems.kafka.streams.{name}-counts.samza.msg.serde": "json",
        **({"task.poll.interval.ms": poll_ms} if poll_ms is not None else {})}))


def run(spark: Any, work: Path, servers: str, name: str, mode: str, scale: dict[str, int],
        poll_ms: int | None = None, partitions: int = PARTITIONS) -> dict[str, Any]:
    """One job in ``mode``: warm-up, single messages, bursts; latencies (ms) and the batches' results."""
    from confluent_kafka import Producer

    from sparza.runtime import JobRunner
    from sparza.systems import StreamSpec
    from sparza.systems.kafka import KafkaSystemAdmin

    config = job_config(work, servers, name, mode, poll_ms)
    admin = KafkaSystemAdmin("kafka", config)
    events, counts = f"{name}-events", f"{name}-counts"
    for topic in (events, counts):
        admin.create_stream(StreamSpec(topic, partitions))
    # One record per produce request: each message's latency is its own, not its batch's.
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0, "batch.num.messages": 1, "log_level": 3})
    reader = OutputReader(servers, counts, partitions)
    runner = JobRunner(config, spark=spark, install_signal_handlers=False, status=lambda line: None)
    recorder = Recorder(runner)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    sent: dict[str, float] = {}

    def send(key: str) -> None:
        sent[key] = time.time() * 1000
        producer.produce(events, value=b"x" * 100, key=key.encode())
        producer.poll(0)

    single: list[str] = []
    bursts: list[str] = []
    try:
        warm = 0
        started = time.monotonic()
        while True:  # warm-up: until an output came back, then three more
            key = f"warm{warm}"
            send(key)
            producer.flush(10)
            warm += 1
            try:
                reader.wait([key], 2.0, thread.is_alive)
                break
            except RuntimeError:
                if time.monotonic() - started > 180 or not thread.is_alive():
                    raise RuntimeError(f"{mode}: no output within 180 s of the job's start") from None
        for i in range(3):
            send(f"warm-extra{i}")
            producer.flush(10)
            reader.wait([f"warm-extra{i}"], 60, thread.is_alive)
        # Every task warm too (its store open, its transactional producer initialised): one message per partition.
        warm_keys = [f"warm-p{p}" for p in range(partitions)]
        for p, key in enumerate(warm_keys):
            sent[key] = time.time() * 1000
            producer.produce(events, value=b"x" * 100, key=key.encode(), partition=p)
        producer.flush(10)
        reader.wait(warm_keys, 120, thread.is_alive)
        time.sleep(0.5)
        recorder.measuring = True
        for i in range(scale["messages"]):
            time.sleep(random.uniform(0.05, 0.25))
            key = f"single{i}"
            send(key)
            producer.flush(10)
            single.append(key)
            reader.wait([key], 60, thread.is_alive)
        for b in range(scale["bursts"]):
            time.sleep(0.5)
            keys = [f"burst{b}-{i}" for i in range(scale["burst"])]
            for key in keys:
                send(key)
            producer.flush(10)
            bursts.extend(keys)
            reader.wait(keys, 60, thread.is_alive)
        time.sleep(1.5)  # container results reach the driver about once a second
        recorder.measuring = False
    finally:
        runner.request_stop("bench done")
        thread.join(180)
        reader.close()
    return {"single": [reader.arrived[k] - sent[k] for k in single],
            "burst": [reader.arrived[k] - sent[k] for k in bursts],
            "steps": step_means(recorder.results)}


_STEPS = [("read", "read-ms"), ("restore", "prepare-ms"), ("process", "process-ms"), ("intent", "intent-write-ms"),
          ("flush", "flush-ms"), ("snapshot", "snapshot-ms"), ("snapshot wait", "snapshot-wait-ms"),
          ("checkpoint", "checkpoint-write-ms"), ("cleanup", "cleanup-ms"), ("commit", "commit-ms")]


def step_means(results: list[Any]) -> dict[str, float]:
    """Mean ms per task batch of each step (committed batches with messages), and their count."""
    done = [r for r in results if r.messages > 0 and getattr(r.status, "name", "") == "COMMITTED"]
    out: dict[str, float] = {"batches": float(len(done)),
                             "messages": statistics.mean(r.messages for r in done) if done else 0.0}
    for name, timer in _STEPS:
        values = [timer_total_ms(r.metrics.get("task", {}).get(timer)) or 0.0 for r in done]
        out[name] = statistics.mean(values) if values else 0.0
    out["process"] -= out["read"] + out["restore"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both",
                        help="the execution mode(s) to measure (default both: containers, batches as baseline)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default: 1 small, 2 full)")
    parser.add_argument("--messages", type=int, default=None, help="single messages per run")
    parser.add_argument("--poll-ms", dest="poll_ms", type=int, default=None,
                        help="task.poll.interval.ms (default: the runtime's default)")
    parser.add_argument("--tasks", default="2,32",
                        help="comma list of task counts (input partitions) the container mode runs with; the "
                             "micro-batch baseline runs with 2")
    args = parser.parse_args(argv)
    task_counts = [int(n) for n in args.tasks.split(",") if n.strip()]
    scale = dict(SCALES[args.scale])
    if args.messages:
        scale["messages"] = args.messages
    rounds = args.rounds or scale["rounds"]
    modes = MODES if args.mode == "both" else (args.mode,)
    variants = [(m, n) for m in modes for n in (task_counts if m == "containers" else [PARTITIONS])]
    from sparza.devservers.kafka import KafkaBroker
    from sparza.runtime.driver.app import _importable_cwd
    from sparza.testing import local_spark_session

    _importable_cwd()
    work = Path(tempfile.mkdtemp(prefix="sparza-bench-kafka-latency-"))
    broker = KafkaBroker(work / "kafka")
    broker.start()
    results: dict[str, list[dict[str, Any]]] = {_label(m, n): [] for m, n in variants}
    took = time.monotonic()
    spark = local_spark_session("local[2]", "sparza-bench-kafka-latency", **{"spark.sql.shuffle.partitions": "2"})
    try:
        for r in range(rounds):
            for mode, n in (variants if r % 2 == 0 else list(reversed(variants))):
                name = f"lat-{mode[0]}{n}-{r}"
                print(f"-- round {r + 1}: {_label(mode, n)} (load {loadavg()})", flush=True)
                res = run(spark, work / name, broker.bootstrap_servers, name, mode, scale, args.poll_ms, n)
                results[_label(mode, n)].append(res)
                print(f"   single p50 {pct(res['single'], 0.5):.0f} ms, p99 {pct(res['single'], 0.99):.0f} ms; "
                      f"burst p50 {pct(res['burst'], 0.5):.0f} ms, p99 {pct(res['burst'], 0.99):.0f} ms", flush=True)
    finally:
        spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    body = render(results, scale, rounds, time.monotonic() - took, args.poll_ms)
    cmd = (f"python bench/kafka_latency.py --scale {args.scale}" + (f" --mode {args.mode}" if args.mode != "both"
                                                                    else "")
           + (f" --rounds {args.rounds}" if args.rounds else "") + (f" --messages {args.messages}" if args.messages
                                                                    else "")
           + (f" --poll-ms {args.poll_ms}" if args.poll_ms is not None else "")
           + (f" --tasks {args.tasks}" if args.tasks != "2,32" else ""))
    record("kafka_latency", "Latency Kafka → stateful task → Kafka (read_committed): containers vs micro-batches",
           cmd, body, measures=MEASURES)


def _label(mode: str, tasks: int) -> str:
    return f"{mode}, {tasks} tasks"


def render(results: dict[str, list[dict[str, Any]]], scale: dict[str, int], rounds: int, took: float,
           poll_ms: int | None = None) -> str:
    """The report section."""
    rows = []
    for label, runs in results.items():
        mode = label.split(",")[0]
        for variant in ("single", "burst"):
            lat = [v for run in runs for v in run[variant]]
            rows.append([f"{label}, {variant}" + (f" ({scale['burst']} at once)" if variant == "burst" else ""),
                         len(lat), f"{pct(lat, 0.5):.0f}", f"{pct(lat, 0.95):.0f}", f"{pct(lat, 0.99):.0f}",
                         f"{max(lat):.0f}" if lat else "-", GOALS[mode] if variant == "single" else "-"])
    body = (f"{rounds} round(s), variants alternating; per run {scale['messages']} single messages and "
            f"{scale['bursts']} bursts of {scale['burst']}, after a warm-up. Keyed count, one task per partition, "
            f"local[2], Apache Kafka broker on loopback, task.commit.ms {COMMIT_MS}, task.poll.interval.ms "
            f"{'at its default' if poll_ms is None else poll_ms}; "
            f"{took:.0f} s in all.\n\n"
            + table(["mode, messages", "n", "p50 ms", "p95 ms", "p99 ms", "max ms", "goal"], rows))
    two, batches = _label("containers", PARTITIONS), _label("batches", PARTITIONS)
    if two in results and batches in results:
        c = [v for run in results[two] for v in run["single"]]
        b = [v for run in results[batches] for v in run["single"]]
        body += (f"\n\nSingle messages, containers vs micro-batches: p50 **{pct(c, 0.5):.0f} ms** vs "
                 f"{pct(b, 0.5):.0f} ms, p99 **{pct(c, 0.99):.0f} ms** vs {pct(b, 0.99):.0f} ms.")
    parts = []
    for mode, runs in results.items():
        steps = [run["steps"] for run in runs if run["steps"].get("batches")]
        if not steps:
            continue
        mean = {k: statistics.mean(s[k] for s in steps) for k in steps[0]}
        parts.append([mode, f"{sum(s['batches'] for s in steps):.0f}", f"{mean['messages']:.1f}"]
                     + [f"{mean[name]:.1f}" for name, _ in _STEPS])
    body += ("\n\nWhere a task batch's time goes (ms, mean over the measured batches with messages; process = the "
             "task's own code; snapshot runs in a thread beside flush, snapshot wait is what the commit waited for "
             "it; commit = intent to cleanup):\n\n"
             + table(["mode", "task batches", "msgs/batch", *(name for name, _ in _STEPS)], parts))
    return body + "\n"


if __name__ == "__main__":
    main()
