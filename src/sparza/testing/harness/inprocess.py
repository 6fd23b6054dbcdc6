"""The in-process engine of the fault harness: the same generated scenarios (same seeds, same oracle) run
through :class:`sparza.testing.TestRunner`, which drives the runtime's own planner, ``run_split``,
``TaskInstance`` and ``TaskCommit`` in this process over in-memory streams, without Spark. A scenario takes
a fraction of a second instead of minutes, so a soak runs thousands of them.

Every fault of the generator has an in-process form (a process is a :class:`~sparza.testing.TestRunner`;
a restart drops its in-memory tasks, stores and producers):

======================  =================================================================================
``poison``              the job raises on one message: the run must fail naming it; the fixed job finishes
``kill9``               the process dies right after a commit step (drawn) of the n-th commit (drawn);
                        a new process, whose claim wait is moved on the clock, finishes the job
``fail-once``           one commit fails at the scenario's step; the batch is retried in the same process
``azurite-restart``     the blob store is unreachable at a commit step (drawn); retried in the same process
``second-processor``    processor 1 starts while processor 0 is paused mid-commit: it is refused, or (when
                        every store is backed up) processor 0 stays paused past the claim timeout, 1 takes
                        over and finishes, and 0's late writes are fenced
(``processors`` > 1)    the job moves to a new processor (a new host: its own state dir) before every phase
                        after the first, when every store is backed up (the Spark engine runs them at once
                        under the azure coordinator)
``lost-state``          the local state dir and the plan are lost (a new host)
``lost-spark-checkpoint``  the plan is lost: batches are planned again from the task checkpoints
``replay-spark-batch``  the last committed batch runs again with its plan
``deleted-snapshot``    committed snapshot blobs tombstoned, local state lost: restore must use them
``purged-snapshot``     committed snapshot blobs purged, local state lost: the run must say so or rebuild;
                        the blobs are put back and the job must then finish exactly
``kafka-restart``       the input's records vanish mid-run (a broker that lost its data) and are produced
                        again with the same offsets; a run after must finish exactly
``container-retry``     as ``fail-once``, after the scenario's ``fail_after`` commits (a failure mid-epoch)
``container-kill``      a container killed inside a commit (also ``executor-loss``): its tasks move, the run goes on
``savepoint-restore``   the stopped job's savepoint taken and restored over it (:mod:`~.dayops`)
``rewind-in-place``     the stopped job's tasks rewound to their own offsets with a savepoint's state
``partition-growth``    the input gains partitions (``TestRunner.grow_input``); a run its policy stops must name
                        the stream, then the policy the operator would choose is set
======================  =================================================================================

The runs go through the engine in the scenario's execution mode: in ``containers`` the runner's process hosts the
engine's manager and 1-3 containers (drawn; commits inline, or in threads beside processing for a quarter of them),
and the engine's faults land there (:mod:`~sparza.testing.harness.enginefaults`): ``container-kill`` and
``executor-loss`` kill a container inside a commit (a wrapper around its real checkpoint store raises
``ContainerKilled`` before or after its n-th write), and half of the container scenarios meet one more engine fault
in a clean phase: a kill, a container joining or removed mid-commit (a hand-over), or a slow commit beside
processing. Each must finish in the same run, the engine recovering in place. 60 % of the scenarios with a Delta or
table output write it through the real Delta producer on local files (read back with deltalake).

What it leaves to the Spark engine (:mod:`~sparza.testing.harness.spark`): Spark itself (worker reuse,
retries, the plan in Spark's offset log, the containers' channel), the real storage services and their
restarts, the azure coordinator with several processors at once, Delta on ``az://``.
A drain scenario (``scenario.drain``) ends every run with :meth:`~sparza.testing.TestRunner.drain` instead of
``--once`` (both drain modes: the request comes as the run starts, as there is no second process to send it
while one runs), and the output is checked after every phase's drain. Kafka and blob outputs are in-memory
streams here, and Delta and table outputs too unless they go through the real Delta producer; an in-memory
typed upsert table is judged by folding its rows by key, as the table would.

Where a fault lands is drawn from ``random.Random(seed ^ INPROCESS_SALT)``, apart from the scenario, so a
seed is a complete reproduction on either engine.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sparza.clock import ManualClock
from sparza.state.backup.backup import BACKUP_FACTORIES
from sparza.testing.harness.check import judge
from sparza.testing.harness.damage import (
    SavedBlob,
    names_purged,
    purge_committed_snapshots,
    restore_local_blob,
    save_local_blob,
    tombstone_committed_snapshots,
)
from sparza.testing.harness.dayops import day_two_operation, day_two_operation_after_purge, growth_refusal_problem
from sparza.testing.harness.jobconfig import LATE_STREAM, PROFILES_STREAM, job_config, profile_partition
from sparza.testing.harness.outcome import Outcome, RunRecord
from sparza.testing.harness.phases import plan_phase, run_phase
from sparza.testing.oracle import Record, task_partition
from sparza.testing.scenario import AFTER_RUN_FAULTS, COMMIT_STEPS, DAYOPS_FAULTS, Scenario

__all__ = ["INPROCESS_SALT", "InProcessDraws", "InProcessJob", "draw", "inprocess_config", "run_inprocess_scenario"]

INPROCESS_SALT = 0x1A_B0C3_55
"""Where the in-process engine's faults land comes from ``random.Random(seed ^ INPROCESS_SALT)``."""

OUTPUT_STREAMS = {"delta": "delta.out", "table-append": "delta.out", "table-upsert": "delta.out",
                  "kafka": "kafka.out", "blob": "blob.out"}
"""The in-memory stream standing for each output kind."""

CLAIM_TIMEOUT_MS = 30_000
"""``job.coordinator.standalone.claim.timeout.ms`` of in-process jobs (the default): moved on the clock."""


@dataclass(frozen=True)
class InProcessDraws:
    """Where the in-process faults land, drawn per seed: the commit step and how many matching commits go
    by first (``skip``) of a kill, a storage failure, a second processor's arrival and a lost input; how the
    second processor meets the first; whether every run is a new process (as every ``sparza run`` is) or one
    process runs them all (a long-running processor that gets more input)."""

    kill_step: str
    storage_step: str
    meet_step: str
    lose_step: str
    skip: int
    takeover: bool
    new_process_per_run: bool
    containers: int = 1
    threaded_commits: bool = False
    engine_fault: str = "none"
    engine_step: str = "after-flush"
    engine_skip: int = 0
    kill_before_write: bool = True
    real_output: bool = False


REAL_OUTPUTS = ("delta", "table-append", "table-upsert")
"""Output kinds a scenario may write through the real Delta producer on local files (``real_output``)."""


def draw(scenario: Scenario) -> InProcessDraws:
    """The in-process draws of ``scenario``'s seed (those of the container mode's engine drawn after the others, so
    a seed's earlier draws stay what they were)."""
    from sparza.testing.harness.enginefaults import ENGINE_FAULTS

    rng = random.Random(scenario.seed ^ INPROCESS_SALT)
    kill_step, storage_step, meet_step, lose_step = (rng.choice(COMMIT_STEPS) for _ in range(4))
    skip, takeover, per_run = rng.randrange(3 * max(1, scenario.partitions)), rng.random() < 0.6, rng.random() < 0.5
    containers, threaded, r_fault = rng.choice([1, 1, 2, 3]), rng.random() < 0.25, rng.random()
    engine_fault, engine_step = rng.choice(ENGINE_FAULTS), rng.choice(COMMIT_STEPS)
    engine_skip, before, r_real = rng.randrange(2 * max(1, scenario.partitions)), rng.random() < 0.5, rng.random()
    containers_mode = scenario.execution == "containers"
    if engine_fault == "slow" and not threaded:
        engine_fault = "kill"
    return InProcessDraws(kill_step=kill_step, storage_step=storage_step, meet_step=meet_step, lose_step=lose_step,
                          skip=skip, takeover=takeover, new_process_per_run=per_run,
                          containers=containers if containers_mode else 1,
                          threaded_commits=threaded and containers_mode,
                          engine_fault=engine_fault if containers_mode and r_fault < 0.5 else "none",
                          engine_step=engine_step, engine_skip=engine_skip, kill_before_write=before,
                          real_output=scenario.output in REAL_OUTPUTS and r_real < 0.6)


REAL_DELTA = "deltafs"
"""The system of a ``real_output`` scenario's output: the Delta producer, on local files under the work dir."""


def inprocess_config(s: Scenario, *, real_output: Path | None = None) -> dict[str, str]:
    """The job config of ``s`` on in-memory streams (every system of the job is ``inmemory``), but for the output
    when ``real_output`` is a dir: the real Delta producer writes it there (stream ``deltafs.out``)."""
    input_stream = f"{s.input}.in"
    output_stream = OUTPUT_STREAMS[s.output] if real_output is None else f"{REAL_DELTA}.out"
    v = job_config(s, input_stream=input_stream, output_stream=output_stream)
    if real_output is None:
        # Typed tables are Delta tables: here the output is an in-memory stream of the same records (an upsert
        # table is judged by folding them by key), so the table declarations are left out.
        for key in [k for k in v if ".delta.table." in k or k.startswith("app.harness.table.")]:
            del v[key]
    else:
        v[f"systems.{REAL_DELTA}.samza.factory"] = "delta"
        v[f"systems.{REAL_DELTA}.delta.root"] = str(real_output)
    v["job.id"] = "1"
    v["blob.store.local.fsync"] = "false"  # a temp dir: surviving a power loss is not what is checked here
    systems = {input_stream.split(".")[0], "delta"}
    if real_output is None:
        systems.add(output_stream.split(".")[0])
    if s.intermediate != "default":
        systems.add(s.intermediate)
    for system in systems:
        v[f"systems.{system}.samza.factory"] = "inmemory"
    if s.output == "blob" and s.api == "task":
        v["systems.blob.streams.out.samza.key.serde"] = "string"
        v["systems.blob.streams.out.samza.msg.serde"] = "json"
    return {k: str(x) for k, x in v.items()}


def _stores_move(s: Scenario) -> bool:
    """Whether the job's state can move to another processor's host: no stores, or every one backed up."""
    has_stores = s.kind in ("count", "window", "session", "join") or s.join != "none"
    return s.backup or not has_stores


class InProcessJob:
    """One scenario's job under :class:`~sparza.testing.TestRunner`: its in-memory streams, its clock, and the
    processors (runners) that ran it; ``runner`` is the one running it now."""

    def __init__(self, scenario: Scenario, root: Path, draws: InProcessDraws) -> None:
        from sparza.testing.runner import TestMessage, TestRunner

        self.s = scenario
        self.root = root
        self.draws = draws
        self.real_output = root / "realdelta" if draws.real_output else None
        self.config = inprocess_config(scenario, real_output=self.real_output)
        self.clock = ManualClock()
        self.input_stream = f"{scenario.input}.in"
        self.output_stream = OUTPUT_STREAMS[scenario.output] if self.real_output is None else f"{REAL_DELTA}.out"
        runner = TestRunner(self.config, work_dir=root, clock=self.clock, claim=True, containers=draws.containers,
                            threaded_commits=draws.threaded_commits)
        runner.add_input(self.input_stream, partitions=scenario.partitions, bounded=scenario.bounded)
        if self.real_output is None:
            runner.add_output(self.output_stream, partitions=3 if scenario.output == "blob" else 2)
        elif scenario.output == "delta":
            from sparza.config import Config
            from sparza.systems import StreamSpec
            from sparza.systems.delta import DeltaSystemAdmin

            DeltaSystemAdmin(REAL_DELTA, Config(self.config)).create_stream(StreamSpec("out", 2))
        if scenario.api == "app":
            runner.add_output(LATE_STREAM, partitions=1)
        if scenario.join != "none":
            runner.add_input(PROFILES_STREAM, [
                TestMessage(json.dumps({"c": p.c}).encode(), key=p.key.encode(),
                            partition=profile_partition(p, scenario), timestamp=0)
                for p in scenario.profiles], partitions=1 if scenario.join == "broadcast" else
                scenario.stage2_partitions, bounded=True)
        self.runner = runner
        self.processors = [runner]
        self.runs: list[RunRecord] = []
        self.notes: list[str] = []
        self.crashed = False
        """The last process died holding the claim (the next one must wait it out: moved on the clock)."""
        self.purged: dict[str, SavedBlob] = {}
        self.purge_problems: list[str] = []
        self.engine_fault_done = False

    # --- input ---------------------------------------------------------------------------------
    def append_chunk(self, chunk: int) -> int:
        """Append the input messages of ``chunk``, partition by partition in id order; returns how many."""
        from sparza.testing.runner import TestMessage

        messages = [TestMessage(json.dumps({"id": m.id, "key": m.key, "n": m.n}).encode(), key=m.key.encode(),
                                partition=m.partition, timestamp=m.timestamp)
                    for m in self.s.messages if m.chunk == chunk]
        if messages:
            self.runner.add_input(self.input_stream, messages)
        return len(messages)

    def lose_input(self) -> int:
        """Every record of the input gone (a broker that lost its data); returns how many."""
        from sparza.systems.inmemory import clear_stream

        system, stream = self.input_stream.split(".", 1)
        return clear_stream(system, self.runner.config, stream)

    # --- processes -----------------------------------------------------------------------------
    def restart(self, *, crashed: bool = False, **kwargs: Any) -> None:
        """A new process of the running processor (see :meth:`TestRunner.restart`)."""
        self.runner.restart(crashed=crashed, **kwargs)
        self.crashed = crashed

    def new_processor(self, processor_id: str) -> Any:
        """Another processor of the job (its own local state dir), started by nobody yet."""
        runner = self.runner.new_processor(processor_id)
        self.processors.append(runner)
        return runner

    def move(self) -> None:
        """The running processor stops cleanly and a new one (another host: its own state dir, a fresh plan)
        runs the job from now on; the tasks move with their checkpoints and snapshots."""
        self.runner.restart(crashed=False)
        self.runner = self.new_processor(str(len(self.processors)))
        self.crashed = False

    def run(self, label: str, runner: Any = None, *, wait_for_claim: bool | None = None,
            meant_to_fail: bool = False) -> RunRecord:
        """``sparza run --once`` (``--drain`` in a drain scenario) by ``runner`` (default the running processor),
        recorded. After a crash
        (``wait_for_claim``, default: the last process crashed) the dead process's claim is waited out by
        moving the clock, as a processor started on another host waits. A failed run after the purged-snapshot
        fault must name what is gone, unless it is ``meant_to_fail`` (a poison message)."""
        from sparza.coordination.jobclaim import ClaimHeldError

        runner = runner or self.runner
        wait = self.crashed if wait_for_claim is None else wait_for_claim
        started = time.perf_counter()
        record: RunRecord
        try:
            for attempt in range(4):  # an application's stages each find the dead process's claim once
                try:
                    if self.s.drain != "none":
                        runner.drain()
                    else:
                        runner.run()
                    break
                except ClaimHeldError:
                    if not wait or attempt == 3:
                        raise
                    self.clock.advance(ms=CLAIM_TIMEOUT_MS)
            record = RunRecord(label, 0, time.perf_counter() - started)
            if runner is self.runner:
                self.crashed = False
        except (Exception, _Crash) as exc:
            record = RunRecord(label, 1, time.perf_counter() - started, error=_first_line(exc))
        self.runs.append(record)
        if self.purged and record.returncode != 0:
            named = names_purged(record.error)
            if named or not meant_to_fail:
                record = self._restore_purged(label, record, named, meant_to_fail)
        return record

    def _restore_purged(self, label: str, failed: RunRecord, named: bool, meant_to_fail: bool) -> RunRecord:
        """A run failed after the purged-snapshot fault: it must say what is gone. Put the blobs back and run
        again (a new process)."""
        self.notes.append(f"purged-snapshot: run '{label}' failed" + ("" if named else " WITHOUT naming the purged "
                          "snapshot") + f"; {len(self.purged)} blobs brought back")
        if not named:
            self.purge_problems.append(f"run '{label}' after committed snapshots were purged failed without saying "
                                       f"so: {failed.error}")
        self.bring_back_purged()
        self.restart()
        return self.run(f"{label}-after-restoring-blobs", meant_to_fail=meant_to_fail)

    def bring_back_purged(self) -> None:
        """Put the blobs the purged-snapshot fault took away back (as an operator would, from a backup)."""
        for blob_id, saved in self.purged.items():
            restore_local_blob(self.root / "blobstore", blob_id, saved)
        self.purged = {}

    def close(self) -> None:
        """Close every processor (the first one owns the work dir's streams)."""
        for runner in reversed(self.processors):
            try:
                runner.close()
            except Exception as exc:  # a processor fenced off may fail to release: nothing depends on it
                self.notes.append(f"closing processor {runner.processor_id}: {_first_line(exc)}")

    # --- output --------------------------------------------------------------------------------
    def output_records(self) -> tuple[Counter[Record], int]:
        """The output's records (a typed upsert table folded by key, as the table holds them) and how many
        control messages the output holds (it must hold none)."""
        from sparza.streams import MessageType

        if self.real_output is not None:  # read by deltalake, never by sparza
            from sparza.testing.oracle import read_delta_records, read_table_rows

            path = self.real_output / "out"
            if self.s.output == "delta":
                return read_delta_records(path), 0
            return read_table_rows(path)["deltalake"], 0
        messages = self.runner.outputs(self.output_stream, include_control=True)
        control = sum(1 for m in messages if isinstance(m.value, MessageType))
        rows = [_record(m.value) for m in messages if not isinstance(m.value, MessageType)]
        if self.s.output == "table-upsert":
            folded: dict[tuple[str, int], Record] = {}
            for row in rows:  # offset order within a partition, and one key lives in one partition
                folded[(row[1], row[3] if self.s.kind == "count" else row[0])] = row
            rows = list(folded.values())
        return Counter(rows), control

    def routed_late(self) -> Counter[int]:
        """Input ids the job routed to its late stream."""
        if self.s.api != "app":
            return Counter()
        return Counter(int(json.loads(v)["id"]) for v in self.runner.values(LATE_STREAM, msg_serde="bytes"))


def _record(value: Any) -> Record:
    obj = value if isinstance(value, dict) else json.loads(value)
    return (int(obj["id"]), str(obj["key"]), int(obj["val"]), int(obj["aux"]), str(obj["tag"]))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:600]}" if text else type(exc).__name__


def _expect_clean(outcome: Outcome, record: RunRecord) -> None:
    if record.returncode != 0:
        outcome.problems.append(f"run '{record.label}' failed: {record.error}")


def _fired(runner: Any) -> bool:
    """Whether the fault point set on ``runner`` was reached (and forget it if not)."""
    if runner.pending_faults:
        runner.clear_faults()
        return False
    return True


class _Crash(BaseException):
    """Stands for the process dying at a commit step: raised there, it passes every ``except Exception`` of
    the runtime (a killed process runs no error handler), only ``finally`` blocks and ``except BaseException``
    (which the runtime uses to wait for a snapshot thread, as a dying process takes its threads along) run."""


def _apply_phase(job: InProcessJob, outcome: Outcome, fault: str, phase: int) -> None:
    """Run one phase with ``fault`` (``none``: a clean run)."""
    s, d = job.s, job.draws
    label, fault, poison = plan_phase(s, phase, fault, outcome)
    if poison is not None:  # the poison fault
        job.restart(config={"app.harness.poison.ids": str(poison)})
        record = job.run(f"{label}-poison", meant_to_fail=True)
        if record.returncode == 0:
            outcome.problems.append(f"a job that raises on message id {poison} finished (the failure was hidden)")
        elif f"poison message id {poison}" not in record.error:
            outcome.problems.append(f"the run that met poison message id {poison} failed without naming it: "
                                    f"{record.error}")
        job.restart(config={"app.harness.poison.ids": ""})
        _expect_clean(outcome, job.run(f"{label}-fixed"))
    elif fault == "kill9":
        where: list[str] = []

        def die(task: str, step: Any, batch: int) -> None:
            where.append(f"after {step.value} of batch {batch} of {task}")
            raise _Crash(f"killed {where[-1]}")

        job.runner.call_at(d.kill_step, die, skip=d.skip)
        record = job.run(f"{label}-kill9")
        if _fired(job.runner):
            outcome.notes.append(f"kill9: killed {where[0]}")
            if record.returncode == 0:
                outcome.problems.append(f"kill9: the process died {where[0]} but its run finished")
        else:
            _expect_clean(outcome, record)
            outcome.notes.append(f"kill9: the run ended before {d.skip + 1} commits reached {d.kill_step}; "
                                 "killed after it")
        job.restart(crashed=True)
        _expect_clean(outcome, job.run(f"{label}-restart"))
    elif fault in ("fail-once", "azurite-restart", "container-retry"):
        from sparza.errors import StorageUnavailableError

        step = d.storage_step if fault == "azurite-restart" else s.fail_step
        error = None if fault != "azurite-restart" else StorageUnavailableError(
            "injected: the blob store is unreachable (in-process azurite-restart)")
        skip = s.fail_after if fault == "container-retry" else d.skip
        job.runner.fail_at(step, skip=skip, error=error)
        record = job.run(f"{label}-{fault}", meant_to_fail=True)  # the injected failure may end it first
        fired = _fired(job.runner)
        outcome.notes.append(f"{fault} at {step} after {skip} commits: {'fired' if fired else 'did not fire'}")
        if record.returncode != 0 and fired:
            _expect_clean(outcome, job.run(f"{label}-retry"))  # Spark's retry: the same process
        else:
            _expect_clean(outcome, record)
    elif fault == "second-processor":
        _second_processor(job, outcome, label)
    elif fault == "kafka-restart":
        _input_lost(job, outcome, label, phase)
    elif fault in ("container-kill", "executor-loss"):  # an executor lost: its container dies with it
        _engine_fault(job, outcome, "kill", label)
    elif fault == "none" and d.engine_fault != "none" and not job.engine_fault_done:
        job.engine_fault_done = True
        _engine_fault(job, outcome, d.engine_fault, label)
    else:
        _expect_clean(outcome, job.run(label))
        _damage(job, outcome, fault, label)


def _engine_fault(job: InProcessJob, outcome: Outcome, kind: str, label: str) -> None:
    """A run of the container mode meeting one of the engine's faults (:mod:`~.enginefaults`): it must finish by
    itself, the engine recovering in place."""
    from sparza.testing.harness.enginefaults import KillPlan, SlowPlan, wrap_checkpoints

    d, runner = job.draws, job.runner
    outcome.engine_faults.append(kind)
    if kind == "kill":
        kill = KillPlan(d.engine_skip, d.kill_before_write)
        runner.wrap_engines(wrap_checkpoints(kill))
        record = job.run(f"{label}-container-kill")
        runner.clear_wrappers()
        outcome.notes.append(f"container-kill: a container was killed {kill.where}; its tasks moved" if kill.where
                             else f"container-kill: the run ended before {d.engine_skip + 1} checkpoint writes")
    elif kind == "slow":
        slow = SlowPlan(task="Partition 0")
        runner.wrap_engines(wrap_checkpoints(slow))
        record = job.run(f"{label}-slow-commit")
        runner.clear_wrappers()
        outcome.notes.append(f"slow commit: {slow.slowed} checkpoint writes of Partition 0 took 20 ms more; "
                             f"{slow.beside} writes of other tasks ran beside them (threaded commits)")
    else:
        where: list[str] = []

        def move(task: str, step: Any, batch: int) -> None:
            host = runner.host
            if kind == "add":
                host.add_container()
                where.append(f"a container joined after {step.value} of batch {batch} of {task}")
                return
            index = next((i for i, c in host.containers.items() if any(n == task for _, n in c.tasks)), None)
            if index is not None:
                host.remove_container(index)
                where.append(f"container {index} was removed after {step.value} of batch {batch} of {task}")

        runner.call_at(d.engine_step, move, skip=d.engine_skip)
        record = job.run(f"{label}-container-{kind}")
        _fired(runner)
        outcome.notes.append(f"container-{kind}: {where[0]}" if where else
                             f"container-{kind}: the run ended before {d.engine_skip + 1} commits reached "
                             f"{d.engine_step}")
    _expect_clean(outcome, record)


def _second_processor(job: InProcessJob, outcome: Outcome, label: str) -> None:
    """Processor 1 starts while processor 0 is paused right after a commit step. It must be refused; with
    ``takeover`` processor 0 stays paused past the claim timeout, 1 takes the job over and finishes what
    there is, and when 0 wakes its writes must be refused (fenced)."""

    first, d = job.runner, job.draws
    takeover = d.takeover and _stores_move(job.s)
    second: list[Any] = []
    met: list[str] = []

    def meet(where: str) -> None:
        met.append(where)
        other = job.new_processor("1")
        second.append(other)
        refused = job.run(f"{label}-proc1-while-proc0-lives", other, wait_for_claim=False)
        if refused.returncode == 0 or "ClaimHeldError" not in refused.error:
            outcome.problems.append(f"processor 1 was not refused while processor 0 held the claim: "
                                    f"{refused.error or 'its run finished'}")
        if takeover:
            job.clock.advance(ms=CLAIM_TIMEOUT_MS)  # processor 0 stays paused past the claim timeout
            _expect_clean(outcome, job.run(f"{label}-proc1-takes-over", other, wait_for_claim=True))

    first.call_at(d.meet_step, lambda task, step, batch: meet(f"after {step.value} of batch {batch} of {task}"),
                  skip=d.skip)
    record = job.run(f"{label}-proc0")
    if not _fired(first):
        _expect_clean(outcome, record)
        meet("while processor 0 was idle (its run ended first)")  # alive, holding the claim
    outcome.notes.append(f"second processor: came {met[0]}; " + (
        "0 stayed paused past the claim timeout and 1 took over" if takeover else "refused"))
    if not takeover:
        _expect_clean(outcome, record)
        second[0].close()
        job.processors.remove(second[0])
        return
    if record.returncode == 0:
        outcome.notes.append("processor 0 finished after waking (it had nothing left to write)")
    else:
        outcome.notes.append(f"processor 0 woke and stopped: {record.error}")
    for name in first.jobs:
        generations = {task: cp.generation for task, cp in first.checkpoints(job=name).items()}
        if len(set(generations.values())) > 1:
            outcome.problems.append(f"job {name}: processor 0 committed after processor 1 took over (fencing "
                                    f"failed): task generations {generations}")
    job.runner = second[0]


def _input_lost(job: InProcessJob, outcome: Outcome, label: str, phase: int) -> None:
    """The input's records vanish after a commit step (drawn) of the run in flight and are produced again
    with the same offsets once it ended; the run in flight may fail (nothing may be half-written or
    skipped), and a run after it must finish exactly."""
    lost: list[int] = []
    job.runner.call_at(job.draws.lose_step, lambda task, step, batch: lost.append(job.lose_input()),
                       skip=job.draws.skip)
    record = job.run(f"{label}-input-lost")
    if not _fired(job.runner):
        lost.append(job.lose_input())
    for chunk in range(phase + 1):
        job.append_chunk(chunk)
    outcome.notes.append(f"kafka-restart: {lost[0]} input records vanished mid-run and were produced again; "
                         f"the run in flight {'finished' if record.returncode == 0 else 'failed: ' + record.error}")
    if record.returncode != 0:
        job.restart()
    _expect_clean(outcome, job.run(f"{label}-after-input-restored"))


def _damage(job: InProcessJob, outcome: Outcome, fault: str, label: str) -> None:
    """An after-run fault: damage what the last run left (the next run, a new process, must repair it)."""
    if fault == "lost-state":
        shutil.rmtree(job.runner.state_dir, ignore_errors=True)
        job.restart(keep_plan=False)
    elif fault == "lost-spark-checkpoint":
        job.restart(keep_plan=False)
    elif fault == "replay-spark-batch":
        job.restart(replay_last_batch=True)
        outcome.notes.append("replay-spark-batch: the last committed batch of every job runs again")
    elif fault == "deleted-snapshot":
        marked = tombstone_committed_snapshots(job.runner.config)
        shutil.rmtree(job.runner.state_dir, ignore_errors=True)
        job.restart(keep_plan=False)
        outcome.notes.append(f"deleted-snapshot: marked {marked} committed snapshot blobs deleted")
    elif fault == "purged-snapshot":
        root = job.root / "blobstore"
        job.purged = purge_committed_snapshots(job.runner.config, lambda blob_id: save_local_blob(root, blob_id))
        shutil.rmtree(job.runner.state_dir, ignore_errors=True)
        job.restart(keep_plan=False)
        outcome.notes.append(f"purged-snapshot: purged {len(job.purged)} committed snapshot blobs and the local "
                             "state")
    elif fault == "partition-growth":
        _grow_input(job, outcome, label)
    elif fault in DAYOPS_FAULTS:
        job.restart(crashed=False, keep_plan=False)   # a stopped job: claim released, re-planned from checkpoints
        if job.purged:  # right after the purged-snapshot fault: the savepoint must be refused saying what is gone
            note, problem = day_two_operation_after_purge(fault, job.runner.config, label, set(job.purged),
                                                          job.bring_back_purged)
            outcome.notes.append(note)
            outcome.problems.extend([problem] if problem else [])
        else:
            outcome.notes.append(day_two_operation(fault, job.runner.config, label))
    elif fault != "none":
        raise ValueError(f"unknown fault {fault!r}")


def _grow_input(job: InProcessJob, outcome: Outcome, label: str) -> None:
    """``partition-growth``: the input gains partitions (as a topic given more); when the job's policy stops it, the
    next run must fail naming the stream, and the operator then sets ``grow_then``."""
    s = job.s
    job.runner.grow_input(job.input_stream, s.grow_to)
    note = (f"partition-growth: {job.input_stream} {s.partitions} -> {s.grow_to} partitions under "
            f"job.partition.expansion: {s.grow_policy}")
    if s.grow_then:
        record = job.run(f"{label}-after-growth", meant_to_fail=True)
        problem = growth_refusal_problem(record.error if record.returncode else None, job.input_stream,
                                         s.partitions, s.grow_to)
        if problem:
            outcome.problems.append(problem)
        job.restart(crashed=False, config={"job.partition.expansion": s.grow_then})
        note += f"; the run after it stopped naming the stream, then {s.grow_then} was set"
    outcome.notes.append(note)


def check(job: InProcessJob, outcome: Outcome, *, upto: int | None = None) -> None:
    """Read the in-memory output and late streams and judge them against the oracle (``upto``: after the drain
    of that phase, against the chunks up to it; see :func:`~sparza.testing.harness.check.judge`)."""
    actual, control = job.output_records()
    problems = [f"{control} control messages in the output stream (only intermediate streams carry watermarks "
                "and end-of-stream)"] if control else []
    judge(outcome, actual, job.routed_late(), upto=upto, reader_problems=problems)


GC_AFTER_MS = 60 * 86_400_000
"""How far past now :func:`check_committed_state` runs gc: beyond every TTL (``blob.store.ttl.days``, 30)."""


def check_committed_state(job: InProcessJob, outcome: Outcome) -> None:
    """After the last run: no task is left with an open intent (a batch flushed, never committed), and the
    committed state survives ``sparza gc`` run long after it (every TTL passed, every tombstone purged): each
    backed-up store of each task is read back from the blob store through :mod:`sparza.storeview`, and the
    keyed count's store must hold, per task and key, the number of messages of that key in that task's
    partition; then, when the state can move (every store backed up), a new processor on a new host gets one more
    message for every partition and must restore everything (adjunct stores too) and run cleanly. A snapshot
    that still named an expiring or deleted blob would be lost here.

    Not after the deleted- or purged-snapshot faults: the harness itself damaged the blob store then, and
    tasks that ran no batch since (a bounded job that had ended) still name what it deleted, by design (the
    SAMZA-2787 recovery happens when a task restores)."""
    from sparza.blobstore import blob_store_manager_from_config, collect_garbage
    from sparza.clock import system_clock_ms
    from sparza.storeview import CommittedStores

    config = job.runner.config
    stores = CommittedStores(config)
    for name in job.runner.jobs:
        for task, cp in job.runner.checkpoints(job=name).items():
            if cp.open_intent() is not None:
                outcome.problems.append(f"job {name} task '{task}' ended with an open intent (batch "
                                        f"{cp.open_intent().batch} flushed, never committed) after a clean run")
    if {job.s.fault, job.s.fault2} & {"deleted-snapshot", "purged-snapshot"}:
        return
    manager = blob_store_manager_from_config(config)
    try:
        collect_garbage(manager, now_ms=system_clock_ms() + GC_AFTER_MS, deleted_retention_ms=0)
    finally:
        manager.close()
    for ref in stores.refs:
        backed_up = "blobstore" in BACKUP_FACTORIES.get(ref.config, store=ref.store)
        if not backed_up:
            continue
        for snapshot in stores.snapshots(ref):
            try:
                with stores.open(ref, snapshot) as store:
                    entries = dict(store.all())
            except Exception as exc:
                outcome.problems.append(f"store {ref.store} of task '{snapshot.task}' ({ref.job_key}) cannot be "
                                        f"restored after gc: {_first_line(exc)}")
                continue
            if ref.store == "counts":
                partition = int(snapshot.task.rsplit(" ", 1)[1])
                expected = Counter(m.key for m in job.s.messages if task_partition(job.s, m) == partition)
                if entries != dict(expected):
                    outcome.problems.append(f"store counts of task '{snapshot.task}' after gc holds {entries}, the "
                                            f"oracle says {dict(expected)}")
    if not job.s.bounded and job.s.messages and _stores_move(job.s):  # local-only state stays on its host
        _restore_everything_after_gc(job, outcome)


def _restore_everything_after_gc(job: InProcessJob, outcome: Outcome) -> None:
    """A new processor (another host: nothing local) gets one more message for every partition that had input,
    so every task restores every store it has, adjunct ones included, from what gc left; it must run cleanly
    (its outputs are not judged: the oracle's input ended before)."""
    from sparza.testing.runner import TestMessage

    job.move()
    first = len(job.s.messages)
    partitions = sorted({m.partition for m in job.s.messages})
    key = job.s.messages[0].key
    job.runner.add_input(job.input_stream, [
        TestMessage(json.dumps({"id": first + i, "key": key, "n": 1}).encode(), key=key.encode(), partition=p,
                    timestamp=max(m.timestamp for m in job.s.messages) + 1) for i, p in enumerate(partitions)])
    record = job.run("after-gc-on-a-new-host")
    if record.returncode != 0:
        outcome.problems.append(f"after gc, a new processor could not run the job from its committed state: "
                                f"{record.error}")


def _tmpfs() -> str | None:
    """``/dev/shm`` when writable (the scenario's state is thrown away; fsyncs on a busy disk would dominate)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_inprocess_scenario(scenario: Scenario, workdir: Path | None = None, *, keep: bool = False,
                           messages_override: int | None = None, fault_override: str | None = None,
                           output_override: str | None = None, input_override: str | None = None,
                           task_api_override: str | None = None, extras: bool = True,
                           drain: bool = True, execution: bool = True) -> Outcome:
    """Run ``scenario`` in this process: every phase, its faults, a final run, the check. ``workdir`` (default
    a temp dir, removed afterwards unless ``keep`` or the scenario failed) holds its state and blob store."""
    started = time.perf_counter()
    own = workdir is None
    root = Path(tempfile.mkdtemp(prefix=f"sparza-inprocess-{scenario.seed}-", dir=_tmpfs())) if workdir is None \
        else workdir
    root.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(scenario, "inprocess", workdir=root, messages_override=messages_override,
                      fault_override=fault_override, output_override=output_override, input_override=input_override,
                      task_api_override=task_api_override, extras=extras, drain=drain,
                      execution=execution)
    draws = draw(scenario)
    job: InProcessJob | None = None
    try:
        job = InProcessJob(scenario, root, draws)
        if job.real_output is not None:
            outcome.real_producers.append("delta")
            outcome.notes.append(f"output through the real Delta producer on local files ({scenario.output})")
        if scenario.execution == "containers":
            outcome.notes.append(f"engine: {draws.containers} container(s), commits "
                                 f"{'in threads beside processing' if draws.threaded_commits else 'inline'}")
        moves = scenario.processors > 1 and _stores_move(scenario)
        if scenario.processors > 1:
            outcome.notes.append(f"{scenario.processors} processors: " + (
                "the job moves to a new processor before every phase after the first" if moves else
                "some state is kept locally only, so one processor runs it (several at once: Spark engine only)"))
        apply, damage, check_upto = (partial(_apply_phase, job, outcome), partial(_damage, job, outcome),
                                     partial(check, job, outcome))
        for phase in range(scenario.chunks):
            job.append_chunk(phase)
            if phase and moves:
                job.move()
            elif phase and draws.new_process_per_run:
                job.restart()
            run_phase(scenario, phase, apply, damage, check_upto)
        if scenario.fault in AFTER_RUN_FAULTS or scenario.fault2 in AFTER_RUN_FAULTS:
            _expect_clean(outcome, job.run("final"))   # the damage was done after the last run: one more repairs it
        check(job, outcome)
        check_committed_state(job, outcome)  # last: it runs the job once more, on a new host
    except Exception as exc:  # a harness error is a failed scenario too, reported with its seed
        outcome.problems.append(f"harness error: {_first_line(exc)}")
    finally:
        if job is not None:
            outcome.runs = job.runs
            outcome.notes.extend(job.notes)
            outcome.problems.extend(job.purge_problems)
            job.close()
        outcome.seconds = time.perf_counter() - started
        if own and outcome.ok and not keep:
            shutil.rmtree(root, ignore_errors=True)
    return outcome
