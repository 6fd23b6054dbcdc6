"""The Spark engine of the fault harness: run a generated scenario through ``sparza run`` subprocesses
(Delta, Kafka, Azure blobs and typed tables for real), inject its fault, and compare the outputs exactly
with the oracle.

It starts its own Azurite unless it is given one (:func:`run_spark_scenario` takes an
:class:`~sparza.devservers.storage.AzuriteProcess`), and, for scenarios with a Kafka input or output, its own Apache
Kafka broker unless it is given one (``kafka=``, a :class:`~sparza.devservers.kafka.KafkaBroker`; a soak starts one
for all its scenarios). What only this engine shows: Spark's worker reuse and retries, real storage services,
restarts of Azurite and Kafka, several processors under the azure coordinator, ``kill -9`` of real processes.
A drain scenario ends every phase with ``sparza run --drain`` or with ``sparza drain`` sent while ``sparza run``
runs (after its first batch and a drawn delay), and its output is checked after every phase's drain.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from sparza.testing.faults import fault_keys
from sparza.testing.harness.check import judge
from sparza.testing.harness.damage import (
    SavedBlob,
    names_purged,
    purge_committed_snapshots,
    restore_local_blob,
    save_local_blob,
    tombstone_committed_snapshots,
)
from sparza.testing.harness.dayops import (
    day_two_operation,
    day_two_operation_after_purge,
    grow_input,
    growth_refusal_problem,
)
from sparza.testing.harness.jobconfig import job_config, profile_partition
from sparza.testing.harness.outcome import Outcome, RunRecord
from sparza.testing.harness.phases import plan_phase, run_phase
from sparza.testing.jobs import RECORD_SCHEMA
from sparza.testing.oracle import (
    download_prefix,
    missing_table_readers,
    read_blob_records,
    read_delta_records,
    read_delta_values,
    read_kafka_records,
    read_table_rows,
)
from sparza.testing.scenario import AFTER_RUN_FAULTS, DAYOPS_FAULTS, Scenario

__all__ = ["COORDINATION", "RUN_TIMEOUT_S", "SRC_DIR", "SparkJob", "check", "log_tail",
           "run_spark_scenario", "start_azurite", "start_kafka"]

RUN_TIMEOUT_S = 600.0
"""Longest a single ``sparza run`` may take before the harness calls it hung."""

SRC_DIR = Path(__file__).resolve().parents[3]
"""The directory holding the ``sparza`` package: first on the ``PYTHONPATH`` of the ``sparza run`` subprocesses."""

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


class SparkJob:
    """One scenario's job under ``sparza run``: its files, config, streams and processes."""

    def __init__(self, scenario: Scenario, root: Path, azurite: Any, kafka: Any = None) -> None:
        self.s = scenario
        self.root = root
        self.azurite = azurite
        self.kafka = kafka
        self.nonce = uuid.uuid4().hex[:10]
        if scenario.uses_kafka and kafka is None:
            raise ValueError("a scenario with Kafka streams needs a broker (kafka=KafkaBroker)")
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
        v = job_config(s, input_stream=self.input_stream, output_stream=self.output_stream)
        v.update({
            "job.id": self.nonce,
            "job.logged.store.base.dir": root / "state",
            "systems.delta.samza.factory": "delta",
            "systems.delta.samza.offset.default": "oldest",
            "systems.delta.delta.root": self.delta_root,
            "azure.storage.connect": self.azurite.connection_string,
            "metrics.reporter.jsonl.path": root / "metrics.jsonl",
        })
        if s.uses_kafka:
            v["systems.kafka.samza.factory"] = "kafka"
            v["systems.kafka.consumer.bootstrap.servers"] = self.kafka.bootstrap_servers
            v["systems.kafka.samza.offset.default"] = "oldest"
        if s.processors > 1:
            v.update(COORDINATION)
        if s.blob_store == "local":
            v["blob.store.manager.factory"] = "local"
            v["blob.store.local.root"] = root / "blobstore"
        else:
            v["blob.store.manager.factory"] = "azure"
            v["blob.store.azure.container"] = self.state_container
        if s.output == "blob":
            c = self.output_container
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

            # No time retention: the records' timestamps are the scenarios' event times (from 2023), which a
            # topic's retention.ms counts from; the broker would delete them before the job read them.
            kafka_admin = KafkaSystemAdmin("kafka", config)
            kept = {"retention.ms": "-1"}
            if self.s.input == "kafka":
                kafka_admin.create_stream(StreamSpec(self.input_stream.split(".", 1)[1], self.s.partitions,
                                                     properties=kept))
            if self.s.output == "kafka":
                kafka_admin.create_stream(StreamSpec(self.output_stream.split(".", 1)[1], 2, properties=kept))
        if self.s.join != "none":
            admin.create_stream(StreamSpec("profiles", 1 if self.s.join == "broadcast" else self.s.stage2_partitions))
            producer = DeltaSystemProducer("delta", config)
            producer.register("harness")
            stream = SystemStream("delta", "profiles")
            for p in self.s.profiles:
                partition = profile_partition(p, self.s)
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
        """One Kafka transaction per chunk, with confluent-kafka directly: the records become visible at once."""
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
    def spawn(self, label: str, config_path: Path | None = None, *extra: str,
              master: str = "local[2]") -> tuple[subprocess.Popen[bytes], Path, float]:
        """Start ``sparza run`` for this job (its own process group, output to a log file) on ``master``."""
        self.spawned += 1      # not len(self.runs): the processors of a group are recorded only when they end
        log = self.logs / f"{self.spawned:02d}-{label}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(SRC_DIR), env.get("PYTHONPATH", "")] if p)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        cmd = [sys.executable, "-m", "sparza.cli", "run", "--config", str(config_path or self.config_path),
               "--master", master, *extra]
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

    def run(self, label: str, config_path: Path | None = None, *extra: str, meant_to_fail: bool = False) -> RunRecord:
        """One run to completion: ``--once`` for unbounded inputs; bounded ones end by themselves. A failed run
        after the purged-snapshot fault must name what is gone, unless it is ``meant_to_fail`` (a poison message)."""
        once = self.once_args()
        record = self._run_group(label, config_path, *once, *extra)
        if self.purged and record.returncode not in (0, None):
            text = log_tail(record.log, 6)
            named = names_purged(text)
            if named or not meant_to_fail:
                record = self._restore_purged(label, record, text, named, config_path, *once, *extra)
        return record

    def _restore_purged(self, label: str, failed: RunRecord, text: str, named: bool, config_path: Path | None,
                        *args: str) -> RunRecord:
        """A run failed after the purged-snapshot fault: it must say what is gone. Bring the blobs back and
        run again."""
        self.notes.append(f"purged-snapshot: run '{label}' failed (exit {failed.returncode})"
                          + ("" if named else " WITHOUT naming the purged snapshot")
                          + f"; {len(self.purged)} blobs brought back")
        if not named:
            self.purge_problems.append(f"run '{label}' after committed snapshots were purged failed without saying "
                                       f"so: {text}")
        self.bring_back_purged()
        return self._run_group(f"{label}-after-restoring-blobs", config_path, *args)

    def bring_back_purged(self) -> None:
        """Put the blobs the purged-snapshot fault took away back (as an operator would, from a backup)."""
        for blob_id, saved in self.purged.items():
            _restore_blob(self, blob_id, saved)
        self.purged = {}

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
        # After its first batch, or, when it has nothing new to process (no batch comes), soon after its start: a run
        # whose every task's checkpoint is at the end of its inputs is not waited for (30 s, the first batch's wait,
        # was most of a drain scenario's time when a fault's run had processed everything).
        if _wait_for_line(handle, KILL9_START_TIMEOUT_S, lambda line: line.startswith("sparza: job ")):
            if self.messages_waiting() != 0:
                _wait_for_first_batch(handle, 30.0)
            else:
                self.notes.append(f"run '{label}': no message waited at its start; drain requested without a batch")
        deadline = time.monotonic() + self.s.drain_delay_s
        while time.monotonic() < deadline and handle[0].poll() is None:
            time.sleep(0.05)
        if handle[0].poll() is None:
            self._drain_command(label, config_path)
        record = self.wait(label, handle)
        if record.returncode == 0 and self._drain_command(f"{label}-cleanup", config_path, "--cancel") == 0:
            self.notes.append(f"run '{label}' had drained before its drain request: the request was withdrawn")
        return record

    def messages_waiting(self) -> int | None:
        """How many messages lie past the task checkpoints in the input partitions of every stage of the job, read
        from storage without touching it (None when that cannot be told: an input partition no checkpoint reads
        yet, a system that cannot count, storage unreachable)."""
        from sparza.config import Config
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.inputs import InputSystems
        from sparza.engine.jobconfig import JobConfig
        from sparza.streams import SystemStreamPartition

        config = Config(self.config)
        if self.s.api == "task":
            stages = [config]
        else:
            from sparza.api import plan_application

            stages = [stage.config for stage in plan_application(config).stages]
        total = 0
        try:
            for stage in stages:
                job = JobConfig.from_config(stage)
                checkpoints = checkpoint_store_from_config(stage, job.job_key).read_all()
                inputs = InputSystems(job)
                try:
                    positions = inputs.positions()
                    read = {ssp: False for ssp in positions}
                    for checkpoint in checkpoints.values():
                        for key, offset in checkpoint.offsets.items():
                            ssp = SystemStreamPartition.parse(key)
                            if ssp not in positions:
                                continue
                            read[ssp] = True
                            n = inputs.ops[ssp.system].count_between(ssp, offset, positions[ssp].upcoming)
                            if n is None:
                                return None
                            total += int(n)
                    if not all(read.values()):
                        return None
                finally:
                    inputs.close()
        except Exception:
            return None
        return total

    def _drain_command(self, label: str, config_path: Path | None, *extra: str) -> int:
        """``sparza drain`` for this job (output appended to the logs); its exit code."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(SRC_DIR), env.get("PYTHONPATH", "")] if p)
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


def log_tail(log: Path | None, lines: int = 3) -> str:
    """The last meaningful lines of a run's log (no Spark/JVM warnings, no stack frames)."""
    if log is None:
        return ""
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
    mode, ``batch N (C container(s): ...)`` status line); False when the run ended or ``timeout`` passed first."""
    return _wait_for_line(handle, timeout,
                          lambda line: line.startswith("batch ") and ("(spark " in line or " container(s): " in line))


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
        outcome.problems.append(f"run '{record.label}' {what}: {log_tail(record.log)}")


def _spark_dirs(state: Path) -> list[Path]:
    return [p.parent for p in state.glob("_spark/**/commits")] if state.exists() else []


def _apply_phase(job: SparkJob, outcome: Outcome, fault: str, phase: int) -> None:
    """Run one phase with ``fault`` (``none``: a clean run)."""
    s = job.s
    label, fault, poison = plan_phase(s, phase, fault, outcome)
    if poison is not None:  # the poison fault
        record = job.run(f"{label}-poison", job.variant("poison.yaml", **{"app.harness.poison.ids": str(poison)}),
                         meant_to_fail=True)
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
        path = job.variant("fail-once.yaml", **fault_keys(marker, s.fail_step))
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
    elif fault == "container-kill":
        _container_kill(job, outcome, label)
    elif fault == "container-retry":
        _container_retry(job, outcome, label)
    elif fault == "executor-loss":
        _executor_loss(job, outcome, label)
    else:
        _expect_clean(outcome, job.run(label))
        _damage(job, outcome, fault, label)


RESTART_NOTICES = (" was lost (", " it alone starts again from its last commit")
"""What the status line says when a container is lost (its tasks move) or a task's batch failed and the task alone
starts again (:mod:`sparza.runtime.driver.containers`)."""


def _container_kill(job: SparkJob, outcome: Outcome, label: str) -> None:
    """``kill -9`` of one Spark Python worker that runs a container, while ``sparza run`` runs (0-1.5 s after the
    first committed batch). The container is lost, its tasks move to the others (a new container starts), and the
    very same run must finish by itself (exit 0); whether the driver said so is noted (a container whose tasks were
    all done may have returned already)."""
    s = job.s
    handle = job.spawn(f"{label}-container-kill", None, *job.once_args())
    started = _wait_for_first_batch(handle, KILL9_START_TIMEOUT_S)
    delay = round((s.fault_delay_s - 3.0) / 17.0 * 1.5, 2)
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and handle[0].poll() is None:
        time.sleep(0.05)
    victim: int | None = None
    deadline = time.monotonic() + 10.0          # the first containers may still be starting
    while victim is None and time.monotonic() < deadline and handle[0].poll() is None:
        workers = container_workers(handle[0].pid)
        if workers:
            victim = random.Random(s.seed).choice(workers)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        else:
            time.sleep(0.05)
    record = job.wait(f"{label}-container-kill", handle)
    if victim is None:
        outcome.notes.append("container-kill: no container was running " + (
            f"{delay}s after the first committed batch (the run had ended)" if started else "(no batch committed)"))
    else:
        restarts = _restart_lines(record.log)
        outcome.notes.append(f"container-kill: killed worker {victim} {delay}s after the first committed batch; "
                             + (f"the driver said: {restarts[0]}" if restarts else "no container was lost"))
    _expect_survived(job, outcome, record, label)


EXECUTOR_LOSS_WORKERS = 3
"""Workers of the ``executor-loss`` fault's cluster: two run containers (``spark.cores.max: 2``), one is spare."""


def _executor_loss(job: SparkJob, outcome: Outcome, label: str) -> None:
    """A host lost under load (issue 40): the phase's run goes to a standalone cluster of three one-core workers (each
    its own state dir when the stores are backed up to the blob store; one shared dir, as a shared disk, when not)
    while two processes burn CPU beside it; 0-3 s after its first committed batch the worker of one container is
    SIGKILLed with its executor and Python workers, and the spare worker takes its place. In half the seeds the
    kill is followed by a second one at an assignment boundary (:func:`_kill_at_a_move`: as the first task moves
    onto a new container) and the first worker joins again. The very same run must finish by itself with the exact
    output (the lost tasks move; a stall is reported by the run and fails it)."""
    from sparza.devservers.sparkcluster import StandaloneCluster

    s = job.s
    rng = random.Random(s.seed ^ 0xE7EC)
    boundary = random.Random(s.seed ^ 0xB0DA).random() < 0.5  # drawn apart: the draws above stay what they were
    overrides = {"job.filesystem.shared": "true", "spark.cores.max": "2", "spark.executor.memory": "512m",
                 "spark.task.maxFailures": "2", "job.spark.checkpoint.dir": str(job.root / "spark-executor-loss")}
    if s.backup:
        overrides["job.logged.store.base.dir"] = "${SPARZA_EXECUTOR_STATE}"
    path = job.variant("executor-loss.yaml", **overrides)
    burners: list[subprocess.Popen[bytes]] = []
    try:
        with StandaloneCluster(job.root / "cluster", workers=EXECUTOR_LOSS_WORKERS, python=sys.executable,
                               env={"PYTHONPATH": str(SRC_DIR)}) as cluster:
            # The load comes once the cluster is up: the fault is a host lost under load, not a slow start.
            burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
                       for _ in range(2)]
            handle = job.spawn(f"{label}-executor-loss", path, *job.once_args(), master=cluster.url)
            started = _wait_for_first_batch(handle, KILL9_START_TIMEOUT_S)
            delay = round(rng.uniform(0.0, 3.0), 2)
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline and handle[0].poll() is None:
                time.sleep(0.05)
            busy = [w for w in cluster.running_workers() if _runs_executor(cluster, w)]
            if handle[0].poll() is None and busy:
                victim = rng.choice(busy)
                cluster.kill_worker(victim)
                outcome.notes.append(f"executor-loss: worker {victim} killed {delay}s after the first committed batch"
                                     + ("" if started else " (no batch had committed)") + " beside CPU load")
                if boundary:
                    _kill_at_a_move(job, outcome, cluster, handle, victim)
            else:
                outcome.notes.append("executor-loss: the run had ended (or no worker ran an executor) "
                                     f"{delay}s after its first committed batch; nothing killed")
            record = job.wait(f"{label}-executor-loss", handle)
        restarts = _restart_lines(record.log)
        if restarts:
            outcome.notes.append(f"executor-loss: the driver said: {restarts[0]}")
        _expect_survived(job, outcome, record, label)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


MOVE_WAIT_S = 60.0
"""How long the boundary variant of ``executor-loss`` waits for the first task to move onto the spare's container."""


def _kill_at_a_move(job: SparkJob, outcome: Outcome, cluster: Any,
                    handle: tuple[subprocess.Popen[bytes], Path, float], victim: int) -> None:
    """The boundary variant of ``executor-loss``: once the status line says a task moves onto the spare worker's new
    container (revoked where it ran, not yet running there: an assignment boundary), that worker is killed too, and
    the first one started again (a replacement joining, with its old state dir)."""
    if not _wait_for_line(handle, MOVE_WAIT_S, lambda line: "rebalanced onto a new container" in line):
        outcome.notes.append(f"executor-loss: no task moved onto a new container within {MOVE_WAIT_S:.0f}s (the run "
                             "had ended, or the spare took no task); no second kill")
        return
    running = [w for w in cluster.running_workers() if _runs_executor(cluster, w) and w != victim]
    if not running:
        return
    second = max(running)  # the task's old or new container: both sides of the move are at its boundary
    cluster.kill_worker(second)
    with contextlib.suppress(Exception):  # the master may count the killed ones alive for a while
        cluster.start_worker(victim, timeout_s=30.0)
    outcome.notes.append(f"executor-loss: worker {second} killed as a task moved onto a new container (an assignment "
                         f"boundary); worker {victim} started again as the replacement")


def _runs_executor(cluster: Any, worker: int) -> bool:
    """True when worker ``worker`` of ``cluster`` has a running executor (a Java process below it)."""
    pid = cluster.workers[worker].pid
    return pid is not None and bool(descendants(pid))


def _container_retry(job: SparkJob, outcome: Outcome, label: str) -> None:
    """One injected failure inside a container, at the scenario's commit step after ``fail_after`` of the task's
    commits in that container (``task.testing.fail.once.*``): the task alone starts again from its last commit, and
    the very same run must finish by itself (exit 0) and say that the task started again."""
    s = job.s
    marker = job.root / "container-retry.marker"
    path = job.variant("container-retry.yaml", **fault_keys(marker, s.fail_step, s.fail_after))
    record = job.run(f"{label}-container-retry", path)
    restarts = _restart_lines(record.log)
    if not marker.exists():
        outcome.notes.append(f"container-retry at {s.fail_step} after {s.fail_after} commits: did not fire (no task "
                             f"made that many commits in one container)")
    elif restarts:
        outcome.notes.append(f"container-retry at {s.fail_step} after {s.fail_after} commits: fired; the driver "
                             f"said: {restarts[0]}")
    elif record.returncode == 0:
        outcome.problems.append(f"container-retry: the injected failure at {s.fail_step} fired, yet the run said "
                                f"nothing of the task starting again ('...{RESTART_NOTICES[1]}')")
    _expect_survived(job, outcome, record, label)


def _expect_survived(job: SparkJob, outcome: Outcome, record: RunRecord, label: str) -> None:
    """The run hit by a container fault must have finished by itself; when it did not, that is a problem, and one
    more run (as a user would start) must bring the output to exact for the check."""
    _expect_clean(outcome, record)
    if record.returncode != 0:
        _expect_clean(outcome, job.run(f"{label}-again"))


def _restart_lines(log: Path | None) -> list[str]:
    """The run's status lines of containers lost and tasks started again."""
    if log is None:
        return []
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [line.strip()[:300] for line in text.splitlines() if any(n in line for n in RESTART_NOTICES)]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), whatever their process group: PySpark's
    Python workers run in a group of their own. Read from ``/proc`` (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    below: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        below.append(child)
        todo.extend(children.get(child, []))
    return below


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything below it at once, as a host that dies: ``os.killpg`` of a ``sparza run``
    leaves PySpark's Python workers (their own process group) running until their daemon notices the JVM gone."""
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)


def container_workers(driver_pid: int) -> list[int]:
    """The Spark Python workers running a container of the ``sparza run`` whose process is ``driver_pid``: the
    processes under it (its JVM's Python workers) with a TCP connection to a port the driver listens on (the
    container channel, :mod:`sparza.runtime.channel`; every other connection of a worker goes to the JVM). The JVM
    itself is left out: it connects to the driver too (PySpark's accumulator server). Read from ``/proc`` (Linux)."""
    below = [pid for pid in descendants(driver_pid) if not _is_jvm(pid)]
    table = _tcp_table()
    listening = {_port(local) for inode in _socket_inodes(driver_pid)
                 for local, _remote, state in table.get(inode, []) if state == "0A"}
    return sorted(pid for pid in below if any(
        state == "01" and _port(remote) in listening
        for inode in _socket_inodes(pid) for _local, remote, state in table.get(inode, [])))


def _is_jvm(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


def _port(address: str) -> str:
    return address.rsplit(":", 1)[1]


def _socket_inodes(pid: int) -> set[str]:
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    found.add(target[8:-1])
    return found


def _tcp_table() -> dict[str, list[tuple[str, str, str]]]:
    """Socket inode → (local address, remote address, state) of every TCP socket (``/proc/net/tcp``, ``tcp6``)."""
    table: dict[str, list[tuple[str, str, str]]] = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(name).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9:
                    table.setdefault(fields[9], []).append((fields[1], fields[2], fields[3]))
    return table


def _damage(job: SparkJob, outcome: Outcome, fault: str, label: str) -> None:
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
        marked = tombstone_committed_snapshots(job.config)
        shutil.rmtree(state, ignore_errors=True)        # and a new host: restore must use them
        outcome.notes.append(f"deleted-snapshot: marked {marked} committed snapshot blobs deleted")
    elif fault == "partition-growth":
        _grow_input(job, outcome, label)
    elif fault in DAYOPS_FAULTS:
        if job.purged:  # right after the purged-snapshot fault: the savepoint must be refused saying what is gone
            note, problem = day_two_operation_after_purge(fault, job.config, label, set(job.purged),
                                                          job.bring_back_purged)
            outcome.notes.append(note)
            outcome.problems.extend([problem] if problem else [])
        else:
            outcome.notes.append(day_two_operation(fault, job.config, label))
    elif fault != "none":
        raise ValueError(f"unknown fault {fault!r}")


def _grow_input(job: SparkJob, outcome: Outcome, label: str) -> None:
    """``partition-growth``: the input (a Delta stream or a Kafka topic) gains partitions through its admin, as
    ``sparza stream grow`` does; when the job's policy stops it, the next ``sparza run`` must fail naming the stream,
    and the operator then sets ``grow_then`` in the job's config."""
    s = job.s
    before = grow_input(job.config, job.input_stream, s.grow_to)
    note = (f"partition-growth: {job.input_stream} {before} -> {s.grow_to} partitions under "
            f"job.partition.expansion: {s.grow_policy}")
    if s.grow_then:
        record = job.run(f"{label}-after-growth", meant_to_fail=True)
        text = record.log.read_text(errors="replace") if record.log is not None else ""
        problem = growth_refusal_problem(text or "(no log)" if record.returncode != 0 else None, job.input_stream,
                                         s.partitions, s.grow_to)
        if problem:
            outcome.problems.append(problem)
        job.config["job.partition.expansion"] = s.grow_then
        job.config_path = job._write("job.yaml", job.config)
        note += f"; the run after it stopped naming the stream, then {s.grow_then} was set"
    outcome.notes.append(note)


def _kafka_restart(job: SparkJob, outcome: Outcome, label: str, phase: int) -> None:
    """The Kafka broker crashes mid-run (``kill -9``, after the run's first committed batch) and comes back on the
    same ports with its log dir: topics, records, open transactions and group offsets are what the broker's log
    recovery makes of them. The run in flight may fail (nothing may be half-written or skipped); a run after it
    must end with the exact output."""
    handle = job.spawn(f"{label}-kafka-restart", None, *job.once_args())
    started = _wait_for_first_batch(handle, KILL9_START_TIMEOUT_S)
    job.kafka.kill()
    job.kafka.start()
    record = job.wait(f"{label}-kafka-restart", handle)
    when = "after the first committed batch" if started else "at once"
    outcome.notes.append(f"kafka-restart: broker killed and restarted {when}; the run in flight exited "
                         f"{record.returncode}")
    _expect_clean(outcome, job.run(f"{label}-after-kafka-restart"))


def _purged_snapshots(job: SparkJob, outcome: Outcome, label: str) -> None:
    """Committed snapshot blobs *purged* (gone, not tombstoned: an operator's cleanup, a lifecycle rule) and
    the local state lost with them. The next run that needs the state must not go on silently with empty
    stores: it either fails, saying what is gone, or rebuilds the state itself (an adjunct store from its
    stream); the final output check decides which. After such a failure the harness brings the blobs back
    (:meth:`SparkJob.run`), as the error tells the user to (from a backup of the blob store), and the job must
    then finish exactly."""
    saved = purge_committed_snapshots(job.config, lambda blob_id: _save_blob(job, blob_id))
    shutil.rmtree(job.root / "state", ignore_errors=True)
    job.purged = saved
    outcome.notes.append(f"purged-snapshot: purged {len(saved)} committed snapshot blobs and the local state")


def _save_blob(job: SparkJob, blob_id: str) -> SavedBlob:
    """A blob's bytes, metadata and tags, read with the storage's own client (local files or the Azure SDK)."""
    if job.s.blob_store == "local":
        return save_local_blob(job.root / "blobstore", blob_id)
    from azure.storage.blob import BlobServiceClient

    blob = BlobServiceClient.from_connection_string(job.azurite.connection_string).get_blob_client(
        job.state_container, blob_id)
    props = blob.get_blob_properties()
    return blob.download_blob().readall(), dict(props.metadata or {}), dict(blob.get_blob_tags() or {})


def _restore_blob(job: SparkJob, blob_id: str, saved: SavedBlob) -> None:
    if job.s.blob_store == "local":
        restore_local_blob(job.root / "blobstore", blob_id, saved)
        return
    from azure.storage.blob import BlobServiceClient

    data, metadata, tags = saved
    blob = BlobServiceClient.from_connection_string(job.azurite.connection_string).get_blob_client(
        job.state_container, blob_id)
    blob.upload_blob(data, overwrite=True, metadata=metadata, tags=tags or None)


def _stream_dir(job: SparkJob, name: str) -> Path:
    """A local directory holding Delta stream or table ``name``: the stream itself, or a fresh copy of its
    blobs when the streams live on Azurite (every reader then reads the very bytes sparza wrote)."""
    if job.s.delta_location == "local":
        return job.root / "streams" / name
    copy = job.root / "az-copy" / name
    shutil.rmtree(copy, ignore_errors=True)
    download_prefix(job.azurite.connection_string, job.delta_container, f"streams/{name}/", copy)
    return copy


def _routed_late(job: SparkJob) -> Counter[int]:
    return Counter(int(json.loads(v)["id"]) for v in read_delta_values(_stream_dir(job, "late")))


def check(job: SparkJob, outcome: Outcome, *, upto: int | None = None) -> None:
    """Read what the job wrote (with deltalake, DuckDB, Polars, the Azure SDK, fastavro or confluent-kafka,
    never with sparza) and judge it against the oracle: of the whole input, or (``upto``, a drain scenario
    after a phase) of the chunks up to that phase, which the phase's drain must have brought out completely."""
    s = job.s
    problems: list[str] = []  # the readers' own (judge prefixes them, and its own, for a drain phase)
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
        if upto is None:
            outcome.notes.append(f"table read by {', '.join(sorted(readers))}")
            missing = missing_table_readers()
            if missing:
                outcome.notes.append(f"table not read by {', '.join(missing)}: not installed here "
                                     "(pip install 'sparza[dev]')")
    elif s.output == "kafka":
        read = read_kafka_records(job.kafka.bootstrap_servers, job.output_stream.split(".", 1)[1])
        actual = read.records
        if read.control:
            problems.append(f"{read.control} control records in the output topic (only intermediate streams "
                            f"carry watermarks and end-of-stream)")
    else:
        actual, names = read_blob_records(job.azurite.connection_string, job.output_container, "out/")
        if upto is None:
            outcome.notes.append(f"{len(names)} blobs")
    judge(outcome, actual, routed, upto=upto, reader_problems=problems)


def run_spark_scenario(scenario: Scenario, azurite: Any, workdir: Path, *, messages_override: int | None = None,
                 fault_override: str | None = None, kafka: Any = None, output_override: str | None = None,
                 input_override: str | None = None, task_api_override: str | None = None,
                 extras: bool = True, drain: bool = True, execution: bool = True) -> Outcome:
    """Run ``scenario`` in ``workdir`` against ``azurite`` (and ``kafka``, a Kafka broker, started here
    when the scenario uses Kafka and none is given): every phase, its fault, a final run, the check."""
    started = time.monotonic()
    outcome = Outcome(scenario, "spark", workdir=workdir, messages_override=messages_override,
                      fault_override=fault_override, output_override=output_override, input_override=input_override,
                      task_api_override=task_api_override, extras=extras, drain=drain,
                      execution=execution)
    workdir.mkdir(parents=True, exist_ok=True)
    own_kafka = None
    if kafka is None and scenario.uses_kafka:
        own_kafka = kafka = start_kafka(workdir)
    job = SparkJob(scenario, workdir, azurite, kafka)
    try:
        job.create_streams()
        apply, damage, check_upto = (partial(_apply_phase, job, outcome), partial(_damage, job, outcome),
                                     partial(check, job, outcome))
        for phase in range(scenario.chunks):
            job.append_chunk(phase)
            run_phase(scenario, phase, apply, damage, check_upto)
        if scenario.fault in _AFTER_RUN_FAULTS or scenario.fault2 in _AFTER_RUN_FAULTS:
            # The damage was done after the last run: one more run must repair it.
            _expect_clean(outcome, job.run("final"))
        check(job, outcome)
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


def start_azurite(base: Path) -> Any:
    """A fresh Azurite under ``base`` (a soak starts one for all its scenarios)."""
    from sparza.devservers.storage import AzuriteProcess

    proc = AzuriteProcess(base / "azurite")
    proc.start()
    return proc


def start_kafka(base: Path) -> Any:
    """A fresh Apache Kafka broker (one KRaft node, quick to start) under ``base``."""
    from sparza.devservers.kafka import KafkaBroker

    proc = KafkaBroker(base / "kafka", quick=True)
    proc.start()
    return proc
