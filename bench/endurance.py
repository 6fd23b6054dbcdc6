"""Endurance: two jobs run for an hour with steady input; every resource they hold is sampled and judged.

Two real ``sparza run`` processes run at once, each on its own ``local[2]`` Spark:

- **demo**: the Wikipedia application of ``sparza demo`` (``examples.wikipedia``: parse, ``partition_by`` page
  into an intermediate Delta stream, broadcast profile join, 1-minute windows in RocksDB backed up to the
  Azure blob store, Avro windows to the Azure blob producer, a typed Delta table upserted) on **unbounded**
  Delta input fed with edits stamped with the wall clock;
- **count**: the keyed count (``examples.keyed_count``) reading a Kafka topic (an Apache Kafka broker) and writing
  JSON-lines blobs, its RocksDB store backed up to the Azure blob store.

Both write task checkpoints and snapshots to Azurite and serve ``metrics.reporter.prometheus.port``.
Feeder threads append input at a steady rate; ``sparza gc`` runs every ``--gc-minutes`` on each job's config
(there is no scheduler in sparza: ``docs/operations.md`` says to run it from cron), with
``blob.store.deleted.retention.ms`` shortened so that tombstones are purged within the run.

Every ``--sample-seconds`` a sampler reads, per job: RSS, open file descriptors and threads of the driver
(the ``sparza run`` Python process), its JVM and its Python workers (found with
:func:`sparza.testing.harness.spark.descendants`: PySpark's daemon puts its workers in a process group of
their own); the JVM heap (``jstat -gc``: used = survivors + eden + old, and old gen alone); the size and file
count of every RocksDB store directory and of the Spark/plan directories under the job's state dir; per
Delta table of the job (input, intermediate, result table) the retained log files (``_delta_log/*.json``),
checkpoints, current version and data files on disk; the blobs of the state container (snapshot files,
tombstones, task checkpoints) and of the output container. The sampler serves these as a Prometheus
exporter on loopback; a real Prometheus server (Debian's package, ``scripts/install_prometheus.sh``) run
with its own config and data dir scrapes the sampler and both jobs, and every plot and verdict is drawn
from its ``/api/v1/query_range`` answers. Each query of ``docs/grafana/sparza-dashboard.json`` is evaluated
on the same server (``/api/v1/query``, ``$job`` = ``.*``).

Verdict per series (:func:`judge`): ``flat`` (spread within the tolerance of its level), ``bounded`` (the last
third's maximum does not exceed the middle third's: a compaction/retention cycle), else ``growing``.

Usage: ``python bench/endurance.py --minutes 60 [--jobs demo,count] [--sample-seconds 60] [--gc-minutes 10]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))  # this checkout's sparza, as in the jobs' PYTHONPATH (not another install)
import _report  # noqa: E402

MEASURES = ("Whether a job that runs for an hour stays healthy: the demo application (Delta input) and the "
            "keyed count (Kafka input) run at once with steady input, blob output, RocksDB backups and "
            "`sparza gc`, and a real Prometheus scrapes their processes' memory, descriptors and threads, JVM "
            "heap, RocksDB and Delta sizes, blob-store objects, batch time and lag every interval. Each series is "
            "judged flat, bounded (by a compaction/retention cycle) or growing; the baseline is the series' own "
            "level in the middle third of the run.")
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""

INSTALL_HINT = ("no 'prometheus' on PATH: run scripts/install_prometheus.sh (Debian's package; it does not start "
                "the system service), or put a Prometheus 2.x binary on PATH")

# ---------------------------------------------------------------------------------------------------------------
# The judgement


@dataclass
class Verdict:
    """How a series behaved over the run: ``flat``, ``bounded`` or ``growing`` (or ``empty``), with the numbers
    the verdict is drawn from."""

    verdict: str
    first: float = 0.0
    last: float = 0.0
    mid_max: float = 0.0
    last_max: float = 0.0
    slope_per_hour: float = 0.0
    n: int = 0
    """How many points were judged."""


def _slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope (value per second) of ``points``."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if den == 0 else sum((t - mt) * (v - mv) for t, v in points) / den


def judge(points: Sequence[tuple[float, float]], *, tolerance: float = 0.1, absolute: float = 0.0) -> Verdict:
    """Judge a series of ``(time_s, value)``.

    ``growing``: the median of the last third lies above the middle third's maximum and the series rose by more
    than ``absolute`` (a slow leak that stays within the tolerances below is still a leak). Otherwise ``flat``: the
    spread of all values is within ``tolerance`` of the series' median level (or ``absolute``); ``bounded``:
    the maximum of the last third exceeds the maximum of the middle third by no more than ``tolerance`` of the
    whole spread (or ``absolute``): the series rises and falls within a cycle (compaction, retention, gc, GC)
    or levelled off; else ``growing`` (a steady climb puts a third of its spread between the two maxima). The
    first third is warm-up (JIT, caches filling, first snapshots) and only counts towards ``flat``.
    """
    pts = sorted((float(t), float(v)) for t, v in points)
    if not pts:
        return Verdict("empty")
    values = [v for _, v in pts]
    n = len(pts)
    middle = values[n // 3: 2 * n // 3] or values
    last = values[2 * n // 3:] or values
    out = Verdict("", first=values[0], last=values[-1], mid_max=max(middle), last_max=max(last),
                  slope_per_hour=_slope(pts[n // 3:]) * 3600, n=n)
    level = sorted(values)[n // 2]
    spread = max(values) - min(values)
    if n >= 3 and sorted(last)[len(last) // 2] > out.mid_max and out.last_max - min(values) > absolute:
        out.verdict = "growing"
    elif spread <= max(tolerance * abs(level), absolute):
        out.verdict = "flat"
    elif out.last_max <= out.mid_max + max(tolerance * spread, absolute):
        out.verdict = "bounded"
    else:
        out.verdict = "growing"
    return out


# ---------------------------------------------------------------------------------------------------------------
# Process, JVM and directory sampling (Linux /proc)


def _status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def process_stats(pid: int) -> dict[str, float] | None:
    """RSS bytes, open file descriptors and threads of ``pid`` (None when it is gone)."""
    status = _status(pid)
    if not status:
        return None
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss_kib = int(status.get("VmRSS", "0 kB").split()[0])
    return {"rss": rss_kib * 1024.0, "fds": float(fds), "threads": float(status.get("Threads", "0"))}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def process_roles(driver_pid: int) -> dict[str, list[int]]:
    """The processes of one ``sparza run``: ``driver`` (itself), ``jvm`` (its Java child) and ``python_workers``
    (every Python process below the JVM: PySpark's daemon and the workers it forks, which setpgid away)."""
    from sparza.testing.harness.spark import descendants

    roles: dict[str, list[int]] = {"driver": [driver_pid], "jvm": [], "python_workers": []}
    for pid in descendants(driver_pid):
        cmd = _cmdline(pid)
        if not cmd:
            continue
        first = cmd.split(" ", 1)[0]
        if first.endswith("java"):
            roles["jvm"].append(pid)
        elif "python" in Path(first).name:
            roles["python_workers"].append(pid)
    return roles


def jvm_heap(pid: int) -> dict[str, float] | None:
    """Heap use of a JVM from ``jstat -gc`` (bytes): ``used`` (survivors + eden + old) and ``old`` (old gen,
    what survives collections: the number that shows a leak); None without jstat or when it fails."""
    jstat = shutil.which("jstat")
    if jstat is None:
        return None
    try:
        out = subprocess.run([jstat, "-gc", str(pid)], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split("\n")
    if out.returncode != 0 or len(lines) < 2:
        return None
    row = dict(zip(lines[0].split(), lines[1].split(), strict=False))
    try:
        kib = {k: float(row[k]) for k in ("S0U", "S1U", "EU", "OU")}
    except (KeyError, ValueError):
        return None
    return {"used": (kib["S0U"] + kib["S1U"] + kib["EU"] + kib["OU"]) * 1024, "old": kib["OU"] * 1024}


def dir_stats(path: Path) -> tuple[int, int]:
    """Bytes and files below ``path`` (0, 0 when it does not exist)."""
    size = files = 0
    for base, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(base, name)).st_size
                files += 1
    return size, files


def delta_tables(root: Path) -> list[Path]:
    """Every Delta table (a directory with a ``_delta_log``) below ``root``."""
    if not root.exists():
        return []
    return sorted(p.parent for p in root.rglob("_delta_log") if p.is_dir())


def delta_stats(table: Path) -> dict[str, float]:
    """Of one Delta table on disk: ``log_files`` (commit JSONs kept), ``checkpoints``, ``version`` (newest
    commit) and ``data_files`` (Parquet files, live or not yet vacuumed)."""
    log = table / "_delta_log"
    commits = [int(p.name.split(".")[0]) for p in log.glob("*.json") if p.name.split(".")[0].isdigit()]
    checkpoints = len(list(log.glob("*.checkpoint*.parquet")))
    data = sum(1 for p in table.rglob("*.parquet") if "_delta_log" not in p.parts)
    return {"log_files": float(len(commits)), "checkpoints": float(checkpoints),
            "version": float(max(commits, default=-1)), "data_files": float(data)}


# ---------------------------------------------------------------------------------------------------------------
# The jobs


@dataclass
class Job:
    """One ``sparza run`` of the benchmark: its config file, process, feeder and where its state lives."""

    name: str
    root: Path
    config: dict[str, str]
    metrics_port: int
    feed: Callable[[threading.Event], None]
    state_container: str
    output_container: str
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    fed: int = 0
    feed_errors: list[str] = field(default_factory=list)

    @property
    def config_path(self) -> Path:
        return self.root / "job.yaml"

    def write_config(self) -> None:
        import yaml

        self.config_path.write_text(yaml.safe_dump(self.config))

    def start(self) -> None:
        """Spawn ``sparza run`` in its own session, output to ``run.log``."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")] if p)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        self.log = self.root / "run.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "sparza.cli", "run", "--config", str(self.config_path),
                                          "--master", "local[2]"], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=self.root)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 180.0) -> int | None:
        """SIGTERM (a clean stop at a commit boundary), then kill the tree when it does not end in time."""
        from sparza.testing.harness.spark import kill_tree

        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_tree(self.proc.pid)
                self.proc.wait(timeout=30)
        return self.proc.returncode

    def state_dir(self) -> Path:
        return Path(self.config["job.logged.store.base.dir"])


def _every(stop: threading.Event, seconds: float, action: Callable[[], None], errors: list[str]) -> None:
    nxt = time.monotonic()
    while not stop.is_set():
        try:
            action()
        except Exception as exc:  # a feeder that fails keeps trying: the run reports its errors
            errors.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {exc}"[:300])
        nxt += seconds
        stop.wait(max(0.0, nxt - time.monotonic()))


def demo_job(work: Path, conn: str, rate: float, tick_s: float, retention_ms: int) -> Job:
    """The Wikipedia application on unbounded Delta input; the feeder appends edits stamped now."""
    from examples.wikipedia.config import OUTPUT_CONTAINER, STATE_CONTAINER, demo_config
    from examples.wikipedia.generate import generate_profiles
    from examples.wikipedia.load import create_streams, edits_stream, load_profiles

    from sparza.api import plan_application
    from sparza.host import free_port

    root = work / "demo"
    root.mkdir(parents=True)
    run_id = f"endurance{os.getpid() % 10_000:04d}"
    port = free_port()
    cfg = demo_config(root, run_id, conn, partitions=2, source="delta")
    cfg = cfg.with_overrides({
        "systems.delta.streams.edits.bounded": "false",
        "systems.delta.streams.profiles.bounded": "false",
        "metrics.reporter.prometheus.port": str(port),
        "blob.store.deleted.retention.ms": str(retention_ms),
    })
    create_streams(cfg, 2)
    load_profiles(cfg, generate_profiles(), timestamp=int(time.time() * 1000) - 60_000)
    plan_application(cfg).create_streams()
    values = {k: str(v) for k, v in cfg.items()}
    stream = edits_stream(cfg)
    rng = random.Random(7)
    pages = [f"Page_{i:04d}" for i in range(500)]
    weights = [1.0 / (r ** 1.1) for r in range(1, 501)]
    users = [f"user{u:04d}" for u in range(200)]
    job = Job("demo", root, values, port, lambda stop: None, STATE_CONTAINER, OUTPUT_CONTAINER)

    def feeder(stop: threading.Event) -> None:
        from sparza.config import Config
        from sparza.streams import OutgoingMessageEnvelope
        from sparza.systems.delta import DeltaSystemProducer

        producer = DeltaSystemProducer("delta", Config(values))
        producer.register("endurance")
        carry = [0.0]

        def tick() -> None:
            carry[0] += rate * tick_s
            n, carry[0] = int(carry[0]), carry[0] - int(carry[0])
            now = int(time.time() * 1000)
            for page in rng.choices(pages, weights, k=n):
                user = rng.choice(users)
                stamp = now - abs(int(rng.gauss(0, 3_000)))  # a few seconds out of order, as real feeds are
                edit = {"page": page, "user": user, "bytes_changed": int(rng.gauss(0, 120)), "timestamp": stamp}
                producer.send("endurance", OutgoingMessageEnvelope(
                    stream, json.dumps(edit, separators=(",", ":")).encode(), key=user.encode(),
                    timestamp=stamp))
            producer.flush("endurance")
            job.fed += n

        try:
            _every(stop, tick_s, tick, job.feed_errors)
        finally:
            producer.stop()

    job.feed = feeder
    return job


def count_job(work: Path, conn: str, brokers: str, rate: float, tick_s: float, retention_ms: int) -> Job:
    """The keyed count reading a Kafka topic and writing JSON-lines blobs; the feeder is an idempotent producer."""
    from examples.keyed_count.config import job_values

    from sparza.config import Config
    from sparza.host import free_port
    from sparza.systems import StreamSpec
    from sparza.systems.kafka import KafkaSystemAdmin

    root = work / "count"
    root.mkdir(parents=True)
    topic = f"endurance-events-{os.getpid()}"
    port = free_port()
    out_container, state_container = "endurance-counts", "endurance-count-state"
    values = job_values(root, **{
        "job.name": "kc-endurance",
        "task.inputs": f"kafka.{topic}",
        "keyed_count.output": f"{out_container}.counts",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.consumer.bootstrap.servers": brokers,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.{out_container}.samza.factory": "azureblob",
        f"systems.{out_container}.azureblob.writer.format": "jsonl",
        f"systems.{out_container}.azureblob.compression.type": "gzip",
        f"systems.{out_container}.streams.counts.samza.msg.serde": "json",
        f"systems.{out_container}.streams.counts.samza.key.serde": "string",
        "azure.storage.connect": conn,
        "blob.store.manager.factory": "azure",
        "blob.store.azure.container": state_container,
        "job.checkpoint.factory": "blobstore",
        "metrics.reporter.prometheus.port": str(port),
        "blob.store.deleted.retention.ms": str(retention_ms),
        "spark.sql.shuffle.partitions": "2",
    })
    del values["blob.store.local.root"]
    KafkaSystemAdmin("kafka", Config(values)).create_stream(StreamSpec(topic, 2))
    rng = random.Random(11)
    keys = [f"k{i:05d}" for i in range(5_000)]
    job = Job("count", root, values, port, lambda stop: None, state_container, out_container)

    def feeder(stop: threading.Event) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True})
        carry = [0.0]

        def tick() -> None:
            carry[0] += rate * tick_s
            n, carry[0] = int(carry[0]), carry[0] - int(carry[0])
            for _ in range(n):
                key = rng.choice(keys)
                producer.produce(topic, value=json.dumps({"key": key}).encode(), key=key.encode(),
                                 partition=rng.randrange(2))
            left = producer.flush(60)
            if left:
                raise RuntimeError(f"{left} message(s) not delivered within 60 s")
            job.fed += n

        _every(stop, tick_s, tick, job.feed_errors)

    job.feed = feeder
    return job


# ---------------------------------------------------------------------------------------------------------------
# The sampler: a Prometheus exporter of what /proc, jstat, the disk and the blob store say


class Sampler:
    """Samples every job's resources into Prometheus gauges (``endurance_*``), labelled ``app`` (not ``job``,
    which Prometheus gives the scrape target) and a kind."""

    def __init__(self, jobs: Sequence[Job], conn: str) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self.jobs = list(jobs)
        self.conn = conn
        self.registry = CollectorRegistry()
        r = self.registry
        self.proc = Gauge("endurance_process", "per role: rss bytes, fds, threads, processes",
                          ["app", "role", "what"], registry=r)
        self.heap = Gauge("endurance_jvm_heap_bytes", "JVM heap from jstat -gc (used, old)", ["app", "what"],
                          registry=r)
        self.state = Gauge("endurance_state_dir", "bytes and files per part of the job's state dir",
                           ["app", "part", "what"], registry=r)
        self.delta = Gauge("endurance_delta", "per Delta table: log files, checkpoints, version, data files",
                           ["app", "table", "what"], registry=r)
        self.blobs = Gauge("endurance_blobs", "blobs per container and kind", ["app", "container", "kind"],
                           registry=r)
        self.gc_blobs = Gauge("endurance_gc_blobs", "state-container blobs before and after each gc",
                              ["app", "when"], registry=r)
        self.gc_removed = Gauge("endurance_gc_removed", "blobs removed by the last gc", ["app"], registry=r)
        self.fed = Gauge("endurance_fed_messages", "messages the feeder appended", ["app"], registry=r)
        self.up = Gauge("endurance_job_up", "1 while the job's process runs", ["app"], registry=r)
        self.servers: dict[str, int] = {}
        """Pids of the servers the jobs use (Azurite, Kafka, Prometheus): sampled as app ``servers`` for context."""
        self.samples = 0
        self.removed: dict[str, int] = {}
        """Blobs the last gc of each job removed (-1: its output said nothing)."""

    def serve(self) -> int:
        from prometheus_client import start_http_server

        from sparza.host import free_port

        port = free_port()
        start_http_server(port, addr="127.0.0.1", registry=self.registry)
        return port

    def sample(self) -> None:
        for job in self.jobs:
            self.up.labels(job.name).set(1 if job.alive() else 0)
            self.fed.labels(job.name).set(job.fed)
            if job.alive() and job.proc is not None:
                self._processes(job, job.proc.pid)
            self._state(job)
            for table in delta_tables(job.root):
                name = str(table.relative_to(job.root))
                for what, value in delta_stats(table).items():
                    self.delta.labels(job.name, name, what).set(value)
            for container, kinds in self.count_blobs(job).items():
                for kind, n in kinds.items():
                    self.blobs.labels(job.name, container, kind).set(n)
        for name, pid in self.servers.items():
            stats = process_stats(pid)
            for what, value in (stats or {}).items():
                self.proc.labels("servers", name, what).set(value)
        self.samples += 1

    def _processes(self, job: Job, pid: int) -> None:
        roles = process_roles(pid)
        for role, pids in roles.items():
            total = {"rss": 0.0, "fds": 0.0, "threads": 0.0}
            alive = 0
            for p in pids:
                stats = process_stats(p)
                if stats is None:
                    continue
                alive += 1
                for k in total:
                    total[k] += stats[k]
            for k, v in total.items():
                self.proc.labels(job.name, role, k).set(v)
            self.proc.labels(job.name, role, "processes").set(alive)
        if roles["jvm"]:
            heap = jvm_heap(roles["jvm"][0])
            if heap:
                for what, v in heap.items():
                    self.heap.labels(job.name, what).set(v)

    def _state(self, job: Job) -> None:
        state = job.state_dir()
        if not state.exists():
            return
        parts: dict[str, tuple[int, int]] = {}
        snapshots = 0
        for current in state.rglob("CURRENT"):
            # a RocksDB directory holds CURRENT and OPTIONS-*; everything else (Spark checkpoints, plan logs)
            # is "other". <store>/<task>-<n> directories are the local checkpoints of committed snapshots.
            if any(current.parent.glob("OPTIONS-*")) or current.parent.name.rpartition("-")[2].isdigit():
                size, files = dir_stats(current.parent)
                b, f = parts.get("rocksdb", (0, 0))
                parts["rocksdb"] = (b + size, f + files)
                snapshots += current.parent.name.rpartition("-")[2].isdigit()
        self.state.labels(job.name, "rocksdb", "snapshot_dirs").set(snapshots)
        total = dir_stats(state)
        rocks = parts.get("rocksdb", (0, 0))
        parts["other"] = (total[0] - rocks[0], total[1] - rocks[1])
        for part, (size, files) in parts.items():
            self.state.labels(job.name, part, "bytes").set(size)
            self.state.labels(job.name, part, "files").set(files)

    def _manager(self, job: Job) -> Any:
        from sparza.blobstore import blob_store_manager_from_config
        from sparza.config import Config

        return blob_store_manager_from_config(Config(job.config))

    def state_blobs(self, job: Job) -> dict[str, int]:
        """Blobs of the job's state container by kind: ``live`` (no TTL, not deleted), ``ttl`` (not yet made
        permanent), ``tombstones`` (deleted, awaiting gc); and ``checkpoints`` (task checkpoints and the claim,
        under ``checkpoints/``)."""
        store = self._manager(job)
        kinds = {"live": 0, "ttl": 0, "tombstones": 0, "checkpoints": 0}
        try:
            for info in store.list_blobs():
                if info.blob_id.startswith("checkpoints/"):  # task checkpoints and the job claim
                    kinds["checkpoints"] += 1
                elif info.deleted_at_ms is not None:
                    kinds["tombstones"] += 1
                elif info.expires_at_ms is not None:
                    kinds["ttl"] += 1
                else:
                    kinds["live"] += 1
        finally:
            store.close()
        return kinds

    def count_blobs(self, job: Job) -> dict[str, dict[str, int]]:
        from azure.storage.blob import BlobServiceClient

        out: dict[str, dict[str, int]] = {"state": self.state_blobs(job)}
        client = BlobServiceClient.from_connection_string(self.conn)
        n = 0
        with contextlib.suppress(Exception):  # the container appears with the first output blob
            n = sum(1 for _ in client.get_container_client(job.output_container).list_blobs())
        out["output"] = {"all": n}
        return out

    def gc(self, job: Job, log: Path) -> None:
        """Run ``sparza gc`` on the job's config, recording the state blobs before and after."""
        kinds = self.state_blobs(job)
        before = sum(kinds.values()) - kinds["checkpoints"]
        self.gc_blobs.labels(job.name, "before").set(before)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")] if p)
        out = subprocess.run([sys.executable, "-m", "sparza.cli", "gc", "--config", str(job.config_path)],
                             capture_output=True, text=True, env=env, timeout=600, check=False)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"--- {time.strftime('%H:%M:%S')} {job.name} rc={out.returncode}\n{out.stdout[-2000:]}"
                     f"{out.stderr[-2000:]}")
        kinds = self.state_blobs(job)
        after = sum(kinds.values()) - kinds["checkpoints"]
        self.gc_blobs.labels(job.name, "after").set(after)
        # what gc says it removed (before - after also counts what the job wrote meanwhile)
        said = re.search(r"removed (\d+) expired and (\d+) deleted", out.stdout)
        self.removed[job.name] = int(said.group(1)) + int(said.group(2)) if said else -1
        self.gc_removed.labels(job.name).set(self.removed[job.name])


# ---------------------------------------------------------------------------------------------------------------
# The Prometheus server


class Prometheus:
    """A Prometheus server of this run only: its own config and data dir, on a free loopback port."""

    def __init__(self, work: Path, targets: dict[str, int], scrape_s: int) -> None:
        from sparza.host import free_port

        binary = shutil.which("prometheus")
        if binary is None:
            raise SystemExit(INSTALL_HINT)
        self.binary = binary
        self.dir = work / "prometheus"
        self.dir.mkdir(parents=True)
        self.port = free_port()
        jobs = "\n".join(
            f"  - job_name: {name}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']"
            for name, port in targets.items())
        (self.dir / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {scrape_s}s\n  evaluation_interval: {scrape_s}s\nscrape_configs:\n{jobs}\n")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115 - kept open for the server's life
        self.proc = subprocess.Popen([self.binary, f"--config.file={self.dir / 'prometheus.yml'}",
                                      f"--storage.tsdb.path={self.dir / 'data'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}",
                                      "--storage.tsdb.retention.time=2d"],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"prometheus did not become ready; see {self.dir / 'prometheus.log'}")

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, check=False)
        return (out.stdout or out.stderr).split("\n")[0]

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                return dict(json.loads(resp.read()))
        except urllib.error.HTTPError as exc:
            return dict(json.loads(exc.read() or b"{}") or {"status": "error", "error": str(exc)})

    def query(self, expr: str) -> dict[str, Any]:
        return self._get("/api/v1/query", {"query": expr})

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[tuple[dict[str, str],
                                                                                        list[tuple[float, float]]]]:
        answer = self._get("/api/v1/query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                    "step": f"{step:g}"})
        if answer.get("status") != "success":
            raise RuntimeError(f"query_range {expr!r}: {answer.get('error')}")
        return [(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]])
                for r in answer["data"]["result"]]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---------------------------------------------------------------------------------------------------------------
# Series, plots, dashboard

# (plot, title, unit divisor, unit, PromQL, legend label keys, judge tolerance, absolute slack)
SERIES: list[tuple[str, str, float, str, str, tuple[str, ...], float, float]] = [
    ("memory", "RSS", 2**20, "MiB", 'endurance_process{what="rss",app!="servers"}', ("app", "role"), 0.1, 16 * 2**20),
    ("memory", "JVM heap", 2**20, "MiB", "endurance_jvm_heap_bytes", ("app", "what"), 0.1, 32 * 2**20),
    ("handles", "open fds", 1, "", 'endurance_process{what="fds",app!="servers"}', ("app", "role"), 0.1, 8),
    ("handles", "threads", 1, "", 'endurance_process{what="threads",app!="servers"}', ("app", "role"), 0.1, 4),
    ("handles", "python workers", 1, "", 'endurance_process{what="processes",role="python_workers"}', ("app",),
     0.0, 1),
    ("state", "state dir MiB", 2**20, "MiB", 'endurance_state_dir{what="bytes"}', ("app", "part"), 0.1, 2**20),
    ("state", "state dir files", 1, "", 'endurance_state_dir{what="files"}', ("app", "part"), 0.1, 8),
    ("state", "local RocksDB checkpoints (retained snapshots)", 1, "", 'endurance_state_dir{what="snapshot_dirs"}',
     ("app",), 0.0, 2),
    ("servers", "servers' RSS (context: not the jobs')", 2**20, "MiB", 'endurance_process{app="servers",what="rss"}',
     ("role",), 0.1, 16 * 2**20),
    ("delta", "Delta log files", 1, "", 'endurance_delta{what="log_files"}', ("app", "table"), 0.1, 2),
    ("delta", "Delta data files", 1, "", 'endurance_delta{what="data_files"}', ("app", "table"), 0.1, 2),
    ("delta", "Delta log checkpoints", 1, "", 'endurance_delta{what="checkpoints"}', ("app", "table"), 0.0, 1),
    ("blobs", "state blobs", 1, "", "endurance_blobs{container=\"state\"}", ("app", "kind"), 0.1, 4),
    ("blobs", "output blobs", 1, "", "endurance_blobs{container=\"output\"}", ("app",), 0.1, 4),
    ("blobs", "state blobs around gc", 1, "", "endurance_gc_blobs", ("app", "when"), 0.1, 4),
    ("batch", "batch time (mean over 5m)", 1, "ms",
     'sum by (sparza_job) (rate(sparza_batch_ms_total_ms{group="aggregate"}[5m])) / '
     'sum by (sparza_job) (rate(sparza_batch_ms_count{group="aggregate"}[5m]))', ("sparza_job",), 0.5, 200),
    ("batch", "commit time (mean over 5m)", 1, "ms",
     'sum by (sparza_job) (rate(sparza_commit_ms_total_ms{group="aggregate"}[5m])) / '
     'sum by (sparza_job) (rate(sparza_commit_ms_count{group="aggregate"}[5m]))', ("sparza_job",), 0.5, 200),
    ("batch", "lag (messages)", 1, "", 'max by (sparza_job) (sparza_lag{group="aggregate"})', ("sparza_job",),
     0.5, 500),
    ("batch", "messages in / s", 1, "", 'sum by (sparza_job) (rate(sparza_messages_in_total{group="aggregate"}[5m]))',
     ("sparza_job",), 0.5, 5),
    ("scrape", "series scraped per target", 1, "", "scrape_samples_scraped", ("job",), 0.1, 10),
]


def _label(metric: dict[str, str], keys: Sequence[str]) -> str:
    return "/".join(metric.get(k, "") for k in keys)


def collect(prom: Prometheus, start: float, end: float, step: float) -> list[dict[str, Any]]:
    """Every series of :data:`SERIES` from Prometheus range queries, judged."""
    rows: list[dict[str, Any]] = []
    for plot, title, div, unit, expr, keys, tol, absolute in SERIES:
        try:
            result = prom.query_range(expr, start, end, step)
        except RuntimeError as exc:
            rows.append({"plot": plot, "title": title, "expr": expr, "series": "", "error": str(exc)})
            continue
        for metric, points in result:
            # the first 3 minutes are start-up (restores, JIT, first snapshots): not judged
            judged = [(t, v) for t, v in points if t >= start + 180] or points
            v = judge(judged, tolerance=tol, absolute=absolute)
            rows.append({"plot": plot, "title": title, "unit": unit, "div": div, "expr": expr,
                         "series": _label(metric, keys), "points": points, **v.__dict__})
    return rows


def draw(rows: list[dict[str, Any]], out: Path, start: float) -> list[str]:
    """One PNG per plot group (``endurance-<plot>.png``), one panel per title; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    names = []
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        if "points" in row:
            groups.setdefault(row["plot"], {}).setdefault(row["title"], []).append(row)
    for plot, panels in groups.items():
        fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels)), squeeze=False)
        for ax, (title, series) in zip(axes[:, 0], panels.items(), strict=True):
            for row in series:
                xs = [(t - start) / 60 for t, _ in row["points"]]
                ys = [v / row["div"] for _, v in row["points"]]
                ax.plot(xs, ys, label=f"{row['series']} ({row['verdict']})", linewidth=1.2)
            ax.set_title(title + (f" [{series[0]['unit']}]" if series[0]["unit"] else ""), fontsize=10)
            ax.set_xlabel("minutes")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left", ncol=2)
        fig.tight_layout()
        name = f"endurance-{plot}.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        names.append(name)
    return names


def dashboard_queries(prom: Prometheus) -> list[dict[str, Any]]:
    """Evaluate every query of the Grafana dashboard (``$job`` = ``.*``, as its "All" option) on Prometheus."""
    board = json.loads((ROOT / "docs" / "grafana" / "sparza-dashboard.json").read_text())
    out = []
    exprs: list[tuple[str, str]] = []
    for var in board.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict) and query.get("query", "").startswith("label_values("):
            inner = query["query"][len("label_values("):-1]
            metric, _, label = inner.rpartition(",")
            exprs.append((f"variable {var['name']}", f"count by ({label.strip()}) ({metric.strip()})"))
    for panel in board.get("panels", []):
        for target in panel.get("targets", []):
            if target.get("expr"):
                exprs.append((panel.get("title", "?"), target["expr"].replace("$job", ".*")))
    for title, expr in exprs:
        answer = prom.query(expr)
        ok = answer.get("status") == "success"
        result = answer.get("data", {}).get("result", []) if ok else []
        out.append({"panel": title, "expr": expr, "status": "ok" if ok else "error",
                    "series": len(result) if isinstance(result, list) else 1, "error": answer.get("error", "")})
    return out


# ---------------------------------------------------------------------------------------------------------------
# The run


def _fmt(value: float, div: float) -> str:
    v = value / div
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long both jobs run (default 60)")
    parser.add_argument("--jobs", default="demo,count", help="which jobs: demo, count or both (default)")
    parser.add_argument("--sample-seconds", type=float, default=60.0, help="sampling interval (default 60)")
    parser.add_argument("--gc-minutes", type=float, default=10.0, help="run sparza gc this often (default 10)")
    parser.add_argument("--deleted-retention-minutes", type=float, default=5.0,
                        help="blob.store.deleted.retention.ms of both jobs, in minutes (default 5)")
    parser.add_argument("--demo-rate", type=float, default=40.0, help="edits per second into the demo (default 40)")
    parser.add_argument("--count-rate", type=float, default=100.0,
                        help="messages per second into the keyed count (default 100)")
    parser.add_argument("--feed-seconds", type=float, default=5.0, help="one input commit this often (default 5)")
    parser.add_argument("--images", type=Path, default=None,
                        help="where the PNGs and JSON go (default docs/images, or $SPARZA_BENCH_OUT/images)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (Prometheus' data too)")
    parser.add_argument("--from-json", type=Path, default=None, metavar="FILE",
                        help="only redraw the plots and tables from a run's endurance.json")
    args = parser.parse_args(argv)
    jobs_wanted = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if not set(jobs_wanted) <= {"demo", "count"} or not jobs_wanted:
        parser.error(f"--jobs takes demo and/or count, got {args.jobs!r}")
    images = args.images or (Path(os.environ["SPARZA_BENCH_OUT"]) / "images" if os.environ.get("SPARZA_BENCH_OUT")
                             else ROOT / "docs" / "images")
    if args.from_json is not None:
        return report(json.loads(args.from_json.read_text(encoding="utf-8")), images)
    if shutil.which("prometheus") is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from sparza.devservers.kafka import KafkaBroker
    from sparza.devservers.storage import AzuriteProcess

    work = Path(tempfile.mkdtemp(prefix="sparza-endurance-"))
    print(f"work dir {work}", flush=True)
    azurite = AzuriteProcess(work / "azurite")
    azurite.start()
    broker: Any = None
    prom: Prometheus | None = None
    stop = threading.Event()
    threads: list[threading.Thread] = []
    jobs: list[Job] = []
    retention_ms = int(args.deleted_retention_minutes * 60_000)
    try:
        conn = azurite.connection_string
        if "demo" in jobs_wanted:
            jobs.append(demo_job(work, conn, args.demo_rate, args.feed_seconds, retention_ms))
        if "count" in jobs_wanted:
            broker = KafkaBroker(work / "kafka")
            broker.start()
            jobs.append(count_job(work, conn, broker.bootstrap_servers, args.count_rate, args.feed_seconds,
                                  retention_ms))
        sampler = Sampler(jobs, conn)
        for name, server in (("azurite", azurite), ("kafka", broker)):
            if server is not None and server.pid is not None:
                sampler.servers[name] = server.pid
        sampler_port = sampler.serve()
        scrape_s = max(5, min(15, int(args.sample_seconds // 4)))
        prom = Prometheus(work, {"sampler": sampler_port, **{j.name: j.metrics_port for j in jobs}}, scrape_s)
        prom.start()
        if prom.proc is not None:
            sampler.servers["prometheus"] = prom.proc.pid
        print(f"prometheus {prom.version()} on {prom.url} (scrape every {scrape_s}s), sampler on :{sampler_port}",
              flush=True)
        for job in jobs:
            job.write_config()
            job.start()
            t = threading.Thread(target=job.feed, args=(stop,), name=f"feed-{job.name}", daemon=True)
            t.start()
            threads.append(t)
            print(f"{job.name}: sparza run pid {job.proc.pid if job.proc else '?'}, metrics :{job.metrics_port}, "
                  f"log {job.log}", flush=True)
        start = time.time()
        end = start + args.minutes * 60
        next_sample = next_gc = time.monotonic()
        next_gc += args.gc_minutes * 60
        gc_log = work / "gc.log"
        while time.time() < end:
            if time.monotonic() >= next_sample:
                sampler.sample()
                next_sample += args.sample_seconds
                print(f"[{(time.time() - start) / 60:5.1f} min] sample {sampler.samples}: "
                      + ", ".join(f"{j.name} {'up' if j.alive() else 'DOWN'} fed {j.fed}" for j in jobs)
                      + f"; load {os.getloadavg()[0]:.1f}", flush=True)
            if time.monotonic() >= next_gc:
                for job in jobs:
                    sampler.gc(job, gc_log)
                next_gc += args.gc_minutes * 60
                print(f"[{(time.time() - start) / 60:5.1f} min] gc: " + ", ".join(
                    f"{j.name} removed {sampler.removed.get(j.name)}" for j in jobs),
                    flush=True)
            if not all(j.alive() for j in jobs):
                dead = [j for j in jobs if not j.alive()]
                print(f"job(s) ended early: {', '.join(j.name for j in dead)}; see their run.log", flush=True)
                sampler.sample()
                break
            time.sleep(min(5.0, max(0.5, next_sample - time.monotonic())))
        sampler.sample()
        time.sleep(scrape_s * 2 + 1)  # the last samples reach Prometheus
        measured_end = time.time()
        stop.set()
        rows = collect(prom, start, measured_end, max(15.0, args.sample_seconds / 2))
        dash = dashboard_queries(prom)
        data = {"minutes": (measured_end - start) / 60, "started": start, "prometheus": prom.version(),
                "args": {k: str(v) for k, v in vars(args).items()}, "fed": {j.name: j.fed for j in jobs},
                "feeder_errors": {j.name: j.feed_errors[-5:] for j in jobs}, "series": rows, "dashboard": dash,
                "gc_log": gc_log.read_text(errors="replace")[-4000:] if gc_log.exists() else ""}
        return report(data, images)
    finally:
        stop.set()
        for job in jobs:
            rc = job.stop()
            print(f"{job.name}: stopped, exit {rc}; fed {job.fed} messages; feeder errors {len(job.feed_errors)}"
                  + (f" (last: {job.feed_errors[-1]})" if job.feed_errors else ""), flush=True)
            if job.log is not None and rc not in (0, None):
                print("\n".join(job.log.read_text(errors="replace").splitlines()[-15:]))
        for t in threads:
            t.join(timeout=30)
        if prom is not None:
            prom.stop()
        if broker is not None:
            broker.stop()
        azurite.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def report(data: dict[str, Any], images: Path) -> int:
    """Write the run's data as JSON (first: nothing measured is lost to a drawing error), draw the plots, print
    the verdict table and the dashboard results and record the section of docs/benchmarks.md."""
    rows, dash, args = data["series"], data["dashboard"], data["args"]
    params = {title: (tol, absolute) for _p, title, _d, _u, _e, _k, tol, absolute in SERIES}
    for row in rows:
        if row.get("points") and row["title"] in params:
            tol, absolute = params[row["title"]]
            judged = [(t, v) for t, v in row["points"] if t >= data["started"] + 180] or row["points"]
            row.update(judge(judged, tolerance=tol, absolute=absolute).__dict__)
    images.mkdir(parents=True, exist_ok=True)
    (images / "endurance.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    names = draw(rows, images, data["started"])
    headers = ["series", "what", "first", "middle-third max", "last-third max", "slope / h", "verdict"]
    table_rows = []
    for row in rows:
        if "error" in row:
            table_rows.append([row["title"], "", "", "", "", "", f"error: {row['error'][:80]}"])
            continue
        div, unit = row["div"], row["unit"]
        table_rows.append([row["title"] + (f" ({unit})" if unit else ""), row["series"], _fmt(row["first"], div),
                           _fmt(row["mid_max"], div), _fmt(row["last_max"], div),
                           _fmt(row["slope_per_hour"], div), row["verdict"]])
    dash_rows = [[d["panel"], d["status"], d["series"], (d["error"] or "")[:60]] for d in dash]
    ok = sum(1 for d in dash if d["status"] == "ok")
    growing = [r for r in rows if r.get("verdict") == "growing"]
    fed = ", ".join(f"{name} {n} messages" for name, n in data["fed"].items())
    body = "\n\n".join([
        f"{data['minutes']:.0f} minutes, sampled every {float(args['sample_seconds']):g} s, `sparza gc` every "
        f"{float(args['gc_minutes']):g} min; fed {fed}; {data['prometheus']}. Plots: "
        + ", ".join(f"[{n}](images/{n})" for n in names) + ".",
        _report.table(headers, table_rows),
        f"Grafana dashboard queries evaluated on that Prometheus: {ok} of {len(dash)} ok.",
        _report.table(["panel", "status", "series", "error"], dash_rows),
        (f"Growing: {len(growing)} series (" + "; ".join(f"{r['title']} {r['series']}" for r in growing) + ")."
         if growing else "No series grew."),
    ])
    command = f"python bench/endurance.py --minutes {float(args['minutes']):g} --jobs {args['jobs']}"
    _report.record("endurance", "Endurance: an hour of two jobs, judged series by series", command, body,
                   measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
