"""The peers side by side: the same keyed count in every engine, one at a time, on one real Apache Kafka broker.

The job: read JSON messages (``{"key": "k42", "seq": ..., "pad": ...}``, about 100 bytes, the record key being
the same key) from an 8-partition topic, count per key in durable state, write each running count
(``{"key": ..., "count": n}``) to an 8-partition output topic, exactly once where the engine can. Every engine
is one process (with its own children: JVMs, Python workers) started by this script; the broker (Apache Kafka,
KRaft, :class:`sparza.devservers.kafka.KafkaBroker`) is started fresh, with an empty log dir, for each engine.

Per engine:

- **throughput**: ``W + N`` messages over K keys are loaded first (W = N/10); the engine starts; a
  ``read_committed`` consumer in this script follows the output and counts the input messages it reflects
  (the sum over keys of the highest count seen). **cold** = N / (time from launching the process to N
  messages counted): process, JVM or Spark start, group join, state stores created. **warm** = N / (time from
  W counted to W + N counted): the same process, already running, after its first W outputs. The output is
  checked: every key's last count is its number of messages, and the output records are counted against the
  input (more than N + W: duplicates, which an at-least-once engine may write).
- **latency**: a fresh engine on new topics; after a warm-up (outputs back), single messages with a new key
  each, sent open-loop at random gaps of 50-250 ms; a message's latency is from just before ``produce()`` to
  its output being read ``read_committed`` (one clock: both in this process); at a commit / checkpoint
  interval of 100 ms, and at the engine's default where that differs.

The same-run baseline is the ceiling: a plain confluent-kafka consume → count (dict) → produce loop,
transactional and not. ``--setup`` (or the first run) fetches what the peers need: two venvs (Quix Streams,
PyFlink) under ``~/.cache/sparza/peers``, and jars from Maven Central with Maven (Kafka Streams, Samza,
Spark's and Flink's Kafka connectors) under ``bench/peers/*/target``.

Usage: ``flock /work/heavy.lock .venv/bin/python bench/peers/run.py --scale full`` (``--only ENGINE ...``)
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _kafka import committed_reader  # noqa: E402
from _report import pct, record, table  # noqa: E402

PARTITIONS = 8
# medium: the keys and partitions at a third of its messages, for a shared machine where all nine engines at
# full scale take over 40 minutes.
SCALES = {"small": {"messages": 50_000, "keys": 1_000, "latency": 20, "timeout": 600},
          "medium": {"messages": 300_000, "keys": 10_000, "latency": 100, "timeout": 900},
          "full": {"messages": 1_000_000, "keys": 10_000, "latency": 200, "timeout": 1500}}
LOGS = HERE / "target" / "logs"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparza" / "peers"
QUIX_VERSION = "3.28.1"
FLINK_VERSION = "2.3.0"
FLINK_KAFKA = "5.0.0-2.2"  # the newest flink-sql-connector-kafka on Maven Central (none is built for 2.3 yet)
KAFKA_STREAMS = "4.4.0"
SAMZA = "1.8.0"
# Samza 1.8 is built for Java 8; on Java 17 it ran without any --add-opens (checked: a run with the JDK's
# internals closed counts exactly). PEERS_SAMZA_JVM adds JVM options if a setup needs them.
SAMZA_JVM = os.environ.get("PEERS_SAMZA_JVM", "").split()

MEASURES = ("The same keyed count (JSON in, a count per key in durable state, each running count out, exactly once "
            "where the engine can) in each peer engine and in sparza, one engine at a time on one Apache Kafka "
            "broker (fresh for each), against a plain confluent-kafka consume → count → produce loop measured in the "
            "same run: throughput cold and warm, and single-message latency produce → output read `read_committed`.")
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


# --------------------------------------------------------------------------------------------- engines


@dataclass
class Ctx:
    """What an engine's command needs for one run."""

    servers: str
    input: str
    output: str
    name: str  # unique per run: group / application id, transactional id prefix
    work: Path  # state, checkpoints and logs of this run
    commit: str  # "100" or "default"
    phase: str  # "throughput" or "latency"
    messages: int  # input size (throughput) or 0


@dataclass
class Engine:
    """One peer: how to start it, and what to say about it in the table."""

    name: str
    label: str
    guarantee: str
    default_commit: str  # the engine's default commit / checkpoint interval, in words
    default_is_100: bool  # the default is 100 ms: one latency run serves both rows
    warm: str  # what "warm" means for this engine
    settings: str
    command: Callable[[Ctx], list[str]]
    version: Callable[[], str]
    env: Callable[[Ctx], dict[str, str]] = field(default=lambda ctx: {})
    exact_records: bool = True  # one output record per input message (the Spark built-in count writes per batch)


def _py() -> str:
    return sys.executable


def _venv_py(name: str) -> str:
    return str(CACHE / f"{name}-venv" / "bin" / "python")


def _dist_version(python: str, dist: str) -> str:
    out = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version('{dist}'))"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or "?"


def _ceiling(transactional: bool) -> Callable[[Ctx], list[str]]:
    def cmd(ctx: Ctx) -> list[str]:
        commit = "100" if ctx.commit == "default" else ctx.commit
        return [_py(), str(HERE / "ceiling.py"), "--bootstrap", ctx.servers, "--input", ctx.input, "--output",
                ctx.output, "--group", ctx.name, "--commit-ms", commit, *(["--transactional"] if transactional else [])]
    return cmd


def _quix(ctx: Ctx) -> list[str]:
    return [_venv_py("quix"), str(HERE / "quix_count.py"), "--bootstrap", ctx.servers, "--input", ctx.input,
            "--output", ctx.output, "--group", ctx.name, "--state", str(ctx.work / "state"), "--commit-ms", ctx.commit]


def _java_classpath(module: str) -> str:
    target = HERE / module / "target"
    return os.pathsep.join([str(target / "classes"), str(target / "lib" / "*")])


def _kstreams(ctx: Ctx) -> list[str]:
    return ["java", "-Xmx1g", "-cp", _java_classpath("kstreams"), "peers.KStreamsCount", f"bootstrap={ctx.servers}",
            f"input={ctx.input}", f"output={ctx.output}", f"app={ctx.name}", f"state={ctx.work / 'state'}",
            f"commit_ms={ctx.commit}"]


def _samza(ctx: Ctx) -> list[str]:
    return ["java", "-Xmx1g", *SAMZA_JVM, "-cp", _java_classpath("samza"), "peers.SamzaCount",
            f"bootstrap={ctx.servers}", f"input={ctx.input}", f"output={ctx.output}", f"job={ctx.name}",
            f"state={ctx.work / 'state'}", f"commit_ms={ctx.commit}"]


def _spark(mode: str) -> Callable[[Ctx], list[str]]:
    def cmd(ctx: Ctx) -> list[str]:
        # Spark reads everything there is in its first batch unless capped: the cap (W, a tenth of the input)
        # makes the run a series of batches, so "warm" exists; the latency runs keep Spark's default (no cap).
        cap = max(ctx.messages // 11, 1000) if ctx.phase == "throughput" else 0
        return [_py(), str(HERE / "spark_count.py"), "--mode", mode, "--bootstrap", ctx.servers, "--input", ctx.input,
                "--output", ctx.output, "--checkpoint", str(ctx.work / "checkpoint"), "--commit-ms", ctx.commit,
                "--max-offsets", str(cap), "--jars", ",".join(str(p) for p in spark_jars())]
    return cmd


def _flink(ctx: Ctx) -> list[str]:
    return [_venv_py("flink"), str(HERE / "flink_count.py"), "--bootstrap", ctx.servers, "--input", ctx.input,
            "--output", ctx.output, "--group", ctx.name, "--work", str(ctx.work), "--commit-ms", ctx.commit,
            "--jar", str(flink_jar())]


def _sparza(ctx: Ctx) -> list[str]:
    config = ctx.work / "job.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(sparza_config(ctx), indent=1))  # JSON is YAML
    return [str(Path(_py()).parent / "sparza"), "run", "--config", str(config)]


def sparza_config(ctx: Ctx) -> dict[str, Any]:
    """The keyed count's job config (``examples/keyed_count`` with Kafka in and out, container mode, defaults)."""
    values: dict[str, Any] = {
        "job.name": ctx.name, "job.id": "1", "job.logged.store.base.dir": str(ctx.work / "state"),
        "task.class": "bench.peers.sparza_task.PeerCountTask", "task.inputs": f"kafka.{ctx.input}",
        "peers.output": f"kafka.{ctx.output}",
        "systems.kafka.samza.factory": "kafka", "systems.kafka.consumer.bootstrap.servers": ctx.servers,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.kafka.streams.{ctx.input}.samza.msg.serde": "json",
        f"systems.kafka.streams.{ctx.output}.samza.key.serde": "string",
        f"systems.kafka.streams.{ctx.output}.samza.msg.serde": "json",
        "stores.counts.factory": "rocksdb", "stores.counts.key.serde": "string", "stores.counts.msg.serde": "json",
        "stores.counts.backup.factories": "blobstore",
        "blob.store.manager.factory": "local", "blob.store.local.root": str(ctx.work / "blobstore"),
    }
    if ctx.commit != "default":
        values["task.commit.ms"] = int(ctx.commit)
    return values


def _sparza_version() -> str:
    return "sparza " + _dist_version(_py(), "sparza") + " (this checkout)"


ENGINES: list[Engine] = [
    Engine("ceiling-txn", "confluent-kafka loop, transactional", "exactly once (a transaction per 100 ms with the "
           "offsets); the dict is not durable", "100 ms (its own)", True, "after W messages (no warm-up of its own)",
           "one consumer, one transactional producer, `consume(10000)`", _ceiling(True),
           lambda: "confluent-kafka " + _dist_version(_py(), "confluent-kafka")),
    Engine("ceiling-plain", "confluent-kafka loop, not transactional", "at least once (idempotent producer "
           "flushed before each offset commit); the dict is not durable", "100 ms (its own)", True,
           "after W messages", "one consumer, one idempotent producer", _ceiling(False),
           lambda: "confluent-kafka " + _dist_version(_py(), "confluent-kafka")),
    Engine("sparza", "sparza run (container mode)", "exactly once (Kafka transactions per task batch, checkpoints "
           "and store snapshots)", "1000 ms (`task.commit.ms`)", False,
           "after W messages: Spark, its Python workers, the containers, producers and stores up",
           "keyed count task, RocksDB store backed up to a local blob store, local[2], the engine's defaults",
           _sparza, _sparza_version),
    Engine("quix", "Quix Streams", "exactly once (`processing_guarantee='exactly-once'`)",
           "5 s (`commit_interval`)", False, "after W messages: consumer group joined, RocksDB open",
           "stateful `apply`, RocksDB state with changelog topics, JSON serdes, no other setting", _quix,
           lambda: "quixstreams " + _dist_version(_venv_py("quix"), "quixstreams")),
    Engine("kstreams", "Kafka Streams", "exactly once (`exactly_once_v2`)", "100 ms (`commit.interval.ms` under "
           "exactly_once_v2)", True, "after W messages: the JVM's JIT, the group joined, RocksDB open",
           "Processor API, persistent (RocksDB) store with its changelog, one stream thread, no repartition",
           _kstreams, lambda: f"kafka-streams {KAFKA_STREAMS}"),
    Engine("samza", "Apache Samza (standalone)", "at least once (Samza has no transactional producer)",
           "60 s (`task.commit.ms`)", False, "after W messages: the JVM's JIT, the container started",
           "low-level StreamTask, RocksDB store with a changelog, passthrough job coordinator, one container",
           _samza, lambda: f"samza {SAMZA} (kafka-clients 2.4.1)"),
    Engine("spark-tws", "Spark Structured Streaming, transformWithStateInPandas", "at least once to Kafka (the "
           "Kafka sink is not transactional); state exactly once in the checkpoint", "none: the next batch as soon "
           "as the last ends (no trigger)", False, "after W messages: the first batches ran (JIT, Python workers)",
           "RocksDB state store provider, 8 shuffle partitions, local[2], maxOffsetsPerTrigger W (throughput only)",
           _spark("tws"), lambda: "pyspark " + _dist_version(_py(), "pyspark") + " + spark-sql-kafka 4.2.0",
           env=lambda ctx: {"PYSPARK_PYTHON": _py()}),
    Engine("spark-count", "Spark Structured Streaming, built-in count", "at least once to Kafka; one output per "
           "key and batch (update mode), not one per message", "none (no trigger)", False,
           "after W messages", "`groupBy(key).count()`, update mode, RocksDB state store provider, 8 shuffle "
           "partitions, local[2], maxOffsetsPerTrigger W (throughput only)", _spark("count"),
           lambda: "pyspark " + _dist_version(_py(), "pyspark") + " + spark-sql-kafka 4.2.0",
           env=lambda ctx: {"PYSPARK_PYTHON": _py()}, exact_records=False),
    Engine("flink", "PyFlink DataStream", "exactly once (checkpoints, transactional Kafka sink)",
           "none: checkpointing is off by default and the exactly-once sink commits on checkpoints; 1 s used",
           False, "after W messages: the mini-cluster, its Python workers and the first checkpoints",
           "KeyedProcessFunction with ValueState, EmbeddedRocksDB state backend, local checkpoints, parallelism 2",
           _flink, lambda: "apache-flink " + _dist_version(_venv_py("flink"), "apache-flink")
           + f" + flink-sql-connector-kafka {FLINK_KAFKA}"),
]
BY_NAME = {e.name: e for e in ENGINES}


# --------------------------------------------------------------------------------------------- setup


def _mvn(module: str, *args: str) -> None:
    subprocess.run(["mvn", "-B", "-q", "-f", str(HERE / module / "pom.xml"), *args], check=True, timeout=1800)


def setup(engines: list[str]) -> None:
    """Fetch and build what the peers need (idempotent: what exists is kept)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    venvs = {"quix": f"quixstreams=={QUIX_VERSION}", "flink": f"apache-flink=={FLINK_VERSION}"}
    for name, requirement in venvs.items():
        if name not in engines or (CACHE / f"{name}-venv" / ".done").exists():
            continue
        print(f"setup: venv {name} ({requirement})", flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(CACHE / f"{name}-venv")], check=True)
        subprocess.run([_venv_py(name), "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement],
                       check=True, timeout=1800)
        (CACHE / f"{name}-venv" / ".done").write_text(requirement)
    for module in ("kstreams", "samza"):
        if module not in engines:
            continue
        target = HERE / module / "target"
        if not (target / "lib").exists():
            print(f"setup: {module} jars (Maven)", flush=True)
            _mvn(module, "dependency:copy-dependencies", f"-DoutputDirectory={target / 'lib'}")
        sources = sorted((HERE / module / "src").rglob("*.java"))
        classes = target / "classes"
        newest = max(p.stat().st_mtime for p in sources)
        stamp = classes / ".built"
        if not stamp.exists() or stamp.stat().st_mtime < newest:
            classes.mkdir(parents=True, exist_ok=True)
            subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", str(target / "lib" / "*"),
                            *map(str, sources)], check=True)
            stamp.write_text("")
    if any(e.startswith("spark") for e in engines) and not (HERE / "spark" / "target" / "lib").exists():
        print("setup: Spark's Kafka connector (Maven)", flush=True)
        _mvn("spark", f"-Dspark.version={SPARK_KAFKA}", "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={HERE / 'spark' / 'target' / 'lib'}")
    if "flink" in engines and not (HERE / "flink" / "target" / "lib").exists():
        print("setup: Flink's Kafka connector (Maven)", flush=True)
        _mvn("flink", "dependency:copy-dependencies", "-DexcludeTransitive=true",
             f"-DoutputDirectory={HERE / 'flink' / 'target' / 'lib'}")


# Maven Central's newest spark-sql-kafka-0-10_2.13 (4.3.0, what PyPI's PySpark is, is not published there).
SPARK_KAFKA = "4.2.0"


def _artifact(jar: Path) -> str:
    """A jar's artifact name without its version (``kafka-clients-3.9.2.jar`` → ``kafka-clients``)."""
    parts = jar.stem.split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def spark_jars() -> list[Path]:
    """The connector's jars that PySpark does not bring itself (its own versions win)."""
    import pyspark

    have = {_artifact(p) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [p for p in sorted((HERE / "spark" / "target" / "lib").glob("*.jar")) if _artifact(p) not in have]


def flink_jar() -> Path:
    """The shaded Kafka SQL connector for PyFlink."""
    return next((HERE / "flink" / "target" / "lib").glob("flink-sql-connector-kafka-*.jar"))


# --------------------------------------------------------------------------------------------- broker & data


@contextlib.contextmanager
def broker(work: Path) -> Iterator[Any]:
    """A fresh Apache Kafka broker (empty log dir) for one engine; stopped and removed after."""
    from sparza.devservers.kafka import KafkaBroker

    # A cluster id of our own: KafkaBroker's random one may begin with "-", which kafka-storage's
    # argument parser takes for an option (the format then fails, about one start in 64).
    cluster_id = base64.urlsafe_b64encode(b"peers-" + os.urandom(10)).decode().rstrip("=")
    node = KafkaBroker(work / "kafka", cluster_id=cluster_id)
    node.start()
    try:
        yield node
    finally:
        node.stop()
        shutil.rmtree(work / "kafka", ignore_errors=True)


def create_topics(servers: str, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(60)


def partition_of(key: str) -> int:
    """The input's partition for a key: every message of a key in one partition (what a keyed count needs)."""
    return zlib.crc32(key.encode()) % PARTITIONS


def load(servers: str, topic: str, messages: int, keys: int) -> float:
    """Fill ``topic`` with ``messages`` JSON messages over ``keys`` keys; seconds taken."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 50, "batch.size": 1_000_000,
                         "enable.idempotence": True, "log_level": 3})
    pad = "x" * 48
    started = time.perf_counter()
    parts = [partition_of(f"k{k}") for k in range(keys)]
    for i in range(messages):
        k = i % keys
        value = f'{{"key": "k{k}", "seq": {i}, "pad": "{pad}"}}'
        while True:
            try:
                producer.produce(topic, value=value, key=f"k{k}", partition=parts[k])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"loading {topic}: messages left unsent")
    return time.perf_counter() - started


class OutputTracker:
    """A ``read_committed`` consumer of an output topic in a thread: the input messages its counts reflect
    (per key the highest count seen, summed), when each threshold was passed, and when each key first came."""

    def __init__(self, servers: str, topic: str, thresholds: list[int]) -> None:
        self.highest: dict[str, int] = {}
        self.first: dict[str, float] = {}
        self.records = 0
        self.progress = 0
        self.crossed: dict[int, float] = {}
        self._thresholds = sorted(thresholds)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._consumer = committed_reader(servers, topic, f"{topic}-tracker", PARTITIONS, fetch_wait_ms=10)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        loads = json.loads
        while not self._stop.is_set():
            msgs = self._consumer.consume(num_messages=10_000, timeout=0.02)
            if not msgs:
                continue
            now = time.time()
            with self._cond:
                for msg in msgs:
                    if msg.error() is not None:
                        continue
                    out = loads(msg.value())
                    key, count = out["key"], int(out["count"])
                    self.records += 1
                    seen = self.highest.get(key)
                    if seen is None:
                        self.first[key] = now
                        seen = 0
                    if count > seen:
                        self.highest[key] = count
                        self.progress += count - seen
                while self._thresholds and self.progress >= self._thresholds[0]:
                    self.crossed[self._thresholds.pop(0)] = now
                self._cond.notify_all()

    def wait(self, done: Callable[[], bool], timeout_s: float, alive: Callable[[], bool], what: str) -> None:
        """Block until ``done()`` (checked under the lock); raise after ``timeout_s`` or when ``alive()`` is False."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not done():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what}: not within {timeout_s:.0f} s (progress {self.progress})")
                if not alive():
                    raise RuntimeError(f"{what}: the engine exited (progress {self.progress})")
                self._cond.wait(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


# --------------------------------------------------------------------------------------------- running


class Process:
    """An engine's process (its own process group, output to a log file); stopped with SIGTERM, then SIGKILL."""

    def __init__(self, engine: Engine, ctx: Ctx) -> None:
        ctx.work.mkdir(parents=True, exist_ok=True)
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log = LOGS / f"{engine.name}-{ctx.phase}-{ctx.commit}.log"  # kept after the run
        argv = engine.command(ctx)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **engine.env(ctx)}
        with open(self.log, "w") as out:
            out.write(" ".join(argv) + "\n")
            out.flush()
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.started = time.time()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of every live process of the engine's session, and of the children they
        waited for: the engine's whole cost (JVMs, Python workers), without the broker's or this script's."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == self.proc.pid:  # field 6 of stat: the session id
                total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        return total / tick

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # what the engine's own children left running
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


@dataclass
class Throughput:
    cold: float
    warm: float
    seconds: float
    records: int
    exact: str
    cpu_s: float


@dataclass
class Latency:
    commit: str
    values: list[float]


def throughput(engine: Engine, servers: str, work: Path, scale: dict[str, int]) -> Throughput:
    """Load W + N messages, start the engine, follow its output to the end; cold and warm rates."""
    n, keys = scale["messages"], scale["keys"]
    w = n // 10
    total = n + w
    topic_in, topic_out = "tp-in", "tp-out"
    create_topics(servers, topic_in, topic_out)
    load_s = load(servers, topic_in, total, keys)
    print(f"   loaded {total:,} messages in {load_s:.1f} s", flush=True)
    ctx = Ctx(servers, topic_in, topic_out, f"{engine.name}-tp", work / "tp", "default", "throughput", total)
    tracker = OutputTracker(servers, topic_out, [w, n, total])
    proc = Process(engine, ctx)
    try:
        tracker.wait(lambda: tracker.progress >= total, scale["timeout"], proc.alive, f"{engine.name} throughput")
        time.sleep(1.0 if engine.exact_records else 0.0)  # duplicates written after the last count would show here
        cpu_s = proc.cpu_seconds()
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}\n--- {proc.log}:\n{proc.tail()}") from None
    finally:
        proc.stop()
        tracker.close()
    expected = {f"k{k}": total // keys + (1 if k < total % keys else 0) for k in range(keys)}
    wrong = sum(1 for k, v in expected.items() if tracker.highest.get(k) != v)
    extra = tracker.records - total
    if wrong:
        exact = f"WRONG: {wrong} keys' counts differ"
    elif not engine.exact_records:
        exact = f"counts exact ({tracker.records:,} records: one per key and batch)"
    elif extra == 0:
        exact = "exact (one record per message)"
    else:
        exact = f"counts exact, {extra:,} duplicate records" if extra > 0 else f"{-extra:,} records missing"
    cold_s = tracker.crossed[n] - proc.started
    warm_s = tracker.crossed[total] - tracker.crossed[w]
    return Throughput(n / cold_s, n / warm_s, tracker.crossed[total] - proc.started, tracker.records, exact, cpu_s)


def latency(engine: Engine, servers: str, work: Path, commit: str, samples: int) -> Latency:
    """A fresh engine on new topics; warm-up, then ``samples`` single messages open-loop; their latencies (ms)."""
    from confluent_kafka import Producer

    topic_in, topic_out = f"lat{commit}-in", f"lat{commit}-out"
    create_topics(servers, topic_in, topic_out)
    ctx = Ctx(servers, topic_in, topic_out, f"{engine.name}-lat{commit}", work / f"lat{commit}", commit, "latency", 0)
    tracker = OutputTracker(servers, topic_out, [])
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0, "log_level": 3})
    sent: dict[str, float] = {}

    def send(key: str) -> None:
        sent[key] = time.time()
        value = f'{{"key": "{key}", "seq": 0, "pad": "x"}}'
        producer.produce(topic_in, value=value, key=key, partition=partition_of(key))
        producer.poll(0)

    proc = Process(engine, ctx)
    try:
        started = time.monotonic()
        warm = 0
        while True:  # warm-up: until an output came back, then three more
            key = f"warm{warm}"
            send(key)
            producer.flush(10)
            warm += 1
            try:
                tracker.wait(lambda k=key: k in tracker.first, 3.0, proc.alive, "warm-up")  # type: ignore[misc]
                break
            except RuntimeError:
                if time.monotonic() - started > 240 or not proc.alive():
                    raise
        for i in range(3):
            key = f"warmx{i}"
            send(key)
            producer.flush(10)
            tracker.wait(lambda k=key: k in tracker.first, 60, proc.alive, "warm-up")  # type: ignore[misc]
        keys = [f"m{i}" for i in range(samples)]
        for key in keys:
            time.sleep(random.uniform(0.05, 0.25))
            send(key)
            producer.flush(10)
        tracker.wait(lambda: all(k in tracker.first for k in keys), 120, proc.alive, "latency messages")
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}\n--- {proc.log}:\n{proc.tail()}") from None
    finally:
        proc.stop()
        tracker.close()
    return Latency(commit, [(tracker.first[k] - sent[k]) * 1000 for k in keys])


@dataclass
class Result:
    engine: Engine
    version: str
    tp: Throughput | None = None
    lat: dict[str, Latency] = field(default_factory=dict)
    error: str = ""


def run_engine(engine: Engine, root: Path, scale: dict[str, int]) -> Result:
    result = Result(engine, engine.version())
    work = root / engine.name
    with broker(work) as node:
        servers = node.bootstrap_servers
        try:
            result.tp = throughput(engine, servers, work, scale)
            tp = result.tp
            print(f"   throughput cold {tp.cold:,.0f}/s, warm {tp.warm:,.0f}/s, {tp.cpu_s:.0f} CPU s; {tp.exact}",
                  flush=True)
            for commit in ("100", "default"):
                if commit == "default" and engine.default_is_100:
                    result.lat["default"] = result.lat["100"]
                    continue
                lat = latency(engine, servers, work, commit, scale["latency"])
                result.lat[commit] = lat
                print(f"   latency at {commit}: p50 {pct(lat.values, 0.5):.0f} ms, p99 {pct(lat.values, 0.99):.0f} ms",
                      flush=True)
        except Exception as exc:
            result.error = str(exc).strip()
            print(f"   FAILED: {result.error[-3000:]}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return result


# --------------------------------------------------------------------------------------------- report


def render(results: list[Result], scale: dict[str, int], took: float) -> str:
    n, keys = scale["messages"], scale["keys"]
    base = next((r for r in results if r.engine.name == "ceiling-txn" and r.tp), None)
    rows = []
    for r in results:
        e = r.engine
        if r.tp is None:
            rows.append([e.label, r.version, e.guarantee, "failed", "-", "-", "-", "-", "-", "-", "-"])
            continue
        ratio = f"{r.tp.warm / base.tp.warm:.2f}" if base and base.tp else "-"
        l100, ldef = r.lat.get("100"), r.lat.get("default")

        def fmt(lat: Latency | None) -> str:
            return f"{pct(lat.values, 0.5):.0f} / {pct(lat.values, 0.99):.0f}" if lat and lat.values else "-"

        per_cpu = f"{(n + n // 10) / r.tp.cpu_s:,.0f}" if r.tp.cpu_s else "-"
        rows.append([e.label, r.version, e.guarantee, f"{r.tp.cold:,.0f}", f"{r.tp.warm:,.0f}", ratio, per_cpu,
                     r.tp.exact, fmt(l100), fmt(ldef), e.default_commit])
    body = (f"{n:,} messages (+ {n // 10:,} before them for the warm rate) of about 100 bytes, {keys:,} keys, "
            f"{PARTITIONS} partitions in and out, one Apache Kafka broker (KRaft, fresh for each engine) on "
            "loopback, one engine at a time; msgs per CPU s: all W + N messages over the CPU time of the engine's "
            f"processes (the broker's and this script's not counted); latency over {scale['latency']} single messages "
            f"per row; {took:.0f} s in all.\n\n"
            + table(["engine", "version", "guarantee", "cold msg/s", "warm msg/s", "warm vs ceiling",
                     "msgs per CPU s", "output check",
                     "latency p50 / p99 ms at 100 ms", "latency p50 / p99 ms at default", "default interval"], rows))
    body += "\n\nSettings and what warm means:\n\n" + "\n".join(
        f"- **{r.engine.label}**: {r.engine.settings}; warm: {r.engine.warm}." for r in results)
    failed = [r for r in results if r.error]
    if failed:
        body += "\n\nFailed:\n\n" + "\n".join(f"- **{r.engine.label}**: `{r.error.splitlines()[0][:300]}`"
                                             for r in failed)
    return body + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--only", nargs="*", choices=list(BY_NAME), help="run only these engines (default: all)")
    parser.add_argument("--setup", action="store_true", help="only fetch and build what the peers need")
    parser.add_argument("--no-record", action="store_true", help="print the table, do not write docs/")
    args = parser.parse_args(argv)
    names = args.only or list(BY_NAME)
    setup(names)
    if args.setup:
        return
    scale = SCALES[args.scale]

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(f"signal {signum}")  # the finally blocks stop the engine and the broker

    signal.signal(signal.SIGTERM, on_term)
    root = Path(tempfile.mkdtemp(prefix="sparza-bench-peers-"))
    took = time.monotonic()
    results = []
    try:
        for name in names:
            print(f"-- {name}", flush=True)
            results.append(run_engine(BY_NAME[name], root, scale))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    body = render(results, scale, time.monotonic() - took)
    cmd = f"flock /work/heavy.lock .venv/bin/python bench/peers/run.py --scale {args.scale}" + (
        f" --only {' '.join(args.only)}" if args.only else "")
    if args.no_record:
        print(body)
        return
    record("peers", "The peers: the keyed count in each engine on one Apache Kafka broker", cmd, body,
           measures=MEASURES)


if __name__ == "__main__":
    main()
