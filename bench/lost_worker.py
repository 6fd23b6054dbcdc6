"""A lost worker under load (issue 40's scenario on the current tree): is every committed input message counted
exactly once, how many tasks move and restore, and how soon does every task commit again?

Each run starts a fresh Spark standalone cluster (:class:`~sparza.devservers.sparkcluster.StandaloneCluster`: a
master and four one-core workers on loopback, each with its own state dir; the fourth is stopped before the job
starts, so the job runs on three) and runs the keyed count (6 tasks, RocksDB backed up to Azurite, container mode
with host affinity) from a 6-partition Kafka topic to a Kafka topic. A plain confluent-kafka transactional producer
feeds the input at 40 msg/s. Once every task committed 5 times, one worker (the one holding the most tasks) is
SIGKILLed with its executor and Python workers, and the fourth, fresh worker is started (a replacement joining):

- ``steady``: the kill comes at a random moment of steady input;
- ``boundary``: the kill comes at an assignment boundary: the first kill as above, and as soon as the run's status
  line says a task moves onto the replacement's new container (revoked on one container, not yet assigned on the
  other), the replacement's worker is killed too, then started again.

Then the input stops, the run waits (bounded) until every task committed past the input's end, is stopped with
SIGTERM, and the output is checked against an oracle in plain Python: both topics read ``read_committed`` with
confluent-kafka, each key's counts in the output must be exactly 1..n for its n committed input messages. Beside
the CPU load of ``--load`` busy-loop processes. Per run it reports: exact or not, tasks moved and stores restored
(the run's own status lines and metrics), seconds from the last kill until every task committed again, beside the
run's steady commit gap before the kill (the same-run baseline), and whether the run stalled (the stall watchdog,
``job.stall.timeout.ms``, set to ``--stall-s``).

Usage: ``flock /work/heavy.lock python bench/lost_worker.py [--runs N] [--modes steady,boundary] [--load 2]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _report  # noqa: E402
from tests.runtime.helpers import CheckpointWatch, sparza_env, start_sparza, stop_sparza, write_config  # noqa: E402

from sparza.config import Config  # noqa: E402
from sparza.devservers.kafka import KafkaBroker  # noqa: E402
from sparza.devservers.spark import executor_python  # noqa: E402
from sparza.devservers.sparkcluster import StandaloneCluster  # noqa: E402
from sparza.devservers.storage import AzuriteProcess  # noqa: E402

TASKS = 6
KEYS = 29
RATE = 40  # messages per second, in transactions of RATE // 4 every 0.25 s
MEASURES = ("One of three one-core workers of a standalone cluster SIGKILLed while a transactional producer feeds a "
            "6-partition Kafka topic at 40 msg/s (keyed count, 6 tasks, RocksDB backed up to Azurite, container "
            "mode with host affinity, output to Kafka), then a fresh worker started; beside busy-loop CPU load. "
            "Exactness against a plain confluent-kafka read_committed oracle, tasks moved, restores, and the seconds "
            "from the last kill until every task committed again, beside the same run's longest commit gap of a task "
            "in the 15 s before the kill (the baseline; checkpoints sampled each second).")


class Feeder:
    """A confluent-kafka transactional producer: RATE // 4 messages every 0.25 s, one transaction each."""

    def __init__(self, servers: str, topic: str, name: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": servers, "transactional.id": f"{name}-feeder",
                                  "linger.ms": 5, "log_level": 3})
        self.producer.init_transactions(30)
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.25):
                self.producer.begin_transaction()
                for i in range(self.sent, self.sent + RATE // 4):
                    self.producer.produce(self.topic, key=f"k{i % KEYS}".encode(), value=f"message-{i}".encode())
                self.producer.commit_transaction(30)
                self.sent += RATE // 4
        except BaseException as exc:
            self.error = exc

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.sent


def _read_committed(servers: str, topic: str, partitions: int) -> list[tuple[bytes, bytes]]:
    """Every committed record of ``topic`` (key, value), read to each partition's end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"oracle-{time.time_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 3})
    out: list[tuple[bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        ended: set[int] = set()
        deadline = time.monotonic() + 120
        while len(ended) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    ended.add(msg.partition())
                continue
            out.append((msg.key(), msg.value()))
        if len(ended) < partitions:
            raise RuntimeError(f"the oracle could not read {topic} to its end")
    finally:
        consumer.close()
    return out


def _exact(servers: str, events: str, counts: str) -> tuple[bool, str]:
    """The oracle: per key, the output's counts are exactly 1..n for the n committed input messages."""
    wanted: dict[str, int] = {}
    for key, _value in _read_committed(servers, events, TASKS):
        wanted[key.decode()] = wanted.get(key.decode(), 0) + 1
    got: dict[str, list[int]] = {}
    for _key, value in _read_committed(servers, counts, TASKS):
        body = json.loads(value)
        got.setdefault(str(body["key"]), []).append(int(body["count"]))
    bad = []
    for key in sorted(set(wanted) | set(got)):
        seen = sorted(got.get(key, []))
        if seen != list(range(1, wanted.get(key, 0) + 1)):
            missing = wanted.get(key, 0) - len(set(seen))
            bad.append(f"{key}: {len(seen)} counts for {wanted.get(key, 0)} messages ({missing} missing, "
                       f"{len(seen) - len(set(seen))} duplicated)")
    total = sum(wanted.values())
    return not bad, f"{total} input messages, {len(wanted)} keys" + (f"; {'; '.join(bad[:6])}" if bad else "")


def _watch(config: Config) -> CheckpointWatch:
    """Samples the task checkpoints (batch, offsets, location) each second in a thread."""
    return CheckpointWatch(config, lambda cp: {"batch": cp.batch or 0, "offsets": dict(cp.offsets),
                                               "location": cp.location})


def _longest_gap(history: list[tuple[float, dict[str, dict[str, Any]]]], start: float, end: float) -> float:
    """The longest time, between ``start`` and ``end``, in which some task's checkpoint did not change batch (from
    the 1 s samples)."""
    last: dict[str, tuple[float, int]] = {}
    longest = 0.0
    for at, sample in history:
        for task, cp in sample.items():
            seen = last.get(task)
            if seen is None or seen[1] != cp["batch"]:
                if seen is not None and at >= start:
                    longest = max(longest, at - max(seen[0], start))
                last[task] = (at, cp["batch"])
    for at, _batch in last.values():
        longest = max(longest, min(end, history[-1][0] if history else end) - max(at, start))
    return round(longest, 1)


def _start_fresh(cluster: StandaloneCluster, worker: int, timeout_s: float = 120.0) -> None:
    """Start ``worker`` on new ports and wait until the master has it alive (not a count: the master may still
    count a killed worker alive until spark.worker.timeout)."""
    from sparza.host import free_port

    proc = cluster.workers[worker]
    proc.port, proc.webui_port = free_port(), free_port()
    proc.start(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if any(str(w.get("port")) == str(proc.port) for w in cluster.master.alive_workers()):
                return
        time.sleep(0.3)
    raise RuntimeError(f"worker {worker} did not register within {timeout_s:.0f} s")


def _ends(servers: str, topic: str) -> dict[int, int]:
    """Each partition's end as a read_committed consumer sees it (the last stable offset)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "ends", "isolation.level": "read_committed",
                         "log_level": 3})
    try:
        out = {}
        for p in range(TASKS):
            consumer.assign([TopicPartition(topic, p, 0)])
            out[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
        return out
    finally:
        consumer.close()


def _run_once(mode: str, seed: int, work: Path, storage: AzuriteProcess, broker: KafkaBroker, package: Path,
              stall_s: int, budget_s: float) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic
    from examples.keyed_count.config import job_values
    rng = random.Random(seed)
    started = time.monotonic()
    root = work / f"{mode}-{seed}"
    root.mkdir(parents=True)
    name = f"lw{mode[:1]}{seed}{int(time.time()) % 100000}"
    events, counts = f"{name}-events", f"{name}-counts"
    servers = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(t, TASKS, 1) for t in (events, counts)]).values():
        future.result(30)
    values = job_values(root, **{
        "job.name": name, "task.inputs": f"kafka.{events}", "keyed_count.output": f"kafka.{counts}",
        "systems.kafka.samza.factory": "kafka", "systems.kafka.consumer.bootstrap.servers": servers,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.kafka.streams.{counts}.samza.key.serde": "string",
        f"systems.kafka.streams.{counts}.samza.msg.serde": "json",
        "task.max.batch.messages": "200", "task.commit.ms": "500",
        "job.logged.store.base.dir": "${SPARZA_EXECUTOR_STATE}",
        "job.spark.checkpoint.dir": str(root / "spark-checkpoint"),
        "job.py.files": str(package), "job.filesystem.shared": "true",
        "job.execution.mode": "containers", "job.host-affinity.enabled": "true",
        "job.stall.timeout.ms": str(stall_s * 1000),
        "blob.store.manager.factory": "azure", "blob.store.azure.container": name,
        "azure.storage.connect": storage.connection_string,
        "metrics.reporter.jsonl.path": str(root / "metrics.jsonl"),
        "spark.executor.memory": "512m", "spark.cores.max": "3", "spark.task.maxFailures": "4",
    })
    config = Config(values)
    path = write_config(config, root / "job.yaml")
    python = str(executor_python(root / "executor-python"))
    cluster = StandaloneCluster(root / "cluster", workers=4, python=python)
    env = {**{k: v for k, v in sparza_env().items() if k != "AZURE_STORAGE_CONNECTION_STRING"},
           "PYSPARK_PYTHON": python}
    log = root / "run.log"
    out: dict[str, Any] = {"mode": mode, "seed": seed}
    proc: subprocess.Popen[bytes] | None = None
    feeder = Feeder(servers, events, name)
    watch = _watch(config)

    def lines() -> list[str]:
        return log.read_text(errors="replace").splitlines() if log.exists() else []

    def until(what: str, condition: Any, limit_s: float) -> bool:
        deadline = min(time.monotonic() + limit_s, started + budget_s)
        while time.monotonic() < deadline:
            if condition():
                return True
            if proc is not None and proc.poll() is not None:
                out.setdefault("problem", f"sparza run exited {proc.returncode} while waiting for {what}")
                return False
            time.sleep(0.25)
        out.setdefault("problem", f"no {what} within {limit_s:.0f} s")
        return False

    def holders() -> dict[int, list[str]]:
        by: dict[int, list[str]] = {}
        for task, cp in watch.latest().items():
            for i, worker in cluster.workers.items():
                if cp["location"] and f":{worker.state_dir}#" in cp["location"]:
                    by.setdefault(i, []).append(task)
        return by

    with cluster:
        cluster.stop_worker(4)
        cluster.wait_workers(3)
        try:
            proc = start_sparza("run", "--config", str(path), "--master", cluster.url, log=log, env=env, cwd=root)
            feeder.start()
            watch.start()
            ok = until("5 commits per task", lambda: len(watch.latest()) == TASKS
                       and min(cp["batch"] for cp in watch.latest().values()) >= 5, 300)
            if ok:
                out["steady_gap_s"] = _longest_gap(watch.history, time.time() - 15, time.time())
                time.sleep(rng.uniform(0.0, 3.0))
                by = holders()
                victim = max(by, key=lambda w: len(by[w])) if by else 3
                cluster.kill_worker(victim)
                kills = [time.time()]
                out["killed"] = [victim]
                _start_fresh(cluster, 4)
                # boundary: the first task moving onto the replacement's container (revoked where it ran, not yet
                # assigned there) is the moment of the second kill.
                if mode == "boundary" and until(
                        "a task moving onto the replacement",
                        lambda: any("rebalanced onto a new container" in line for line in lines()), 120):
                    cluster.kill_worker(4)
                    kills.append(time.time())
                    out["killed"].append(4)
                    _start_fresh(cluster, 4)
                at_kill = {t: cp["batch"] for t, cp in watch.latest().items()}
                if until("every task committing again", lambda: all(
                        cp["batch"] >= at_kill.get(t, 0) + 1 for t, cp in watch.latest().items()), 300):
                    out["recovered_s"] = round(time.time() - kills[-1], 1)
            total = feeder.stop()
            out["sent"] = total
            ends = _ends(servers, events)
            until("every task committed past the input's end", lambda: all(
                int(watch.latest().get(f"Partition {p}", {}).get("offsets", {}).get(f"kafka.{events}#{p}", -1)) >= end
                for p, end in ends.items()), max(stall_s + 30, 90))
            behind = {p: end - int(watch.latest().get(f"Partition {p}", {}).get("offsets", {}).get(
                f"kafka.{events}#{p}", 0)) for p, end in ends.items()}
            out["left_behind"] = {p: n for p, n in behind.items() if n > 0}
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=180)
            out["exit"] = proc.returncode
        finally:
            feeder.stop()
            watch.stop()
            stop_sparza(proc)
    text = lines()
    out["moves"] = sum(1 for line in text if " moves from " in line)
    out["stall_lines"] = [line[:300] for line in text if "stalled" in line or "committed nothing" in line
                          or "no task committed" in line][:3]
    metrics = [json.loads(x) for x in (root / "metrics.jsonl").read_text().splitlines() if x.strip()] \
        if (root / "metrics.jsonl").exists() else []
    aggregate = metrics[-1]["metrics"].get("aggregate", {}) if metrics else {}
    out["restores"] = aggregate.get("stores-restored-from-blob-store")
    out["exact"], out["oracle"] = _exact(servers, events, counts)
    out["seconds"] = round(time.monotonic() - started)
    out["log_tail"] = text[-4:]
    return out


def _load(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--modes", default="steady,boundary")
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes beside each run")
    parser.add_argument("--stall-s", type=int, default=60, help="job.stall.timeout.ms of the runs, in seconds")
    parser.add_argument("--budget-s", type=float, default=420.0, help="each run's bound")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-record", action="store_true", help="print only; do not write docs/bench")
    parser.add_argument("--results", default=None,
                        help="a JSON-lines file: each run is appended to it, and the table is made of all its runs "
                             "(runs of several invocations, each short enough for one hold of the heavy lock)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results: list[dict[str, Any]] = []
    if args.results and Path(args.results).exists():
        results = [json.loads(x) for x in Path(args.results).read_text().splitlines() if x.strip()]
    if args.runs > 0:  # --runs 0: only the table of the runs --results holds
        _runs(args, modes, results)
    _table(args, results)


def _runs(args: argparse.Namespace, modes: list[str], results: list[dict[str, Any]]) -> None:
    from sparza.runtime.driver.packaging import build_package

    with tempfile.TemporaryDirectory(prefix="sparza-lost-worker-") as tmp:
        work = Path(tmp)
        package = work / "sparza-job.zip"
        build_package(str(package), ["examples"])
        with AzuriteProcess(work / "azurite") as storage, KafkaBroker(work / "kafka") as broker:
            for index in range(args.runs):
                mode = modes[(index + args.seed) % len(modes)]
                load = _load(args.load)
                try:
                    result = _run_once(mode, args.seed + index, work, storage, broker, package, args.stall_s,
                                       args.budget_s)
                finally:
                    for busy in load:
                        busy.kill()
                        busy.wait(10)
                results.append(result)
                print(json.dumps(result), flush=True)
                if args.results:
                    with open(args.results, "a", encoding="utf-8") as sink:
                        sink.write(json.dumps(result) + "\n")


def _table(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    rows = [[r["mode"], str(r["seed"]), "yes" if r["exact"] else "NO", str(r.get("moves")), str(r.get("restores")),
             f"{r.get('steady_gap_s', '?')}", f"{r.get('recovered_s', '-')}",
             "yes" if r.get("stall_lines") else "no", r.get("problem", "-")[:60], r["oracle"][:80]]
            for r in results]
    header = ["kill", "seed", "exact", "tasks moved", "stores restored", "longest commit gap before the kill (s)",
              "every task committed again, s after the last kill", "stall reported", "problem", "oracle"]
    body = _report.table(header, rows) + f"\n\nCPU load: {args.load} busy-loop processes beside each run.\n"
    if args.no_record:
        print(body)
        return
    _report.record("lost_worker", "A lost worker under load (Kafka in and out)",
                   "python bench/lost_worker.py " + " ".join(sys.argv[1:]), body, measures=MEASURES)


if __name__ == "__main__":
    main()
