"""The randomized, oracle-checked fault harness: run a generated scenario through ``sparza run``
subprocesses, inject its fault, and compare the outputs exactly with the oracle.

    python -m sparza.testing.harness --seed 12345          # one scenario; exit 1 if it fails
    python -m sparza.testing.harness --soak 60             # random seeds for 60 minutes
    python -m sparza.testing.harness --seed 12345 --print  # only describe the scenario

Every failure prints a one-line command that reproduces it. The harness starts its own Azurite
unless it is given one (:func:`run_scenario` takes an :class:`~sparza.devservers.storage.AzuriteProcess`),
and, for scenarios with a Kafka input or output, its own Tansu broker unless it is given one
(``kafka=``, a :class:`~sparza.devservers.kafka.TansuProcess`; a soak starts one for all its scenarios).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparza.testing.jobs import RECORD_SCHEMA, TABLE_SCHEMA
from sparza.testing.oracle import (
    Comparison,
    compare,
    download_prefix,
    expected_records,
    expected_table_rows,
    read_blob_records,
    read_delta_records,
    read_delta_values,
    read_kafka_records,
    read_table_rows,
    reduce_panes,
)
from sparza.testing.scenario import (
    AFTER_RUN_FAULTS,
    EXTRA_FAULTS,
    FAULTS,
    INPUTS,
    OUTPUTS,
    TASK_APIS,
    Scenario,
    generate,
    operator_config,
    scale_scenario,
)

__all__ = ["Outcome", "reproduce_command", "run_scenario", "soak"]

RUN_TIMEOUT_S = 600.0
"""Longest a single ``sparza run`` may take before the harness calls it hung."""

_SRC = Path(__file__).resolve().parents[2]

EVENT_TIME_KINDS = ("window", "session", "join")
"""Job kinds whose operators may drop (and the harness jobs route) late messages."""

_AFTER_RUN_FAULTS = AFTER_RUN_FAULTS
"""Faults applied between runs (the others happen during a run, which is then restarted)."""

COORDINATION: dict[str, str] = {
    "job.coordinator.factory": "azure",
    "job.coordinator.azure.heartbeat.interval.ms": "1000",
    "job.coordinator.azure.liveness.timeout.ms": "6000",
    "job.coordinator.azure.liveness.check.interval.ms": "1000",
    "job.coordinator.azure.leader.check.interval.ms": "1000",
    "job.coordinator.azure.jobmodel.poll.interval.ms": "500",
    "job.coordinator.azure.barrier.timeout.ms": "60000",
}
"""The azure coordinator of scenarios with several processors: faster than the defaults, yet tolerant of
a loaded 2-core machine (a liveness timeout of a few seconds would rebalance all the time)."""


def reproduce_command(seed: int, *, messages: int | None = None, fault: str | None = None,
                      output: str | None = None, input: str | None = None, task_api: str | None = None,
                      extras: bool = True, drain: bool = True) -> str:
    """The one-line command (from the repository root) that runs the scenario of ``seed`` again."""
    extra = (f" --messages {messages}" if messages is not None else "") + (f" --fault {fault}" if fault else "")
    extra += (f" --output {output}" if output else "") + (f" --input {input}" if input else "")
    extra += f" --task-api {task_api}" if task_api else ""
    extra += "" if extras else " --extras none"
    extra += "" if drain or not extras else " --drain none"
    return f"PYTHONPATH=src:. .venv/bin/python -m sparza.testing.harness --seed {seed}{extra}"


@dataclass
class RunRecord:
    """One ``sparza run`` the scenario started: why, its exit code, its log."""

    label: str
    returncode: int | None
    seconds: float
    log: Path


@dataclass
class Outcome:
    """The result of one scenario: ``ok`` when every run behaved and the outputs matched exactly."""

    scenario: Scenario
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)
    comparison: Comparison | None = None
    seconds: float = 0.0
    workdir: Path | None = None
    messages_override: int | None = None
    fault_override: str | None = None
    output_override: str | None = None
    input_override: str | None = None
    task_api_override: str | None = None
    extras: bool = True
    drain: bool = True

    inconclusive: bool = False
    """Spark itself could not start the job's Python workers, even after restarts (an overloaded
    machine): the scenario proves nothing either way and counts neither as a pass nor as a fail."""

    @property
    def ok(self) -> bool:
        """True when nothing went wrong."""
        return not self.problems

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``INCONCLUSIVE``."""
        return "INCONCLUSIVE" if self.inconclusive else ("PASS" if self.ok else "FAIL")

    def report(self) -> str:
        """A few lines for humans: the scenario, the verdict, the problems, how to reproduce."""
        lines = [f"{self.verdict} {self.scenario.describe()} ({self.seconds:.0f}s)"]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        if not self.ok:
            lines += [f"  run {r.label}: exit {r.returncode} in {r.seconds:.0f}s, log {r.log}" for r in self.runs]
            lines.append("  reproduce: " + reproduce_command(self.scenario.seed, messages=self.messages_override,
                                                             fault=self.fault_override, output=self.output_override,
                                                             input=self.input_override,
                                                             task_api=self.task_api_override, extras=self.extras,
                                                             drain=self.drain))
        return "\n".join(lines)


class _Job:
    """One scenario's files, config and processes."""

    def __init__(self, scenario: Scenario, root: Path, azurite: Any, kafka: Any = None) -> None:
        self.s = scenario
        self.root = root
        self.azurite = azurite
        self.kafka = kafka
        self.nonce = uuid.uuid4().hex[:10]
        if scenario.uses_kafka and kafka is None:
            raise ValueError("a scenario with Kafka streams needs a broker (kafka=TansuProcess)")
        # Topics are per scenario (one broker serves a whole soak): the nonce keeps them apart.
        self.input_stream = "delta.in" if scenario.input == "delta" else f"kafka.in-{self.nonce}"
        self.output_stream = {"blob": f"ho-{self.nonce}.out", "kafka": f"kafka.out-{self.nonce}"}.get(
            scenario.output, "delta.out")
        self.output_container = f"ho-{self.nonce}"
        self.state_container = f"hs-{self.nonce}"
        self.delta_container = f"hd-{self.nonce}"
        self.delta_root: str | Path = (root / "streams" if scenario.delta_location == "local"
                                       else f"az://{self.delta_container}/streams")
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.config = self._config()
        self.config_path = self._write("job.yaml", self.config)
        self.runs: list[RunRecord] = []
        self.spawned = 0
        self.notes: list[str] = []
        self.purged: dict[str, tuple[bytes, dict[str, str], dict[str, str]]] = {}
        """Blobs the purged-snapshot fault took away, until a run fails for want of them."""
        self.purge_problems: list[str] = []

    # --- config ----------------------------------------------------------------------------
    def _config(self) -> dict[str, str]:
        s, root = self.s, self.root
        v: dict[str, Any] = {
            "job.name": "harness",
            "job.id": self.nonce,
            "job.logged.store.base.dir": root / "state",
            "task.max.batch.messages": s.max_batch,
            "task.commit.ms": 0,
            "systems.delta.samza.factory": "delta",
            "systems.delta.samza.offset.default": "oldest",
            "systems.delta.delta.root": self.delta_root,
            "azure.storage.connect": self.azurite.connection_string,
            "app.harness.kind": s.kind,
            "metrics.reporter.jsonl.path": root / "metrics.jsonl",
            "task.testing.fail.once.file": "",
            "app.harness.input": self.input_stream,
            "app.harness.output": self.output_stream,
        }
        if s.uses_kafka:
            v["systems.kafka.samza.factory"] = "kafka"
            v["systems.kafka.consumer.bootstrap.servers"] = self.kafka.bootstrap_servers
            v["systems.kafka.samza.offset.default"] = "oldest"
        in_system, in_name = self.input_stream.split(".", 1)
        if s.bounded:
            v[f"systems.{in_system}.streams.{in_name}.bounded"] = "true"
        if s.api == "task":
            v["task.class"] = ("sparza.testing.jobs.HarnessBatchTask" if s.task_api == "batch"
                               else "sparza.testing.jobs.HarnessTask")
            v["task.inputs"] = self.input_stream
            v["app.harness.output.partition"] = s.blob_partition
        else:
            v["app.class"] = "sparza.testing.jobs.HarnessApp"
            v["app.harness.partitions"] = s.stage2_partitions
            v["app.harness.flatmap"] = str(s.flatmap).lower()
            v["app.harness.join"] = str(s.join != "none").lower()
            v["app.window.store.factory"] = s.store if s.store == "rocksdb" else "memory"
            if s.backup:
                v["app.window.store.backup.factories"] = "blobstore"
            if s.kind == "window":
                v["app.harness.window.size.ms"] = s.window_size_ms
                v["app.harness.window.slide.ms"] = s.window_slide_ms
            v.update(operator_config(s))   # joins, sessions, triggers (scenario.OPERATORS_SALT)
            # Without late data nothing may be late: the lateness spans every event time.
            v[f"systems.{in_system}.streams.{in_name}.watermark.lateness.ms"] = 0 if s.late else 10**12
            v["task.late.messages.policy"] = "route"
            v["task.late.messages.stream"] = "delta.late"
            if s.intermediate != "default":
                v["job.intermediate.system"] = s.intermediate
        if s.kind == "count":
            v["stores.counts.factory"] = s.store
            v["stores.counts.key.serde"] = "string"
            v["stores.counts.msg.serde"] = "json"
            if s.backup:
                v["stores.counts.backup.factories"] = "blobstore"
        if s.join != "none":
            v["stores.profiles.adstore.input"] = "delta.profiles"
            v["stores.profiles.key.serde"] = "string"
            v["stores.profiles.msg.serde"] = "json"
            if s.backup:
                v["stores.profiles.backup.factories"] = "blobstore"
            v["systems.delta.streams.profiles.bounded"] = "true"
            v["systems.delta.streams.profiles.samza.bootstrap"] = "true"
            if s.join == "broadcast":
                v["task.broadcast.inputs"] = "delta.profiles#0"
        if s.processors > 1:
            v.update(COORDINATION)
        if s.blob_store == "local":
            v["blob.store.manager.factory"] = "local"
            v["blob.store.local.root"] = root / "blobstore"
        else:
            v["blob.store.manager.factory"] = "azure"
            v["blob.store.azure.container"] = self.state_container
        if s.output in ("delta", "kafka", "table-append", "table-upsert"):
            out_system, out_name = self.output_stream.split(".", 1)
            v[f"systems.{out_system}.streams.{out_name}.samza.key.serde"] = "string"
            v[f"systems.{out_system}.streams.{out_name}.samza.msg.serde"] = "json"
        if s.output.startswith("table-"):
            mode = s.output.removeprefix("table-")
            key = ("key,aux" if s.kind == "count" else "key,id") if mode == "upsert" else ""
            if s.kind == "count" and mode == "upsert":
                v["app.harness.count.aux"] = "partition"      # one row per (key, task): its current count
            if s.api == "app":
                # The high-level API declares the table: app.output(schema=…, mode=…, key=…).
                v["app.harness.table.mode"] = mode
                v["app.harness.table.key"] = key
            else:
                v["systems.delta.streams.out.delta.table.schema"] = TABLE_SCHEMA
                v["systems.delta.streams.out.delta.table.mode"] = mode
                if key:
                    v["systems.delta.streams.out.delta.table.key"] = key
        if s.output == "blob":
            c = self.output_container
            v["app.harness.output.avro"] = str(s.blob_format == "avro").lower()
            v[f"systems.{c}.samza.factory"] = "azureblob"
            v[f"systems.{c}.azureblob.writer.format"] = s.blob_format
            v[f"systems.{c}.azureblob.compression.type"] = "gzip" if s.blob_gzip else "none"
            v[f"systems.{c}.streams.out.avro.schema"] = json.dumps(RECORD_SCHEMA)
            if s.blob_flush_threshold is not None:
                v[f"systems.{c}.azureblob.maxFlushThresholdSize"] = s.blob_flush_threshold
            if s.blob_rollover == "count":
                v[f"systems.{c}.azureblob.maxMessagesPerBlob"] = s.blob_rollover_value
            elif s.blob_rollover == "size":
                v[f"systems.{c}.azureblob.maxBlobSize"] = s.blob_rollover_value
        return {k: str(x) for k, x in v.items()}

    def _write(self, name: str, values: dict[str, str]) -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(values))
        return path

    # --- input -----------------------------------------------------------------------------
    def create_streams(self) -> None:
        """Create the input, output, late and profile streams, and load the profiles."""
        from sparza.config import Config
        from sparza.streams import OutgoingMessageEnvelope, SystemStream
        from sparza.systems import StreamSpec
        from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

        config = Config(self.config)
        admin = DeltaSystemAdmin("delta", config)
        if self.s.delta_location == "azure":
            from azure.storage.blob import BlobServiceClient

            with contextlib.suppress(Exception):   # exists already (a second create_streams)
                BlobServiceClient.from_connection_string(self.azurite.connection_string).create_container(
                    self.delta_container)
        if self.s.input == "delta":
            admin.create_stream(StreamSpec("in", self.s.partitions))
        admin.create_stream(StreamSpec("late", 1))
        if self.s.output == "delta":
            admin.create_stream(StreamSpec("out", 2))
        if self.s.input == "kafka" or self.s.output == "kafka":
            from sparza.systems.kafka import KafkaSystemAdmin

            kafka_admin = KafkaSystemAdmin("kafka", config)
            if self.s.input == "kafka":
                kafka_admin.create_stream(StreamSpec(self.input_stream.split(".", 1)[1], self.s.partitions))
            if self.s.output == "kafka":
                kafka_admin.create_stream(StreamSpec(self.output_stream.split(".", 1)[1], 2))
        if self.s.join != "none":
            admin.create_stream(StreamSpec("profiles", 1 if self.s.join == "broadcast" else self.s.stage2_partitions))
            producer = DeltaSystemProducer("delta", config)
            producer.register("harness")
            stream = SystemStream("delta", "profiles")
            for p in self.s.profiles:
                partition = p.partition if self.s.join == "broadcast" else _json_key_partition(
                    p.key, self.s.stage2_partitions)
                producer.send("harness", OutgoingMessageEnvelope(stream, json.dumps({"c": p.c}).encode(),
                                                                 key=p.key.encode(), partition=partition,
                                                                 timestamp=0))
            producer.flush("harness")

    def append_chunk(self, chunk: int) -> int:
        """Append the input messages of ``chunk`` (one Delta commit); returns how many."""
        from sparza.config import Config
        from sparza.streams import OutgoingMessageEnvelope, SystemStream
        from sparza.systems.delta import DeltaSystemProducer

        messages = [m for m in self.s.messages if m.chunk == chunk]
        if not messages:
            return 0
        if self.s.input == "kafka":
            return self._append_kafka(chunk, messages)
        producer = DeltaSystemProducer("delta", Config(self.config))
        producer.register("harness")
        stream = SystemStream("delta", "in")
        for m in messages:
            body = json.dumps({"id": m.id, "key": m.key, "n": m.n}).encode()
            producer.send("harness", OutgoingMessageEnvelope(stream, body, key=m.key.encode(), partition=m.partition,
                                                             timestamp=m.timestamp))
        producer.flush("harness")
        return len(messages)

    def _append_kafka(self, chunk: int, messages: list[Any]) -> int:
        """One Kafka transaction per chunk, with confluent-kafka directly: the records become visible at
        once, and the commit marker makes Tansu's reported end offsets exact (docs/kafka.md)."""
        from confluent_kafka import Producer

        topic = self.input_stream.split(".", 1)[1]
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap_servers,
                             "transactional.id": f"harness-loader-{self.nonce}-{chunk}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        for m in messages:
            body = json.dumps({"id": m.id, "key": m.key, "n": m.n}).encode()
            producer.produce(topic, value=body, key=m.key.encode(), partition=m.partition, timestamp=m.timestamp)
        producer.commit_transaction(60)
        return len(messages)

    # --- processes -------------------------------------------------------------------------
    def spawn(self, label: str, config_path: Path | None = None, *extra: str) -> tuple[subprocess.Popen[bytes], Path,
                                                                                       float]:
        """Start ``sparza run`` for this job (its own process group, output to a log file)."""
        self.spawned += 1      # not len(self.runs): the processors of a group are recorded only when they end
        log = self.logs / f"{self.spawned:02d}-{label}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(_SRC), env.get("PYTHONPATH", "")] if p)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        cmd = [sys.executable, "-m", "sparza.cli", "run", "--config", str(config_path or self.config_path),
               "--master", "local[2]", *extra]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        return proc, log, time.monotonic()

    def wait(self, label: str, handle: tuple[subprocess.Popen[bytes], Path, float],
             timeout: float = RUN_TIMEOUT_S) -> RunRecord:
        """Wait for a spawned run (killing its process group when it hangs) and record it."""
        proc, log, started = handle
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
        record = RunRecord(label, rc, time.monotonic() - started, log)
        self.runs.append(record)
        return record

    def run(self, label: str, config_path: Path | None = None, *extra: str) -> RunRecord:
        """One run to completion: ``--once`` for unbounded inputs; bounded ones end by themselves.

        A run that died of Spark's own start-up trouble on an overloaded machine (a Python worker
        that did not connect back in time) is started again, at most twice, and noted: a restart is
        something the job must survive anyway, and the failure says nothing about sparza."""
        once = self.once_args()
        record = self._run_group(label, config_path, *once, *extra)
        for attempt in (1, 2, 3):
            if record.returncode == 0 or not _transient(record.log):
                break
            self.notes.append(f"run '{label}' hit Spark's '{_TRANSIENT}'; restarted ({attempt})")
            record = self._run_group(f"{label}-again{attempt}", config_path, *once, *extra)
        if record.returncode != 0 and _transient(record.log):
            raise _SparkStartFailure(f"run '{label}': Spark could not start its Python workers 4 times")
        if self.purged and record.returncode not in (0, None):
            record = self._restore_purged(label, record, config_path, *once, *extra)
        return record

    def _restore_purged(self, label: str, failed: RunRecord, config_path: Path | None, *args: str) -> RunRecord:
        """A run failed after the purged-snapshot fault: it must say what is gone. Bring the blobs back and
        run again."""
        text = _log_tail(failed.log, 6)
        named = any(word in text for word in ("purged", "gone from the blob store", "does not exist in the blob store",
                                              "cannot be restored"))
        self.notes.append(f"purged-snapshot: run '{label}' failed (exit {failed.returncode})"
                          + ("" if named else " WITHOUT naming the purged snapshot")
                          + f"; {len(self.purged)} blobs brought back")
        if not named:
            self.purge_problems.append(f"run '{label}' after committed snapshots were purged failed without saying "
                                       f"so: {text}")
        for blob_id, saved in self.purged.items():
            _restore_blob(self, blob_id, saved)
        self.purged = {}
        return self._run_group(f"{label}-after-restoring-blobs", config_path, *args)

    def _run_group(self, label: str, config_path: Path | None, *args: str) -> RunRecord:
        """One run: a single ``sparza run``, or with ``processors`` > 1 that many processors of the job
        (``--processor-id 0..N-1``, started ``stagger_s`` apart) under the azure coordinator. The record
        of a group is its first failing processor's (exit codes of all are noted)."""
        if self.s.drain == "request" and "--drain" in args:
            return self._run_drained_by_request(label, config_path, *[a for a in args if a != "--drain"])
        if self.s.processors <= 1:
            return self.wait(label, self.spawn(label, config_path, *args))
        handles = []
        for i in range(self.s.processors):
            if i:
                time.sleep(self.s.stagger_s)
            handles.append((f"{label}-proc{i}", self.spawn(f"{label}-proc{i}", config_path, *args,
                                                            "--processor-id", str(i))))
        records = [self.wait(name, handle) for name, handle in handles]
        self.notes.append(f"run '{label}': {len(records)} processors exited "
                          f"{', '.join(str(r.returncode) for r in records)}")
        return next((r for r in records if r.returncode != 0), records[-1])

    def _run_drained_by_request(self, label: str, config_path: Path | None, *args: str) -> RunRecord:
        """``drain=request``: a plain ``sparza run``, and ``sparza drain`` once it committed its first batch and
        the drawn delay passed; the run must then drain and exit 0. A request that came after the run had
        drained by itself (a request left pending by an earlier failed run) would stay pending for the next
        phase, whose input it does not know: it is withdrawn."""
        handle = self.spawn(label, config_path, *args)
        # After its first batch, or, when it has nothing new to process (no batch comes), soon after its start.
        if _wait_for_line(handle, KILL9_START_TIMEOUT_S, lambda line: line.startswith("sparza: job ")):
            _wait_for_first_batch(handle, 30.0)
        deadline = time.monotonic() + self.s.drain_delay_s
        while time.monotonic() < deadline and handle[0].poll() is None:
            time.sleep(0.05)
        if handle[0].poll() is None:
            self._drain_command(label, config_path)
        record = self.wait(label, handle)
        if record.returncode == 0 and self._drain_command(f"{label}-cleanup", config_path, "--cancel") == 0:
            self.notes.append(f"run '{label}' had drained before its drain request: the request was withdrawn")
        return record

    def _drain_command(self, label: str, config_path: Path | None, *extra: str) -> int:
        """``sparza drain`` for this job (output appended to the logs); its exit code."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(_SRC), env.get("PYTHONPATH", "")] if p)
        with open(self.logs / f"{self.spawned:02d}-{label}-drain.log", "ab") as out:
            return subprocess.run([sys.executable, "-m", "sparza.cli", "drain", "--config",
                                   str(config_path or self.config_path), *extra], stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, timeout=300).returncode

    def once_args(self) -> tuple[str, ...]:
        """``--once`` except for a bounded job's first run, which must end by itself. A bounded job
        started again after it ended has nothing to plan and does not stop by itself (see
        docs/guarantees.md), so later runs use ``--once``. A drain scenario drains every run instead
        (``--drain``; ``drain=request`` turns it into ``sparza drain`` while the run runs)."""
        if self.s.drain != "none":
            return ("--drain",)
        return () if self.s.bounded and not self.runs and not self.s.once_always else ("--once",)

    def variant(self, name: str, **overrides: str) -> Path:
        """A copy of the config with some keys changed (a poison id, a fault point)."""
        return self._write(name, {**self.config, **overrides})


def _json_key_partition(key: str, partitions: int) -> int:
    import zlib

    return zlib.crc32(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()) % partitions


_TRANSIENT = "Python worker failed to connect back"


class _SparkStartFailure(RuntimeError):
    """Spark failed to start Python workers again and again: the scenario is inconclusive."""


def _transient(log: Path) -> bool:
    try:
        return _TRANSIENT in log.read_text(errors="replace")[-20_000:]
    except OSError:
        return False


def _log_tail(log: Path, lines: int = 3) -> str:
    """The last meaningful lines of a run's log (no Spark/JVM warnings, no stack frames)."""
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    keep = [line.strip() for line in text if line.strip() and " WARN " not in line
            and not line.lstrip().startswith(("at ", "...", "WARNING:", "Using Spark", "Setting default", "To adjust"))]
    return " | ".join(keep[-lines:])[:500]


KILL9_START_TIMEOUT_S = 300.0
"""How long the ``kill9`` fault waits for the first committed batch before it kills anyway."""


def _wait_for_first_batch(handle: tuple[subprocess.Popen[bytes], Path, float], timeout: float) -> bool:
    """Wait until the run's log shows its first committed batch (a ``batch N (spark M)`` or, in the container
    mode, ``batch N (epoch E: ...)`` status line); False when the run ended or ``timeout`` passed first."""
    return _wait_for_line(handle, timeout,
                          lambda line: line.startswith("batch ") and ("(spark " in line or "(epoch " in line))


def _wait_for_line(handle: tuple[subprocess.Popen[bytes], Path, float], timeout: float,
                   wanted: Callable[[str], bool]) -> bool:
    """Wait until a line of the run's log is ``wanted``; False when the run ended or ``timeout`` passed first."""
    proc, log, _ = handle
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            text = ""
        if any(wanted(line) for line in text.splitlines()):
            return True
        time.sleep(0.1)
    return False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _expect_clean(outcome: Outcome, record: RunRecord) -> None:
    if record.returncode != 0:
        what = "hung (killed)" if record.returncode is None else f"exited {record.returncode}"
        outcome.problems.append(f"run '{record.label}' {what}: {_log_tail(record.log)}")


def _spark_dirs(state: Path) -> list[Path]:
    return [p.parent for p in state.glob("_spark/**/commits")] if state.exists() else []


def _apply_phase(job: _Job, outcome: Outcome, fault: str, phase: int) -> None:
    """Run one phase with ``fault`` (``none``: a clean run)."""
    s = job.s
    label = f"phase{phase}"
    if fault == "poison":
        ids = [m.id for m in s.messages if m.chunk == phase]
        if not ids:
            outcome.notes.append("poison: the phase has no input; nothing to poison")
            _expect_clean(outcome, job.run(label))
            return
        poison = ids[len(ids) // 2]
        record = job.run(f"{label}-poison", job.variant("poison.yaml", **{"app.harness.poison.ids": str(poison)}))
        if record.returncode == 0:
            outcome.problems.append(f"a job that raises on message id {poison} exited 0 (the failure was hidden)")
        _expect_clean(outcome, job.run(f"{label}-fixed"))
    elif fault == "kill9":
        handle = job.spawn(f"{label}-kill9")        # no --once: an unbounded job keeps running until killed
        # The kill lands among the batches, not during Spark's start-up (which alone takes 10-30 s and
        # would absorb a fixed delay on a loaded machine): 0-2.8 s after the first batch committed.
        started = _wait_for_first_batch(handle, KILL9_START_TIMEOUT_S)
        delay = round((s.fault_delay_s - 3.0) / 6.0, 2)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and handle[0].poll() is None:
            time.sleep(0.05)
        if handle[0].poll() is None:
            _kill_group(handle[0])
            outcome.notes.append(f"kill9: killed {delay}s after the first committed batch" if started else
                                 f"kill9: no batch committed within {KILL9_START_TIMEOUT_S:.0f}s; killed anyway")
        else:
            outcome.notes.append(f"kill9: the run had ended by itself (within {delay}s of its first batch)")
        job.wait(f"{label}-kill9", handle)
        _expect_clean(outcome, job.run(f"{label}-restart"))
    elif fault == "fail-once":
        marker = job.root / "fail-once.marker"
        path = job.variant("fail-once.yaml", **{"task.testing.fail.once.file": str(marker),
                                                "task.testing.fail.once.at": s.fail_step})
        _expect_clean(outcome, job.run(f"{label}-fail-once", path))
        outcome.notes.append(f"fail-once at {s.fail_step}: {'fired' if marker.exists() else 'did not fire'}")
        if outcome.problems:
            _expect_clean(outcome, job.run(f"{label}-rerun"))
    elif fault == "second-processor":
        once = job.once_args()
        first = job.spawn(f"{label}-proc0", None, *once, "--processor-id", "0")
        time.sleep(min(s.fault_delay_s, 8.0))
        second = job.spawn(f"{label}-proc1", None, *once, "--processor-id", "1")
        r0 = job.wait(f"{label}-proc0", first)
        r1 = job.wait(f"{label}-proc1", second)
        outcome.notes.append(f"second processor: exits {r0.returncode} and {r1.returncode}")
        _expect_clean(outcome, job.run(f"{label}-after"))
    elif fault == "azurite-restart":
        handle = job.spawn(f"{label}-azurite")
        deadline = time.monotonic() + s.fault_delay_s
        while time.monotonic() < deadline and handle[0].poll() is None:
            time.sleep(0.2)
        if handle[0].poll() is not None:
            outcome.notes.append(f"azurite-restart: the run had ended before {s.fault_delay_s}s")
        job.azurite.stop()
        time.sleep(3.0)
        job.azurite.start()
        if s.bounded:
            job.wait(f"{label}-azurite", handle)
        else:
            # An unbounded run (no --once) would go on forever: stop it the polite way after the outage.
            time.sleep(5.0)
            if handle[0].poll() is None:
                os.killpg(handle[0].pid, signal.SIGTERM)
            job.wait(f"{label}-azurite", handle, timeout=180)
        _expect_clean(outcome, job.run(f"{label}-after"))
    elif fault == "kafka-restart":
        _kafka_restart(job, outcome, label, phase)
    else:
        _expect_clean(outcome, job.run(label))
        _damage(job, outcome, fault, label)


def _damage(job: _Job, outcome: Outcome, fault: str, label: str) -> None:
    """An after-run fault: damage what the last run left (the next run must repair it)."""
    state = job.root / "state"
    if fault == "purged-snapshot":
        _purged_snapshots(job, outcome, label)
        return
    if fault == "lost-state":
        shutil.rmtree(state, ignore_errors=True)
    elif fault == "lost-spark-checkpoint":
        shutil.rmtree(state / "_spark", ignore_errors=True)
    elif fault == "replay-spark-batch":
        dropped = 0
        for spark_dir in _spark_dirs(state):
            commits = sorted((p for p in (spark_dir / "commits").iterdir() if p.name.isdigit()),
                             key=lambda p: int(p.name))
            if commits:
                commits[-1].unlink()                      # Spark now runs that batch again
                (spark_dir / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
                dropped += 1
        outcome.notes.append(f"replay-spark-batch: dropped the last commit of {dropped} queries")
    elif fault == "deleted-snapshot":
        marked = _mark_committed_snapshots_deleted(job)
        shutil.rmtree(state, ignore_errors=True)        # and a new host: restore must use them
        outcome.notes.append(f"deleted-snapshot: marked {marked} committed snapshot blobs deleted")
    elif fault != "none":
        raise ValueError(f"unknown fault {fault!r}")


def _kafka_restart(job: _Job, outcome: Outcome, label: str, phase: int) -> None:
    """The Kafka broker restarts mid-run. Tansu keeps everything in memory, so the topics, their records and
    every group offset are gone: the harness then creates the input topic again and produces the same
    chunks again, in the same transactions (so every record gets its old offset), as the input's own
    producers would. The run in flight may fail (nothing may be half-written or skipped); a run after
    it must end with the exact output."""
    from sparza.config import Config
    from sparza.systems import StreamSpec
    from sparza.systems.kafka import KafkaSystemAdmin

    handle = job.spawn(f"{label}-kafka-restart", None, *job.once_args())
    started = _wait_for_first_batch(handle, KILL9_START_TIMEOUT_S)
    job.kafka.stop()
    job.kafka.start()
    topic = job.input_stream.split(".", 1)[1]
    admin = KafkaSystemAdmin("kafka", Config(job.config))
    try:
        admin.create_stream(StreamSpec(topic, job.s.partitions))
    except Exception:   # auto-created meanwhile by a client's metadata request, with another partition count
        from confluent_kafka.admin import AdminClient

        client = AdminClient({"bootstrap.servers": job.kafka.bootstrap_servers})
        for future in client.delete_topics([topic], operation_timeout=30).values():
            future.result(30)
        admin = KafkaSystemAdmin("kafka", Config(job.config))
        admin.create_stream(StreamSpec(topic, job.s.partitions))
    for chunk in range(phase + 1):
        job.append_chunk(chunk)
    record = job.wait(f"{label}-kafka-restart", handle)
    when = "after the first committed batch" if started else "at once"
    outcome.notes.append(f"kafka-restart: broker restarted {when}; the run in flight exited {record.returncode}")
    _expect_clean(outcome, job.run(f"{label}-after-kafka-restart"))


def _purged_snapshots(job: _Job, outcome: Outcome, label: str) -> None:
    """Committed snapshot blobs *purged* (gone, not tombstoned: an operator's cleanup, a lifecycle rule) and
    the local state lost with them. The next run that needs the state must not go on silently with empty
    stores: it either fails, saying what is gone, or rebuilds the state itself (an adjunct store from its
    stream); the final output check decides which. After such a failure the harness brings the blobs back
    (:meth:`_Job.run`), as the error tells the user to (from a backup of the blob store), and the job must
    then finish exactly."""
    from sparza.blobstore.factory import blob_store_manager_from_config

    manager = blob_store_manager_from_config(job.config)
    saved: dict[str, tuple[bytes, dict[str, str], dict[str, str]]] = {}
    try:
        for info in list(manager.list_blobs()):
            if info.deleted_at_ms is None and info.expires_at_ms is None and not info.blob_id.startswith(
                    "checkpoints/"):
                saved[info.blob_id] = _save_blob(job, info.blob_id)
                manager.purge(info.blob_id)
    finally:
        manager.close()
    shutil.rmtree(job.root / "state", ignore_errors=True)
    job.purged = saved
    outcome.notes.append(f"purged-snapshot: purged {len(saved)} committed snapshot blobs and the local state")


def _save_blob(job: _Job, blob_id: str) -> tuple[bytes, dict[str, str], dict[str, str]]:
    """A blob's bytes, metadata and tags, read with the storage's own client (local files or the Azure SDK)."""
    if job.s.blob_store == "local":
        path = job.root / "blobstore" / blob_id
        meta = path.with_name(path.name + ".meta.json")
        return path.read_bytes(), {"sidecar": meta.read_text()} if meta.exists() else {}, {}
    from azure.storage.blob import BlobServiceClient

    blob = BlobServiceClient.from_connection_string(job.azurite.connection_string).get_blob_client(
        job.state_container, blob_id)
    props = blob.get_blob_properties()
    return blob.download_blob().readall(), dict(props.metadata or {}), dict(blob.get_blob_tags() or {})


def _restore_blob(job: _Job, blob_id: str, saved: tuple[bytes, dict[str, str], dict[str, str]]) -> None:
    data, metadata, tags = saved
    if job.s.blob_store == "local":
        path = job.root / "blobstore" / blob_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if "sidecar" in metadata:
            path.with_name(path.name + ".meta.json").write_text(metadata["sidecar"])
        return
    from azure.storage.blob import BlobServiceClient

    blob = BlobServiceClient.from_connection_string(job.azurite.connection_string).get_blob_client(
        job.state_container, blob_id)
    blob.upload_blob(data, overwrite=True, metadata=metadata, tags=tags or None)


def _mark_committed_snapshots_deleted(job: _Job) -> int:
    """Tombstone every committed (permanent, live) snapshot blob through the blob store's own
    ``delete``: what an operator's or a gc's mistake does (SAMZA-2787). The bytes stay readable with
    ``get_deleted`` until purged."""
    from sparza.blobstore.api import Metadata
    from sparza.blobstore.factory import blob_store_manager_from_config

    manager = blob_store_manager_from_config(job.config)
    marked = 0
    try:
        for info in list(manager.list_blobs()):
            if info.deleted_at_ms is None and info.expires_at_ms is None and not info.blob_id.startswith(
                    "checkpoints/"):
                manager.delete(info.blob_id, Metadata(payload_path=info.blob_id))
                marked += 1
    finally:
        manager.close()
    return marked


def _stream_dir(job: _Job, name: str) -> Path:
    """A local directory holding Delta stream or table ``name``: the stream itself, or a fresh copy of its
    blobs when the streams live on Azurite (every reader then reads the very bytes sparza wrote)."""
    if job.s.delta_location == "local":
        return job.root / "streams" / name
    copy = job.root / "az-copy" / name
    shutil.rmtree(copy, ignore_errors=True)
    download_prefix(job.azurite.connection_string, job.delta_container, f"streams/{name}/", copy)
    return copy


def _routed_late(job: _Job) -> Counter[int]:
    return Counter(int(json.loads(v)["id"]) for v in read_delta_values(_stream_dir(job, "late")))


def _check(job: _Job, outcome: Outcome, *, upto: int | None = None) -> None:
    """Compare the outputs with the oracle: of the whole input, or (``upto``, a drain scenario after a phase) of
    the chunks up to that phase, which the phase's drain must have brought out completely."""
    s = job.s if upto is None else dataclasses.replace(job.s, messages=[m for m in job.s.messages if m.chunk <= upto])
    problems = outcome.problems if upto is None else []
    _compare_outputs(job, s, outcome, problems)
    if upto is not None:
        outcome.problems.extend(f"after the drain of phase {upto}: {p}" for p in problems)


def _compare_outputs(job: _Job, s: Scenario, outcome: Outcome, problems: list[str]) -> None:
    routed = _routed_late(job)
    if s.output == "delta":
        actual = read_delta_records(_stream_dir(job, "out"))
    elif s.output.startswith("table-"):
        readers = read_table_rows(_stream_dir(job, "out"))
        actual = readers["deltalake"]
        for name, rows in readers.items():
            if rows != actual:
                problems.append(f"table readers disagree: {name} read {sum(rows.values())} rows, deltalake "
                                f"{sum(actual.values())}")
        outcome.notes.append(f"table read by {', '.join(sorted(readers))}")
    elif s.output == "kafka":
        actual, control = read_kafka_records(job.kafka.bootstrap_servers, job.output_stream.split(".", 1)[1])
        if control:
            problems.append(f"{control} control records in the output topic (only intermediate streams "
                            f"carry watermarks and end-of-stream)")
    else:
        actual, names = read_blob_records(job.azurite.connection_string, job.output_container, "out/")
        outcome.notes.append(f"{len(names)} blobs")
    if routed:
        repeated = [i for i, n in routed.items() if n > 1]
        if repeated:
            problems.append(f"{len(repeated)} late messages routed more than once (e.g. ids {repeated[:5]})")
        if s.kind not in EVENT_TIME_KINDS:
            problems.append(f"{sum(routed.values())} messages routed as late by a job without a window "
                            f"(e.g. ids {sorted(routed)[:5]}): only event-time operators may call data late")
        elif not s.late:
            problems.append(f"{len(routed)} messages routed as late although the lateness spans all event "
                            f"times (e.g. ids {sorted(routed)[:5]})")
    excluded = routed if s.kind in EVENT_TIME_KINDS else Counter()
    actual, pane_problems = reduce_panes(s, actual, upserted=s.output == "table-upsert")
    problems.extend(pane_problems)
    expected = (expected_table_rows(s, excluded_ids=excluded) if s.output.startswith("table-")
                else expected_records(s, excluded_ids=excluded))
    comparison = compare(expected, actual)
    if problems is outcome.problems:
        outcome.comparison = comparison
    if not comparison.ok:
        problems.append("output: " + comparison.summary())


def run_scenario(scenario: Scenario, azurite: Any, workdir: Path, *, messages_override: int | None = None,
                 fault_override: str | None = None, kafka: Any = None, output_override: str | None = None,
                 input_override: str | None = None, task_api_override: str | None = None,
                 extras: bool = True, drain: bool = True) -> Outcome:
    """Run ``scenario`` in ``workdir`` against ``azurite`` (and ``kafka``, a Tansu broker, started here
    when the scenario uses Kafka and none is given): every phase, its fault, a final run, the check."""
    started = time.monotonic()
    outcome = Outcome(scenario, workdir=workdir, messages_override=messages_override, fault_override=fault_override,
                      output_override=output_override, input_override=input_override,
                      task_api_override=task_api_override, extras=extras, drain=drain)
    workdir.mkdir(parents=True, exist_ok=True)
    own_kafka = None
    if kafka is None and scenario.uses_kafka:
        own_kafka = kafka = _start_kafka(workdir)
    job = _Job(scenario, workdir, azurite, kafka)
    try:
        job.create_streams()
        for phase in range(scenario.chunks):
            job.append_chunk(phase)
            faults = [f for f, at in ((scenario.fault, scenario.fault_phase), (scenario.fault2, scenario.fault2_phase))
                      if at == phase and f != "none"]
            _apply_phase(job, outcome, faults[0] if faults else "none", phase)
            for second in faults[1:]:   # the generator makes a second fault in the same phase an after-run one
                _damage(job, outcome, second, f"phase{phase}-second")
            if scenario.drain != "none" and phase < scenario.chunks - 1:
                _check(job, outcome, upto=phase)   # the phase's drain brought out everything appended so far
        if scenario.fault in _AFTER_RUN_FAULTS or scenario.fault2 in _AFTER_RUN_FAULTS:
            # The damage was done after the last run: one more run must repair it.
            _expect_clean(outcome, job.run("final"))
        _check(job, outcome)
    except _SparkStartFailure as exc:
        outcome.inconclusive = True
        outcome.notes.append(f"inconclusive: {exc}")
    except Exception as exc:  # a harness error is a failed scenario too, reported with its seed
        outcome.problems.append(f"harness error: {type(exc).__name__}: {exc}")
    finally:
        outcome.runs = job.runs
        outcome.notes.extend(job.notes)
        outcome.problems.extend(job.purge_problems)
        outcome.seconds = time.monotonic() - started
        if not azurite.is_running():
            azurite.start()
        if own_kafka is not None:
            own_kafka.stop()
    return outcome


def _start_azurite(base: Path) -> Any:
    from sparza.devservers.storage import AzuriteProcess

    proc = AzuriteProcess(base / "azurite")
    proc.start()
    return proc


def _start_kafka(base: Path) -> Any:
    from sparza.devservers.kafka import TansuProcess

    proc = TansuProcess(base / "tansu")
    proc.start()
    return proc


def soak(minutes: float, base: Path, *, seeds: list[int] | None = None, keep: bool = False) -> list[Outcome]:
    """Run random seeds (or ``seeds``) until ``minutes`` have passed; print each result as it comes,
    every failing seed's command, and the final count."""
    azurite = _start_azurite(base)
    kafka = _start_kafka(base)
    deadline = time.monotonic() + minutes * 60
    outcomes: list[Outcome] = []
    rng = random.Random()
    queue = list(seeds or [])
    try:
        while time.monotonic() < deadline:
            seed = queue.pop(0) if queue else rng.randrange(1, 10**9)
            workdir = base / f"seed-{seed}"
            scenario = generate(seed)
            print(f"start {scenario.describe()}", flush=True)
            outcome = run_scenario(scenario, azurite, workdir, kafka=kafka)
            outcomes.append(outcome)
            print(outcome.report(), flush=True)
            recent = outcomes[-3:]
            if len(recent) == 3 and all(any(p.startswith("harness error") for p in o.problems) and o.seconds < 30
                                        for o in recent):
                # Three scenarios in a row died at once in the harness itself: the environment is
                # broken (a venv being reinstalled, a full disk), and going on would only count noise.
                print("soak: stopped: three scenarios in a row failed at once with a harness error; fix the "
                      "environment and run again", flush=True)
                break
            if outcome.ok and not keep:
                shutil.rmtree(workdir, ignore_errors=True)
            if seeds is not None and not queue:
                break
    finally:
        azurite.stop()
        kafka.stop()
    failed = [o for o in outcomes if not o.ok and not o.inconclusive]
    unsure = sum(1 for o in outcomes if o.inconclusive)
    passed = len(outcomes) - len(failed) - unsure
    print(f"\nsoak: {len(outcomes)} scenarios, {passed} passed, {len(failed)} failed, {unsure} inconclusive "
          f"(Spark could not start Python workers)", flush=True)
    for o in failed:
        print("  " + reproduce_command(o.scenario.seed), flush=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    """Command line: one seed, or a soak."""
    parser = argparse.ArgumentParser(prog="python -m sparza.testing.harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this scenario")
    parser.add_argument("--messages", type=int, help="override the scenario's message count")
    parser.add_argument("--fault", choices=FAULTS + EXTRA_FAULTS, help="override the scenario's fault")
    parser.add_argument("--extras", choices=("drawn", "none"), default="drawn",
                        help="none: leave out the dimensions added after the first soaks (Kafka/Delta intermediate "
                             "streams, Delta on az://, several processors, purged snapshots, a Kafka broker "
                             "restart, a second fault): the scenario as generated before them")
    parser.add_argument("--drain", choices=("drawn", "none"), default="drawn",
                        help="none: leave out the drain dimension (scenario.DRAIN_SALT): a seed as recorded before it")
    parser.add_argument("--output", choices=OUTPUTS, help="override the scenario's output kind")
    parser.add_argument("--input", choices=INPUTS, help="override the scenario's input kind")
    parser.add_argument("--task-api", choices=TASK_APIS, help="override a task job's API (process or process_batch)")
    parser.add_argument("--soak", type=float, metavar="MINUTES", help="run random seeds for this long")
    parser.add_argument("--seeds", help="with --soak: run these comma-separated seeds (in order) instead")
    parser.add_argument("--scale", action="store_true", help="run the scale scenario (100k messages) instead")
    parser.add_argument("--print", action="store_true", help="only describe the scenario")
    parser.add_argument("--workdir", help="where runs keep their files (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the files of passing scenarios too")
    args = parser.parse_args(argv)
    base = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="sparza-harness-"))
    if args.soak is not None:
        listed = [int(x) for x in args.seeds.split(",")] if args.seeds else None
        outcomes = soak(args.soak, base, seeds=listed, keep=args.keep)
        return 0 if all(o.ok for o in outcomes) else 1
    if args.scale:
        scenario = scale_scenario(**({"messages": args.messages} if args.messages else {}))
    elif args.seed is None:
        parser.error("give --seed N, --scale or --soak MINUTES")
    else:
        try:
            scenario = generate(args.seed, messages=args.messages, fault=args.fault, output=args.output,
                                input=args.input, task_api=args.task_api, extras=args.extras == "drawn",
                                drain=args.drain == "drawn")
        except ValueError as exc:
            parser.error(str(exc))
    print(scenario.describe(), flush=True)
    if args.print:
        return 0
    azurite = _start_azurite(base)
    try:
        outcome = run_scenario(scenario, azurite, base / f"seed-{scenario.seed}", messages_override=args.messages,
                               fault_override=args.fault, output_override=args.output, input_override=args.input,
                               task_api_override=args.task_api, extras=args.extras == "drawn",
                               drain=args.drain == "drawn")
    finally:
        azurite.stop()
    print(outcome.report())
    print(f"files: {base}")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
