"""``TestRunner``: run a user's ``StreamTask`` or ``StreamApplication`` in-process, without Spark, over in-memory
streams, with batch boundaries, watermarks and processing time under the test's control.

It drives the engine ``sparza run`` drives, not a copy of it. In the container execution mode
(``job.execution.mode: containers``, the default, as on Spark) the runner's process is an
:class:`~sparza.engine.inprocess.InProcessHost`: the engine's :class:`~sparza.engine.manager.ContainerManager`
places each job's tasks on :class:`~sparza.engine.container.Container` objects (``containers=`` of them), whose task
loops plan, process (:class:`~sparza.engine.instance.TaskInstance`) and commit
(:class:`~sparza.engine.commit.TaskCommit`) each task on its own; commits run inline, or in the containers' threads
beside processing with ``threaded_commits=True``. A round (:meth:`TestRunner.run_batch`) gives every due task at
most one batch; :attr:`TestRunner.host` reaches the host's own faults (``kill``, ``add_container``,
``remove_container``) and :meth:`TestRunner.wrap_engines` the engines' real objects. With
``job.execution.mode: batches`` it drives the micro-batch adapter's path instead: the
:class:`~sparza.engine.planner.BatchPlanner` plans a batch of every task and
:func:`sparza.runtime.driver.batchtask.run_split` runs each split. Neither keeps an offset log beside the task
checkpoints: a restarted process plans from them (an open intent replays its batch exactly). An application is
planned into stages by :func:`sparza.api.plan_application` and each stage runs :class:`~sparza.api.StageTask`. Only
Spark is left out: everything runs in this process, and the streams the test adds live in the ``inmemory`` system
(:mod:`sparza.systems.inmemory`). Main input waits for a broadcast bootstrap store's bootstrapped publication, as a
container plans it; :meth:`TestRunner.run` raises :class:`~sparza.engine.errors.JobStalledError` when tasks wait for
one that nothing left to read will bring (``sparza run --once`` would wait for ever). Stores are real (RocksDB or
memory) and, like task checkpoints and the blob store, live in the runner's work dir.

A failure can be injected right after any commit step (:class:`~sparza.engine.commit.CommitStep`) of a
chosen task and batch (:meth:`TestRunner.fail_at`), or anything run there (:meth:`TestRunner.call_at`);
:meth:`TestRunner.restart` then stands for a restarted process, so a test can check that a job's outputs and
stores after a crash equal those of a run without one. With ``claim=True`` the runner holds the standalone job
claim as ``sparza run`` does, timed by its :class:`~sparza.clock.ManualClock`, and
:meth:`TestRunner.new_processor` starts a second processor of the same job: a test can show that it is
refused while the first is alive, takes over once the first stopped renewing for the claim timeout, and
fences the first one's late writes.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparza.api.graph import Application
from sparza.clock import DEFAULT_START_MS, ManualClock
from sparza.config import Config
from sparza.config.shared import APP_CLASS, APP_STAGE, JOB_NAME, TASK_CLASS
from sparza.control.settings import INTERMEDIATE_OUTPUTS
from sparza.engine.commit import CommitStep
from sparza.errors import SparzaError
from sparza.metrics import MetricsRegistry
from sparza.serde import Serde, serde_from_name
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream
from sparza.systems.settings import STREAM_INTERMEDIATE, stream_serde
from sparza.testing.faults import FAULT_HOOK, InjectedFault, register_fault_hook, unregister_fault_hook, with_faults
from sparza.testing.hosts import BatchJob, ContainerJob, EngineWrapper, HostedJob, RoundOutcome, RunnerProcess

__all__ = [
    "BatchReport",
    "ControlInput",
    "OutputMessage",
    "RunReport",
    "TestInputError",
    "TestMessage",
    "TestRunner",
    "end_of_stream",
    "watermark",
]

_SOURCE = "sparza.testing"


class TestInputError(SparzaError, ValueError):
    """A test gave the runner something it cannot use: a malformed message, an unknown stream or store, a
    stream added after the job started. The message says which and what to do."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True, slots=True)
class TestMessage:
    """One input message: ``value`` and ``key`` (serialized with the stream's serdes unless bytes), the
    ``partition`` (default: picked from the key as the producer picks it) and its event time ``timestamp`` (ms).
    """

    __test__ = False

    value: Any
    key: Any = None
    partition: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class ControlInput:
    """A control message in an input list: a watermark or an end-of-stream of a partition (None: every one)."""

    type: MessageType
    timestamp: int | None = None
    partition: int | None = None


def watermark(timestamp: int, partition: int | None = None) -> ControlInput:
    """An explicit source watermark at ``timestamp`` (ms) in ``partition`` (None: every partition): the
    partition promises no more messages before it, so event-time windows up to it may fire."""
    return ControlInput(MessageType.WATERMARK, int(timestamp), partition)


def end_of_stream(partition: int | None = None) -> ControlInput:
    """End-of-stream of ``partition`` (None: every partition) for tasks that listen to control messages
    (applications, watermark listeners); for any task, ``add_input(..., bounded=True)`` ends a stream."""
    return ControlInput(MessageType.END_OF_STREAM, None, partition)


@dataclass(frozen=True, slots=True)
class OutputMessage:
    """One message a job wrote: key and value deserialized, its partition, offset and event time."""

    key: Any
    value: Any
    partition: int
    offset: int
    timestamp: int | None


@dataclass
class BatchReport:
    """What one :meth:`TestRunner.run_batch` did, per job (the job name; an application's stage names):
    the task results, or nothing when the job had nothing to plan."""

    results: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        """True when any job ran a batch."""
        return any(self.results.values())

    @property
    def messages(self) -> int:
        """Messages read by every task of the batch."""
        return sum(r.messages for results in self.results.values() for r in results)

    @property
    def late(self) -> int:
        """Messages event-time windows found late in this batch (dropped or routed)."""
        return sum(r.late for results in self.results.values() for r in results)


@dataclass
class RunReport:
    """What :meth:`TestRunner.run` (or :meth:`TestRunner.drain`) did: batches per job, messages read, late
    messages, whether every task of every job saw all its inputs end, and (drain) the drain's id once every
    task of every job drained."""

    batches: dict[str, int] = field(default_factory=dict)
    messages: int = 0
    late: int = 0
    ended: bool = False
    drained: str | None = None


@dataclass
class _Fault:
    step: CommitStep
    task: str | None
    batch: int | None
    job: str | None
    skip: int = 0
    action: Any = None  # None: raise InjectedFault; an exception: raise it; else call it and go on


class TestRunner:
    """Runs a job's tasks in this process over in-memory streams (see the module docstring).

    ``config`` is the job's config (``task.class`` or ``app.class`` and whatever else it needs);
    :meth:`of` builds it from a class. Streams added with :meth:`add_input` / :meth:`add_output` become
    streams of the ``inmemory`` system (their system's factory is replaced); stores, task checkpoints and
    the blob store go to ``work_dir`` (default: a temp dir removed by :meth:`close`). Every batch is
    planned at the time of ``clock`` (a :class:`~sparza.clock.ManualClock` starting at ``start_time_ms``),
    which moves ``tick_ms`` after each batch and with :meth:`advance_time`.

    ``claim=True`` makes the runner hold each job's standalone claim as processor ``processor_id``, as
    ``sparza run`` does: taken (and older holders fenced) before the first batch, renewed before every
    batch, released by :meth:`close`; its expiry is timed by ``clock``. ``containers`` (container mode): how many
    containers the process runs; ``threaded_commits``: commits in the containers' threads, beside processing.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, config: Mapping[str, Any] | None = None, *, work_dir: str | Path | None = None,
                 start_time_ms: int = DEFAULT_START_MS, tick_ms: int = 1000, clock: ManualClock | None = None,
                 claim: bool = False, processor_id: str = "0", containers: int = 1,
                 threaded_commits: bool = False) -> None:
        self._values: dict[str, str] = {k: str(v) for k, v in (config or {}).items()}
        self._owns_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="sparza-testrunner-") if work_dir is None else work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._id = uuid.uuid4().hex[:12]
        self.namespace = f"testrunner-{self._id}"
        self.clock = clock if clock is not None else ManualClock(start_time_ms)
        self.tick_ms = int(tick_ms)
        self.claim = claim
        self.processor_id = processor_id
        self._state_dir = self.work_dir / "state"
        self._owns_namespace = True
        self._streams: dict[SystemStream, tuple[int, bool]] = {}  # stream -> (partitions, is input)
        self._buffered: list[tuple[SystemStream, list[Any]]] = []
        self._jobs: list[HostedJob] = []
        self.containers = int(containers)
        self.threaded_commits = threaded_commits
        self._process: RunnerProcess | None = None
        self._fired: list[str] = []  # the InjectedFault messages of the current round
        self._wrappers: list[EngineWrapper] = []
        self._faults: list[_Fault] = []
        self._app_serdes: dict[SystemStream, tuple[Serde, Serde | None]] = {}
        self._app_inputs: dict[SystemStream, Serde] = {}  # an application's declared input serdes
        self._config: Config | None = None
        self.warnings: list[str] = []
        """Config warnings ``sparza run`` would print (Samza keys sparza does not use, unused keys)."""

    # --- building ------------------------------------------------------------------------------
    @classmethod
    def of(cls, target: type | str, config: Mapping[str, Any] | None = None, **kwargs: Any) -> TestRunner:
        """A runner for a ``StreamTask`` class (``task.class``) or an application class (one with
        ``describe(app)``: ``app.class``), given as a class or a dotted path; ``config`` adds the rest."""
        path = target if isinstance(target, str) else _dotted_path(target)
        from sparza.systems import load_object

        loaded = load_object(path, "TestRunner.of")
        key = "app.class" if isinstance(loaded, Application) else "task.class"
        values = {"job.name": _job_name(path), **{k: str(v) for k, v in (config or {}).items()}, key: path}
        return cls(values, **kwargs)

    def add_config(self, values: Mapping[str, Any] | None = None, /, **keys: Any) -> TestRunner:
        """Set config keys (before the first batch); ``keys`` use ``_`` for ``.`` (``task_window_ms=1000``)."""
        self._not_started("add_config")
        self._values.update({k: str(v) for k, v in (values or {}).items()})
        self._values.update({k.replace("_", "."): str(v) for k, v in keys.items()})
        return self

    def add_input(self, stream: str, messages: Iterable[Any] | Mapping[int, Iterable[Any]] = (), *,
                  partitions: int = 1, bounded: bool = False) -> TestRunner:
        """Declare the input ``system.stream`` with ``partitions`` partitions (before the first batch) and append
        ``messages``, or append more to an input declared before (at any time, e.g. between batches).

        ``messages``: :class:`TestMessage`, :func:`watermark` / :func:`end_of_stream` markers, or bare values
        (key None); or ``{partition: [...]}``. ``bounded=True`` makes the stream end at what it holds when the
        job starts (``systems.<s>.streams.<x>.bounded``), so tasks get end-of-stream.
        """
        ss = _parse(stream)
        if ss not in self._streams:
            self._not_started(f"add_input of the new stream {ss}")
            if partitions < 1:
                raise TestInputError(f"add_input({ss}): partitions must be at least 1, got {partitions}")
            self._streams[ss] = (int(partitions), True)
            if bounded:
                self._values[f"systems.{ss.system}.streams.{ss.stream}.bounded"] = "true"
            # The test gives the first messages: a task starts at the oldest offset of its inputs.
            self._values.setdefault(f"systems.{ss.system}.streams.{ss.stream}.samza.offset.default", "oldest")
        items = _flatten(ss, messages)
        if self._config is None:
            self._buffered.append((ss, items))
        else:
            self._write(ss, items)
        return self

    def grow_input(self, stream: str, partitions: int) -> TestRunner:
        """Give the input ``system.stream`` ``partitions`` partitions in all (more than it has), as a Kafka topic given
        more partitions; at the next batch the job stops or regroups its tasks as ``job.partition.expansion`` says
        (:mod:`sparza.engine.partitions`). Messages for the new partitions can then be added with :meth:`add_input`."""
        from sparza.systems import SupportsPartitionGrowth
        from sparza.systems.inmemory import InMemorySystemAdmin

        ss = _parse(stream)
        if ss not in self._streams or not self._streams[ss][1]:
            raise TestInputError(f"grow_input({ss}): not an input of this runner (add it with add_input first)")
        self._start()
        admin: SupportsPartitionGrowth = InMemorySystemAdmin(ss.system, self._started_config())
        admin.grow_stream(ss.stream, partitions)
        self._streams[ss] = (int(partitions), True)
        return self

    def add_output(self, stream: str, *, partitions: int = 1) -> TestRunner:
        """Declare an output ``system.stream`` the job writes, with ``partitions`` partitions."""
        ss = _parse(stream)
        self._not_started(f"add_output of {ss}")
        if partitions < 1:
            raise TestInputError(f"add_output({ss}): partitions must be at least 1, got {partitions}")
        if ss in self._streams and self._streams[ss][1]:
            raise TestInputError(f"{ss} is already an input of this runner")
        self._streams[ss] = (int(partitions), False)
        return self

    @property
    def now_ms(self) -> int:
        """The clock's time (epoch ms): when the next batch is planned."""
        return self.clock.now_ms

    def advance_time(self, ms: int) -> TestRunner:
        """Move processing time forward: the next batch is planned ``ms`` later (window timers, idle timeouts),
        and claims expire by it."""
        if ms < 0:
            raise TestInputError(f"advance_time: time only moves forward, got {ms} ms")
        self.clock.advance(ms=int(ms))
        return self

    def fail_at(self, step: CommitStep | str, *, task: str | None = None, batch: int | None = None,
                job: str | None = None, skip: int = 0, error: BaseException | None = None) -> TestRunner:
        """Fail once, right after commit ``step`` (e.g. ``"after-flush"``) of ``task`` (``"Partition 0"``; None:
        the first task to get there) in ``batch`` (the runtime's batch number; None: the next batch) of ``job``
        (an application's stage name; None: any), after ``skip`` earlier matches went by. The batch then raises
        :class:`InjectedFault`, or ``error`` (e.g. a storage error) wrapped as a task attempt failure."""
        self._faults.append(_Fault(_step(step, "fail_at"), task, batch, job, skip, error))
        return self

    def call_at(self, step: CommitStep | str, action: Any, *, task: str | None = None, batch: int | None = None,
                job: str | None = None, skip: int = 0) -> TestRunner:
        """Call ``action(task, step, batch)`` once, right after commit ``step`` (matched as :meth:`fail_at`
        matches), then let the commit go on: the task's process is paused there while ``action`` runs (another
        processor taking over, an input lost). If ``action`` raises, the commit fails with it."""
        self._faults.append(_Fault(_step(step, "call_at"), task, batch, job, skip, action))
        return self

    def wrap_engines(self, wrap: EngineWrapper) -> TestRunner:
        """Container mode: call ``wrap(engine)`` with every :class:`~sparza.engine.job.EngineJob` a container of this
        runner builds, now and after restarts, before its tasks run there; ``wrap`` may put wrappers around the
        engine's real objects (``engine.checkpoints``): a fault raised inside one, e.g.
        :class:`~sparza.engine.inprocess.ContainerKilled`, lands inside the commit step that called it."""
        self._wrappers.append(wrap)
        if self._process is not None and self._process.alive:
            self._process.host.wrap_running(wrap)
        return self

    def clear_wrappers(self) -> TestRunner:
        """Forget every :meth:`wrap_engines` wrapper (engines wrapped already keep theirs until the next restart)."""
        self._wrappers.clear()
        return self

    @property
    def pending_faults(self) -> int:
        """How many :meth:`fail_at` / :meth:`call_at` points have not been reached yet."""
        return len(self._faults)

    def clear_faults(self) -> TestRunner:
        """Forget every fault point not reached yet."""
        self._faults.clear()
        return self

    # --- running -------------------------------------------------------------------------------
    @property
    def jobs(self) -> list[str]:
        """The jobs this runner runs: the job name, or an application's stage names in plan order."""
        self._start()
        return [job.name for job in self._jobs]

    @property
    def mode(self) -> str:
        """``containers`` (the default, ``job.execution.mode``) or ``batches``: see :mod:`sparza.testing.hosts`."""
        from sparza.runtime.driver.containers import execution_mode

        return str(execution_mode(self._started_config()))

    @property
    def host(self) -> Any:
        """The :class:`~sparza.engine.inprocess.InProcessHost` of this runner's process (container mode; started on
        first use): its containers, and the faults a host meets (kill, add_container, remove_container)."""
        return self._container_process().host

    def run_batch(self) -> BatchReport:
        """Run one batch of every task that has one (an application's stages as their containers schedule them),
        then move the clock ``tick_ms`` on. A job with nothing new plans no batch (unless a ``task.window.ms``
        timer is due)."""
        self._start()
        report = BatchReport()
        if self.mode == "batches":
            for batch_job in self._batch_jobs():
                self._hold_claim(batch_job)
                report.results[batch_job.name] = batch_job.step(self.now_ms)
            self.clock.advance(ms=self.tick_ms)
            return report
        jobs = self._container_jobs()
        with self._stopping_on_failure(jobs):
            for job in jobs:
                self._hold_claim(job)
                self._ensure_joined(job, once=False)
            outcomes = self._round(jobs)
            for job in jobs:
                report.results[job.name] = outcomes[job.name].results
        self.clock.advance(ms=self.tick_ms)
        return report

    def run(self, max_batches: int = 10_000) -> RunReport:
        """What ``sparza run --once`` does: every job (stage after stage) processes everything its inputs hold
        now, in batches of at most ``task.max.batch.messages`` per partition, then stops. Raises
        :class:`~sparza.engine.errors.JobStalledError` when tasks wait for a broadcast publication that cannot come
        (where ``--once`` would wait for ever)."""
        self._start()
        if self.mode == "batches":
            return self._run_batches(max_batches)
        report = RunReport()
        jobs = self._container_jobs()
        for job in jobs:
            with self._stopping_on_failure(jobs):
                self._hold_claim(job)  # a processor refused the claim runs nothing
                self._ensure_joined(job, once=False)
                idle = 0
                for _ in range(max_batches):
                    self._hold_claim(job)
                    outcomes = self._round([j for j in jobs if j.member is not None])
                    self.clock.advance(ms=self.tick_ms)
                    for name, outcome in outcomes.items():
                        if outcome.results:
                            report.batches[name] = report.batches.get(name, 0) + 1
                            report.messages += sum(r.messages for r in outcome.results)
                            report.late += sum(r.late for r in outcome.results)
                    if outcomes[job.name].progressed:
                        idle = 0
                        continue
                    # Two rounds in a row in which the job ran nothing (the first may only have settled a hand-over):
                    # caught up, unless tasks wait for a broadcast publication that nothing left to read will bring
                    # (`sparza run --once` would wait for ever).
                    idle += 1
                    if idle < 2:
                        continue
                    waits = job.waits()
                    if waits:
                        from sparza.engine.errors import broadcast_stall
                        from sparza.engine.planner import describe_waits

                        raise broadcast_stall(f"job {job.name}", describe_waits(waits))
                    break
                else:
                    raise TestInputError(f"job {job.name} still had input after {max_batches} batches; raise "
                                         "max_batches or task.max.batch.messages")
        report.ended = all(job.ended for job in self._jobs)
        return report

    def _run_batches(self, max_batches: int) -> RunReport:
        report = RunReport()
        for job in self._batch_jobs():
            job.freeze()
            try:
                for _ in range(max_batches):
                    self._hold_claim(job)
                    results = job.step(self.now_ms)
                    self.clock.advance(ms=self.tick_ms)
                    if not results:
                        waits = job.waits()
                        if waits:  # held, not caught up: `sparza run --once` would wait for ever
                            from sparza.engine.errors import broadcast_stall
                            from sparza.engine.planner import describe_waits

                            raise broadcast_stall(f"job {job.name}", describe_waits(waits))
                        break
                    report.batches[job.name] = report.batches.get(job.name, 0) + 1
                    report.messages += sum(r.messages for r in results)
                    report.late += sum(r.late for r in results)
                else:
                    raise TestInputError(f"job {job.name} still had input after {max_batches} batches; raise "
                                         "max_batches or task.max.batch.messages")
            finally:
                job.thaw()
        report.ended = all(job.ended for job in self._jobs)
        return report

    def drain(self, max_batches: int = 10_000) -> RunReport:
        """What ``sparza run --drain`` does: request a drain of every job now (each source partition ends at the
        offset it has now), then run batches until every task of every job drained: it processed its input up
        to there, fired ``on_drain`` (open windows and sessions fire, joins emit their unmatched messages where
        they say so) and sent its drain downstream. The jobs may run again afterwards, with the input that came
        since: a drain is not end-of-stream."""
        from sparza.runtime.driver.drainmonitor import drain_completed, finish_drain, request_drain

        self._start()
        for job in self._jobs:  # as sparza run: a processor refused the claim requests nothing
            self._hold_claim(job)
        request, _ = request_drain([job.config for job in self._jobs], now_ms=self.now_ms)
        report = RunReport()
        pending = list(self._jobs)
        for job in pending:
            job.monitor.enabled = True  # as `sparza run --drain`, whatever job.drain-monitor.enabled says
            job.read_drain_now()
        containers = self.mode != "batches"
        if containers:
            for member in self._container_jobs():
                self._container_process().drain(member, request.to_json())
        with self._stopping_on_failure(self._container_jobs() if containers else []):
            idle = 0
            for _ in range(max_batches):
                ran = False
                if containers:
                    for member in self._container_jobs():
                        self._hold_claim(member)
                        self._ensure_joined(member, once=False)
                    outcomes = self._round(self._container_jobs())
                    batches = {name: outcome.results for name, outcome in outcomes.items()}
                    ran = any(outcome.progressed for outcome in outcomes.values())
                else:
                    batches = {}
                    for batch_job in self._batch_jobs():
                        if batch_job in pending:
                            self._hold_claim(batch_job)
                            batches[batch_job.name] = batch_job.step(self.now_ms)
                for name, results in batches.items():
                    if results:
                        ran = True
                        report.batches[name] = report.batches.get(name, 0) + 1
                        report.messages += sum(r.messages for r in results)
                        report.late += sum(r.late for r in results)
                self.clock.advance(ms=self.tick_ms)
                # A job has drained when each of its tasks committed the drain's completion (a job whose tasks
                # completed it before a restart plans nothing more: its checkpoints say so).
                pending = [job for job in pending if not drain_completed(job.config, request, [job.job.job_key])]
                if not pending:
                    for member in self._container_jobs():
                        self._container_process().leave(member)
                    finish_drain(self._jobs[0].config)
                    for job in self._jobs:
                        job.read_drain_now()
                    report.drained = request.id
                    report.ended = all(job.ended for job in self._jobs)
                    return report
                idle = 0 if ran else idle + 1
                if idle >= (2 if containers else 1):  # containers: the first idle round may only settle a hand-over
                    raise TestInputError(f"the drain of {', '.join(j.name for j in pending)} cannot complete: no job "
                                         "has anything left to run (an upstream job writes nothing more?)")
        raise TestInputError(f"jobs {', '.join(j.name for j in pending)} had not drained after {max_batches} batches")

    def restart(self, *, keep_plan: bool = True, replay_last_batch: bool = False, crashed: bool = True,
                config: Mapping[str, Any] | None = None) -> TestRunner:
        """Stand for a restarted ``sparza run`` process: the old process dies (its containers are killed: every
        in-memory task, open store and producer is dropped, nothing it did not commit survives) and the next batch
        restores from task checkpoints and store snapshots; a batch that was in flight is planned again from its
        task's checkpoint (its open intent replays it exactly). ``keep_plan`` and ``replay_last_batch`` are kept for
        callers written for an offset log beside the checkpoints; no host keeps one, so they change nothing.
        ``crashed`` (the default) leaves a held job claim behind, as a killed process does (the new process is
        refused until it expires, see :meth:`advance_time`); False releases it first, as a clean stop does.
        ``config`` changes keys for the new process (a fixed task, a setting)."""
        from sparza.engine.worker import WORKER

        del keep_plan, replay_last_batch
        self._start()
        self._kill_process()
        for job in self._jobs:
            WORKER.forget(job.config)
            if not crashed:
                job.release_claim()
            job.claim = None  # a new process has no claim yet (the old one's document may still be live)
        if config is not None:
            old = {job.name: job for job in self._jobs}
            self._values.update({k: str(v) for k, v in config.items()})
            for job in self._jobs:
                unregister_fault_hook(self._hook_id(job.name))
            self._jobs = []
            self._build_jobs(self._validated())
            for job in self._jobs:
                if job.name in old:
                    job.carry(old[job.name])
                    job.claim = None
        for job in self._jobs:
            job.restarted()
        return self

    # --- the container mode's process ------------------------------------------------------------
    def _container_process(self) -> RunnerProcess:
        self._start()
        if self._process is None or not self._process.alive:
            self._process = RunnerProcess(self.clock, containers=self.containers,
                                          threaded_commits=self.threaded_commits, wrappers=self._wrappers)
        return self._process

    def _container_jobs(self) -> list[ContainerJob]:
        return [job for job in self._jobs if isinstance(job, ContainerJob)]

    def _batch_jobs(self) -> list[BatchJob]:
        return [job for job in self._jobs if isinstance(job, BatchJob)]

    def _kill_process(self) -> None:
        """The process dies where it stands (see :meth:`restart`)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
        for job in self._container_jobs():
            job.member = None

    def _drain_request(self, job: HostedJob) -> dict[str, Any] | None:
        """The job's drain request as its driver's monitor reads it (None: none): read once its poll interval passed on
        the runner's clock, as a processor does (a drain the runner requests or removes is read at once)."""
        request = job.monitor.poll()
        return request.to_json() if request is not None else None

    def _ensure_joined(self, job: ContainerJob, *, once: bool) -> None:
        process = self._container_process()
        if job.member is not None and job.member.has_left:
            process.leave(job)
        if job.member is None:
            process.join(job, once=once, drain=self._drain_request(job))
        else:
            process.drain(job, self._drain_request(job))

    def _round(self, jobs: list[ContainerJob]) -> dict[str, RoundOutcome]:
        """One round of the process; raises what the tasks met, as ``sparza run`` reports it: a failed batch as
        :class:`~sparza.runtime.JobFailedError`, a retry-able attempt (the task waits to retry in its container) as
        :class:`~sparza.engine.executor.TaskAttemptError` (:class:`InjectedFault` when the test injected it), tasks
        another processor took over as :class:`~sparza.engine.errors.TasksFencedError`."""
        from sparza.engine.errors import tasks_failed
        from sparza.engine.executor import TaskAttemptError

        self._fired.clear()
        process = self._container_process()
        containers_lost = process.host.manager.lost_containers
        process.round()
        outcomes = {job.name: job.collect() for job in jobs}
        if process.host.manager.lost_containers != containers_lost:  # tasks moved: what they did not commit runs again
            for outcome in outcomes.values():
                outcome.moved = True
        failed = [r.error for o in outcomes.values() for r in o.failed]
        if failed:
            raise tasks_failed(failed)  # as sparza run reports them
        retrying = [e for o in outcomes.values() for e in o.retrying]
        lost = [e for o in outcomes.values() for e in o.lost]
        if lost:  # only a fenced-off checkpoint write loses a task: the job stops at once, as sparza run's does
            raise tasks_failed(list[str | None](lost))
        injected = [f for f in self._fired if not isinstance(f, BaseException)]
        if retrying and injected:
            raise InjectedFault(injected[0])
        if retrying:
            raise TaskAttemptError("; ".join(retrying))
        for job in jobs:
            if job.regrouping():  # as JobRunner: the job leaves and its tasks start again, regrouped
                self._container_process().leave(job)
                job.open()
                job.regroups += 1
                self._container_process().join(job, once=False, drain=self._drain_request(job))
                outcomes[job.name].regrouped = True
            member = job.member
            if member is not None and member.error is not None:
                raise member.error
            if member is not None and member.gave_up:
                from sparza.runtime import JobFailedError

                raise JobFailedError(f"job {job.name}: {member.lost} containers were lost in a row without a commit: "
                                     f"{member.notices[-1] if member.notices else ''}")
            if job.drained:
                self._finish_drain(job)
        return outcomes

    def _finish_drain(self, job: HostedJob) -> None:
        if job.drained and isinstance(job, ContainerJob) and job.drain_json is not None:
            # What a processor does when it stops drained: the request goes once every task of every job drained.
            from sparza.runtime.driver.drainmonitor import finish_drain

            if finish_drain(job.config) is not None:
                for each in self._jobs:  # no stage may plan under the request just removed
                    each.read_drain_now()

    @contextlib.contextmanager
    def _stopping_on_failure(self, jobs: list[ContainerJob]) -> Iterator[None]:
        """A call that fails stops the jobs it ran, as a failed ``sparza run`` does (their tasks release what they
        hold; the next call starts them from their checkpoints). What is no ``Exception`` (the test's stand-in for a
        process dying mid-commit) kills the process instead: nothing of it runs any more."""
        try:
            yield
        except Exception:
            process = self._process
            if process is not None and process.alive:
                for job in jobs:
                    with contextlib.suppress(Exception):
                        process.leave(job)
            raise
        except BaseException:
            self._kill_process()
            raise

    def new_processor(self, processor_id: str) -> TestRunner:
        """Another processor of this job (as a second ``sparza run --processor-id``): the same streams, work dir,
        blob store, checkpoints and clock, its own local state dir and in-memory tasks, holding the job claim
        like this one (``claim=True``). Closing it leaves the shared streams and work dir alone."""
        self._start()
        other = TestRunner(self._values, work_dir=self.work_dir, clock=self.clock, tick_ms=self.tick_ms, claim=True,
                           processor_id=processor_id, containers=self.containers,
                           threaded_commits=self.threaded_commits)
        other._owns_dir = False
        other._owns_namespace = False
        other.namespace = self.namespace
        other._state_dir = self.work_dir / f"state-{processor_id}"
        other._streams = dict(self._streams)
        other._app_serdes = dict(self._app_serdes)
        other._app_inputs = dict(self._app_inputs)
        return other

    # --- results -------------------------------------------------------------------------------
    def outputs(self, stream: str, *, key_serde: Serde | str | None = None, msg_serde: Serde | str | None = None,
                include_control: bool = False) -> list[OutputMessage]:
        """Every message of ``stream`` (an input, output or intermediate stream), partition by partition in
        offset order, deserialized with the given serdes, else the serdes an application declared for the
        output, else the stream's configured ones."""
        from sparza.systems.inmemory import InMemoryStreamError, stream_rows

        config = self._started_config()
        ss = _parse(stream)
        try:
            rows = stream_rows(ss.system, self._system_config(ss.system, config), ss.stream)
        except InMemoryStreamError:
            known = ", ".join(sorted(str(s) for s in self._streams)) or "none"
            raise TestInputError(f"{ss} is not a stream of this runner (declared: {known})") from None
        app_msg, app_key = self._app_serdes.get(ss, (None, None))
        kser = _serde(key_serde, config, ss, "key") if key_serde is not None or app_key is None else app_key
        mser = _serde(msg_serde, config, ss, "msg") if msg_serde is not None or app_msg is None else app_msg
        out: list[OutputMessage] = []
        for partition, items in sorted(rows.items()):
            for offset, row in enumerate(items):
                if row.type != MessageType.USER:
                    if include_control:
                        out.append(OutputMessage(None, MessageType(row.type), partition, offset, row.timestamp))
                    continue
                key = kser.from_bytes(row.key) if row.key is not None else None
                value = mser.from_bytes(row.value) if row.value is not None else None
                out.append(OutputMessage(key, value, partition, offset, row.timestamp))
        return out

    def outputs_by_partition(self, stream: str, **kwargs: Any) -> dict[int, list[OutputMessage]]:
        """:meth:`outputs` grouped by partition (every partition present, empty ones too)."""
        from sparza.systems.inmemory import stream_rows

        ss = _parse(stream)
        out: dict[int, list[OutputMessage]] = {
            p: [] for p in stream_rows(ss.system, self._system_config(ss.system, self._started_config()), ss.stream)}
        for message in self.outputs(stream, **kwargs):
            out[message.partition].append(message)
        return out

    def values(self, stream: str, **kwargs: Any) -> list[Any]:
        """Only the deserialized values of :meth:`outputs`."""
        return [m.value for m in self.outputs(stream, **kwargs)]

    def store(self, name: str, *, job: str | None = None) -> dict[str, dict[Any, Any]]:
        """The committed contents of store ``name``: ``{task: {key: value}}`` for every task of the job that
        has it (a task that committed nothing has ``{}``). ``job`` picks an application's stage when several
        have a store of that name."""
        out: dict[str, dict[Any, Any]] = {}
        for task, items in self.store_items(name, job=job).items():
            try:
                out[task] = dict(items)
            except TypeError:
                raise TestInputError(f"store {name!r} has keys that cannot be dict keys (e.g. lists); read it "
                                     "with store_items()") from None
        return out

    def store_items(self, name: str, *, job: str | None = None) -> dict[str, list[tuple[Any, Any]]]:
        """As :meth:`store`, as ``(key, value)`` pairs in key order."""
        from sparza.engine.stores import TaskStores

        self._start()
        owners = [j for j in self._jobs if name in j.job.store_names and (job is None or j.name == job)]
        if not owners:
            every = sorted({s for j in self._jobs for s in j.job.store_names})
            raise TestInputError(f"no store {name!r}{f' in job {job!r}' if job else ''}; the stores are: "
                                 f"{', '.join(every) or 'none'}")
        if len(owners) > 1:
            raise TestInputError(f"store {name!r} exists in jobs {', '.join(j.name for j in owners)}: pass job=")
        owner = owners[0]
        checkpoints = owner.checkpoints.read_all()
        out: dict[str, list[tuple[Any, Any]]] = {}
        for model in owner.tasks:
            cp = checkpoints.get(model.name)
            if cp is None or not cp.committed or name not in cp.stores:
                out[model.name] = []
                continue
            stores = TaskStores(owner.job, model.name, MetricsRegistry())
            out[model.name] = stores.read_committed(name, cp.batch)
        return out

    def checkpoints(self, *, job: str | None = None) -> dict[str, Any]:
        """The task checkpoints (:class:`~sparza.engine.checkpoint.TaskCheckpoint`) of ``job`` (an application's
        stage name; None: the only job) as stored now, by task: offsets, snapshot ids, generation."""
        self._start()
        owners = [j for j in self._jobs if job is None or j.name == job]
        if len(owners) != 1:
            raise TestInputError(f"checkpoints(job=...): name one of the jobs {', '.join(self.jobs)}"
                                 if owners else f"no job {job!r}; the jobs are: {', '.join(self.jobs)}")
        return dict(owners[0].checkpoints.read_all())

    def metrics(self, *, job: str | None = None) -> MetricsRegistry:
        """The metrics of ``job`` (an application's stage name; None: the only job) as ``sparza run``'s driver keeps
        them: every task result's counts merged (a task's own under ``<task>:<group>``) and the driver side's own,
        such as its Azure Storage requests (``storage.<scope>`` groups, :mod:`sparza.azure.requests`)."""
        self._start()
        owners = [j for j in self._jobs if job is None or j.name == job]
        if len(owners) != 1:
            raise TestInputError(f"metrics(job=...): name one of the jobs {', '.join(self.jobs)}"
                                 if owners else f"no job {job!r}; the jobs are: {', '.join(self.jobs)}")
        return owners[0].metrics

    @property
    def state_dir(self) -> Path:
        """This processor's local state dir (``job.logged.store.base.dir``): delete it to lose the local state."""
        return self._state_dir

    def stores(self) -> dict[str, dict[str, dict[Any, Any]]]:
        """Every task store of every job: ``{store: {task: {key: value}}}`` (adjunct stores are copies of
        their input streams and are not listed)."""
        from sparza.state.adjunct import AdjunctConfig

        self._start()
        owned = [(job, name) for job in self._jobs for name in job.job.store_names
                 if not AdjunctConfig.from_config(job.config).is_adjunct_store(name)]
        out: dict[str, dict[str, dict[Any, Any]]] = {}
        for job, name in owned:
            shared = sum(1 for _, other in owned if other == name) > 1
            out[f"{job.name}/{name}" if shared else name] = self.store(name, job=job.name)
        return out

    @property
    def config(self) -> Config:
        """The config the jobs run with (after the runner's overrides and Samza-spelling translation)."""
        return self._started_config()

    # --- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Drop the in-memory streams, the cached tasks and (if the runner made it) the work dir."""
        from sparza.engine.worker import WORKER
        from sparza.systems.inmemory import drop_namespace

        self._kill_process()  # every round committed what it ran: nothing is lost by stopping here
        for job in self._jobs:
            WORKER.forget(job.config)
            unregister_fault_hook(self._hook_id(job.name))
            if job.claim is not None and job.claim.held:
                job.release_claim()
        if self._owns_namespace:
            drop_namespace(self.namespace)
        if self._owns_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> TestRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals -----------------------------------------------------------------------------
    def _not_started(self, what: str) -> None:
        if self._config is not None:
            raise TestInputError(f"{what}: the job has started (a batch ran); declare streams and config before "
                                 "the first run_batch()/run(), or append to declared inputs with add_input")

    def _hook_id(self, job: str) -> str:
        return f"{self._id}/{job}"

    def _system_config(self, system: str, config: Config) -> Config:
        return config if f"systems.{system}.inmemory.namespace" in config else config.with_overrides(
            {f"systems.{system}.inmemory.namespace": self.namespace})

    def _started_config(self) -> Config:
        self._start()
        assert self._config is not None
        return self._config

    def _final_values(self) -> dict[str, str]:
        values = dict(self._values)
        if "task.class" not in values and "app.class" not in values:
            raise TestInputError("no task.class or app.class: build the runner with TestRunner.of(MyTask) or give "
                                 "one of them in the config")
        values.setdefault("job.name", "test")
        if "app.class" not in values and not values.get("task.inputs") and not values.get("task.broadcast.inputs"):
            # As Samza's TestRunner: the inputs the test adds are the task's inputs.
            values["task.inputs"] = ",".join(str(ss) for ss, (_, is_input) in self._streams.items() if is_input)
        for ss in self._streams:
            values[f"systems.{ss.system}.samza.factory"] = "inmemory"
        for key in list(values):
            if key.endswith(".samza.factory") and key.startswith("systems.") and values[key] == "inmemory":
                values[f"{key[:-len('.samza.factory')]}.inmemory.namespace"] = self.namespace
        # State stays in the work dir, never where the job's production config points.
        values.update({
            "job.logged.store.base.dir": str(self._state_dir),
            "blob.store.manager.factory": "local",
            "blob.store.local.root": str(self.work_dir / "blobstore"),
            "job.checkpoint.factory": "blobstore",
            "job.coordinator.factory": "standalone",
        })
        return values

    def _validated(self) -> Config:
        from sparza.config.check import validate_for_run

        config = validate_for_run(self._final_values(), warn=self.warnings.append)
        self._config = config
        return config

    def _start(self) -> None:
        if self._config is not None:
            return
        from sparza.systems import StreamSpec
        from sparza.systems.inmemory import InMemorySystemAdmin

        config = self._validated()
        try:
            for ss, (partitions, _) in self._streams.items():
                InMemorySystemAdmin(ss.system, config).create_stream(StreamSpec(ss.stream, partitions))
            self._build_jobs(config, first=True)
        except BaseException:
            # Not started: the next call starts again (and fails again) instead of running no job at all.
            for job in self._jobs:
                unregister_fault_hook(self._hook_id(job.name))
            self._jobs, self._config = [], None
            raise

    def _build_jobs(self, config: Config, *, first: bool = False) -> None:
        """Plan the job (an application's stages) and build one :class:`_Job` per stage; on the first start,
        write the buffered inputs too."""
        if APP_CLASS.get(config) is not None and APP_STAGE.get(config) is None:
            from sparza.api import OpKind, build_application, plan_application

            plan = plan_application(config)
            plan.create_streams()
            app = build_application(config)
            for descriptor in app.inputs:
                self._app_inputs[descriptor.stream] = descriptor.serde
            for op in app.ops:
                if op.kind == OpKind.SEND_TO and op.params["output"].table is None:
                    out = op.params["output"]
                    self._app_serdes[out.stream] = (out.serde, out.key_serde)
            stages = [(s.name, s.config) for s in plan.stages]
        else:
            stages = [(JOB_NAME.require(config), config)]
        # Inputs are written before any planner exists: a bounded stream ends at what it holds now.
        if first:
            for ss, items in self._buffered:
                self._write(ss, items)
            self._buffered.clear()
        from sparza.runtime.driver.containers import execution_mode
        from sparza.runtime.driver.preflight import check_application, check_job

        if APP_CLASS.get(config) is not None and APP_STAGE.get(config) is None:
            check_application(config)
        checked: dict[str, MetricsRegistry] = {}
        for name, stage_config in stages:
            checked[name] = MetricsRegistry()  # the checks' storage requests, counted as the job's
            check_job(stage_config, metrics=checked[name])  # what `sparza run` checks before Spark starts
        for name, stage_config in stages:
            hooked = stage_config.with_overrides(with_faults(stage_config, **{FAULT_HOOK.key: self._hook_id(name)}))
            register_fault_hook(self._hook_id(name), self._fault_hook(name))
            kind = BatchJob if execution_mode(hooked) == "batches" else ContainerJob
            job = kind(name, hooked, clock=self.clock)
            job.metrics.merge_changes(checked[name].changes())
            self._jobs.append(job)

    def _hold_claim(self, job: HostedJob) -> None:
        if self.claim:
            job.hold_claim(self.processor_id, self.clock)

    def _fault_hook(self, job: str) -> Any:
        def hook(task: str, step: CommitStep, batch: int) -> None:
            for fault in self._faults:
                if (fault.step is step and fault.task in (None, task) and fault.batch in (None, batch)
                        and fault.job in (None, job)):
                    if fault.skip > 0:
                        fault.skip -= 1
                        return
                    self._faults.remove(fault)
                    if fault.action is None:
                        message = (f"injected failure in task '{task}' of {job} {step.value.replace('-', ' ')} of "
                                   f"batch {batch}")
                        self._fired.append(message)
                        raise InjectedFault(message)
                    if isinstance(fault.action, BaseException):
                        raise fault.action
                    fault.action(task, step, batch)
                    return

        return hook

    def _check_reads_control(self, ss: SystemStream, item: ControlInput) -> None:
        config = self._started_config()
        if _reads_control(config) or STREAM_INTERMEDIATE.get(config, system=ss.system, stream=ss.stream):
            return
        what = "watermark()" if item.type == MessageType.WATERMARK else "end_of_stream()"
        raise TestInputError(f"{what} in {ss}: {TASK_CLASS.get(config)} does not listen to control messages "
                             "(it is no WatermarkListenerTask), so the runtime would skip it; end its input with "
                             "add_input(..., bounded=True) instead")

    def _write(self, ss: SystemStream, items: list[Any]) -> None:
        from sparza.control.messages import ControlMessage, encode_body
        from sparza.systems.inmemory import InMemorySystemProducer

        config = self._started_config()
        partitions = self._streams[ss][0]
        producer = InMemorySystemProducer(ss.system, config)
        producer.register(_SOURCE)
        for index, item in enumerate(items):
            try:
                if isinstance(item, ControlInput):
                    self._check_reads_control(ss, item)
                    targets = range(partitions) if item.partition is None else [item.partition]
                    body = (encode_body(ControlMessage.watermark(item.timestamp, None, 0))
                            if item.type == MessageType.WATERMARK and item.timestamp is not None else b"")
                    for p in targets:
                        producer.send(_SOURCE, OutgoingMessageEnvelope(ss, body, partition=p, timestamp=item.timestamp,
                                                                       type=item.type))
                    continue
                message = item if isinstance(item, TestMessage) else TestMessage(item)
                declared = self._app_inputs.get(ss)
                if declared is not None and message.value is not None and not isinstance(message.value, bytes):
                    # The serde the application reads this input with (app.input(..., serde=...)).
                    message = TestMessage(declared.to_bytes(message.value), message.key, message.partition,
                                          message.timestamp)
                if message.timestamp is not None and (not isinstance(message.timestamp, int)
                                                      or isinstance(message.timestamp, bool)):
                    raise TestInputError(f"timestamp must be epoch ms as an int, got {message.timestamp!r}")
                producer.send(_SOURCE, OutgoingMessageEnvelope(ss, message.value, key=message.key,
                                                               partition=message.partition,
                                                               timestamp=message.timestamp))
            except (SparzaError, ValueError, TypeError) as exc:
                producer.abandon(_SOURCE)
                raise TestInputError(
                    f"input message {index} of {ss} ({_short(item)}): {exc}. Give keys and values as bytes, or set "
                    f"systems.{ss.system}.streams.{ss.stream}.samza.key.serde / samza.msg.serde (e.g. string, json) "
                    "so the runner serializes them as the job reads them") from exc
        producer.flush(_SOURCE)


def _step(step: CommitStep | str, what: str) -> CommitStep:
    try:
        return step if isinstance(step, CommitStep) else CommitStep(step)
    except ValueError:
        raise TestInputError(f"{what}: {step!r} is not a commit step; use one of "
                             f"{', '.join(s.value for s in CommitStep)}") from None


def _reads_control(config: Config) -> bool:
    """Whether the job's tasks get control messages (the runtime gives them to TaskControl only then)."""
    from sparza.systems import load_object
    from sparza.task import WatermarkListenerTask

    if APP_CLASS.get(config) is not None or INTERMEDIATE_OUTPUTS.get(config):
        return True
    target = load_object(TASK_CLASS.require(config), "task.class")
    return issubclass(target, WatermarkListenerTask) if isinstance(target, type) else isinstance(
        target, WatermarkListenerTask)


def _flatten(ss: SystemStream, messages: Iterable[Any] | Mapping[int, Iterable[Any]]) -> list[Any]:
    if isinstance(messages, str | bytes):
        raise TestInputError(f"add_input({ss}): messages must be a list (or {{partition: list}}), not one "
                             f"{type(messages).__name__}")
    if not isinstance(messages, Mapping):
        return list(messages)
    items: list[Any] = []
    for partition, part in messages.items():
        if not isinstance(partition, int):
            raise TestInputError(f"add_input({ss}): partition keys must be ints, got {partition!r}")
        for item in part:
            if isinstance(item, TestMessage):
                if item.partition not in (None, partition):
                    raise TestInputError(f"add_input({ss}): a message under partition {partition} says partition "
                                         f"{item.partition}")
                items.append(TestMessage(item.value, item.key, partition, item.timestamp))
            elif isinstance(item, ControlInput):
                items.append(ControlInput(item.type, item.timestamp, partition))
            else:
                items.append(TestMessage(item, None, partition))
    return items


def _parse(stream: str) -> SystemStream:
    try:
        return SystemStream.parse(stream)
    except ValueError as exc:
        raise TestInputError(str(exc)) from None


def _serde(given: Serde | str | None, config: Config, ss: SystemStream, which: str) -> Serde:
    if given is not None and not isinstance(given, str):
        return given
    if isinstance(given, str):
        return serde_from_name(given, key=f"{which}_serde", config=config)
    return stream_serde(config, ss.system, ss.stream, which)


def _dotted_path(cls: type) -> str:
    qualname = getattr(cls, "__qualname__", "")
    if "<locals>" in qualname or not qualname:
        raise TestInputError(f"{cls!r} is defined inside a function: the runtime imports task and application "
                             "classes by dotted path, so define it at module level")
    return f"{cls.__module__}:{qualname}"


def _job_name(path: str) -> str:
    name = path.replace(":", ".").rsplit(".", 1)[-1]
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name).lower() or "test"


def _short(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 80 else text[:77] + "..."
