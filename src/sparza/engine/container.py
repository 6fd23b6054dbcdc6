"""A container: the process that runs tasks side by side (Samza's SamzaContainer), with no Spark in it.

A host starts a :class:`Container` and tells it, through :mod:`~sparza.engine.messages` commands, which jobs it
may run (:class:`~sparza.engine.messages.AddJob`) and which of their tasks to run or hand back
(:class:`~sparza.engine.messages.AssignTasks`, :class:`~sparza.engine.messages.RevokeTasks`). The container
reports through its :class:`ContainerHost` what each task did. Tasks come and go one by one: a task that moves
stops alone; the others never notice.

**The run loop.** One thread plans and processes; commits run beside it:

1. **Commands.** Apply what the host sent since the last pass (jobs added and removed, tasks assigned and
   revoked, drains, a stop).
2. **Commits that finished.** A task whose commit finished reports its result and is idle again.
3. **Released tasks.** A revoked task with no batch in flight closes its stores (they stay committed on disk, so
   whoever runs it next on this host reopens them in place) and is reported released.
4. **Due tasks.** A task is due when it is idle and its last batch started at least ``task.commit.ms`` ago. For
   each due task the loop asks its planner for the next batch (one metadata read per job and pass), reads and
   processes it (:meth:`~sparza.engine.instance.TaskInstance.process`) and hands its commit
   (:meth:`~sparza.engine.instance.TaskInstance.commit`) to the commit pool.
5. **Wait** for the next due time, a finished commit or a command (``task.poll.interval.ms`` at most).

**Restores run beside the loop too.** A task handed to a container (or retrying) first restores its stores to its
checkpoint: from the blob store, a second or more for a task that ran elsewhere. Done in its first batch, on the
loop's thread, that held up every other task of the container (4 tasks moved onto one container: its own 4 ran 2
batches in 3 s). So a task that has stores to restore starts in a pool of ``job.container.restore.threads`` threads
(:meth:`~sparza.engine.instance.TaskInstance.restore_stores`) and joins the rotation when they are open; until then
the loop never plans or processes it. The restore runs what the first batch ran before its stores opened, so each
error takes the path it took there: deleted snapshot blobs are recovered (SAMZA-2787, the task checkpoint names the
fresh snapshot), purged ones raise the ``RuntimeStateError`` that names the remedy, and whatever it raises is judged
like a failed first batch. A revoke (or the container closing) stops the restore before its next store; the task is
released only once the restore thread returned, so that thread never touches a store of a released task (its
restored dirs stay marked committed, except one whose snapshot the restore had to replace).

**Outputs are fenced first.** The restore step first fences the systems the task writes
(:class:`~sparza.systems.SupportsFencing`; Kafka: ``init_transactions``): those an open intent names (a batch that
began to flush and did not commit: its container died mid-commit), else those its checkpoint's ``outputs`` name.
An open transaction holds every ``read_committed`` reader of the partitions it wrote, whichever task's records follow
it: in a hand-over run every task's output stopped until the moved task's first batch began (1.7 s after the worker's
loss), not only the moved task's. And the opening of the producer no longer waits for the restore.

**Why commits run beside processing.** A commit is mostly waiting: the intent and checkpoint writes, the
producers' transactions, the snapshot upload. Run one after another in the loop (as Samza's run loop does with
``task.max.concurrency: 1``), the commits of every task a container hosts add up: with 32 tasks each committing
one message, a message waits for the 31 commits before its own. So a task's commit runs in a pool of
``job.container.commit.threads`` threads while the loop processes the other tasks. Each task has at most one
batch in flight (its next batch starts after its commit), so what is in flight is bounded by the task count,
the commits running at once by the pool, and a task's stores are never touched by two threads. Processing
stays on one thread: it is Python code, which one interpreter runs one thread at a time anyway.

**Failures stay with their task.** A batch that fails in a way a retry may cure (storage, a broker, a crash of
its producer) drops that task's in-memory state and the task alone retries from its checkpoint after a backoff
(``job.container.retry.backoff.ms``, doubled each time); after ``job.container.max.restarts`` failures in a row
without a commit it is reported failed. A deterministic failure (a poison message, a task exception, a bad
config) is reported at once: the job stops. A checkpoint write refused because a newer generation wrote (another
processor took the task over) drops the task: nothing more of it is flushed. One refused because someone of the same
generation wrote (a container the host gave up on, still finishing its batch) is a failure a retry cures: the task
starts again from the checkpoint as it is now.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparza.config import Config, Int, define_key
from sparza.engine.checkpoint import TaskCheckpoint
from sparza.engine.drain import DrainRequest
from sparza.engine.errors import CheckpointFencedError, RuntimeStateError
from sparza.engine.executor import TaskAttemptError, failed_attempt
from sparza.engine.instance import TaskInstance
from sparza.engine.job import EngineJob
from sparza.engine.jobconfig import JobConfig
from sparza.engine.messages import (
    AddJob,
    AssignTasks,
    Command,
    Event,
    JobReady,
    Ping,
    QueryStore,
    RemoveJob,
    RevokeTasks,
    SetDrain,
    StopContainer,
    TaskDone,
    TaskLost,
    TaskResult,
    TaskRetrying,
    TasksReleased,
    TaskWaiting,
)
from sparza.engine.model import TaskModel
from sparza.engine.partitions import RegroupNeeded, check_running
from sparza.engine.planner import BatchPlan, BatchPlanner, OffsetPastEndError, SspPosition
from sparza.engine.queries import StoreQueries
from sparza.engine.results import BatchResult, BatchStatus
from sparza.engine.worker import SplitInput
from sparza.errors import ConfigError
from sparza.streams import SystemStreamPartition

__all__ = [
    "COMMIT_THREADS",
    "MAX_RESTARTS",
    "POLL_INTERVAL_MS",
    "RESTORE_THREADS",
    "RETRY_BACKOFF_MS",
    "CommitPool",
    "Container",
    "ContainerHost",
    "InlineCommits",
    "TaskLoop",
    "ThreadedCommits",
    "broadcast_ready",
    "location_of",
]

_log = logging.getLogger(__name__)

POLL_INTERVAL_MS = define_key("task.poll.interval.ms", 50,
                              "Container mode: how often an idle container asks its inputs for new messages (Samza's "
                              "run loop poll interval); a lower value lowers latency and raises the load on the input "
                              "systems.", "runtime", kind=Int(min_value=0))
RESTORE_THREADS = define_key("job.container.restore.threads", 2,
                             "Container mode: how many tasks handed to a container restore their stores at once, "
                             "beside the processing of its other tasks (a task runs its first batch once they are "
                             "open).", "runtime", kind=Int(min_value=1))
COMMIT_THREADS = define_key("job.container.commit.threads", 8,
                            "Container mode: how many task commits a container runs at once, beside the processing of "
                            "its other tasks (each task has at most one batch in flight).", "runtime",
                            kind=Int(min_value=1))
RETRY_BACKOFF_MS = define_key("job.container.retry.backoff.ms", 1000,
                              "Container mode: how long a task whose batch failed in a way a retry may cure waits "
                              "before it retries from its checkpoint (doubled at each failure in a row, at most 30 s); "
                              "its container's other tasks go on.", "runtime", kind=Int(min_value=0))
MAX_RESTARTS = define_key("job.container.max.restarts", 3,
                          "Containers lost (container mode) or streaming-query deaths (batches) in a row before the "
                          "job fails, and failed attempts of one task in a row: an executor lost, a worker that died; "
                          "a commit resets the count.", "runtime", kind=Int(min_value=0))

LOCATION_FILE = ".sparza-location"
"""The file in a job's ``job.logged.store.base.dir`` that names that state dir (one uuid per dir)."""

PLANNING_ERRORS: tuple[type[Exception], ...] = (RuntimeStateError, ConfigError)
"""Planning failures a retry repeats (see :mod:`sparza.engine.planner`): the job stops at once."""

Clock = Callable[[], float]
"""Seconds, monotonic (``time.monotonic``); injectable so tests can run a container without waiting."""


def location_of(job: JobConfig) -> str:
    """The identity of this host's state dir of ``job``: ``host:dir#id``, where ``id`` is a uuid kept in the dir.

    A task's local state is reusable exactly where this identity is the same: an executor restarted on the
    same host with the same dir keeps it; another host with the same path, or a wiped dir, does not.
    """
    base = Path(job.store_base_dir)
    marker = base / LOCATION_FILE
    try:
        ident = marker.read_text().strip()
    except OSError:
        ident = ""
    if not ident:
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f"{LOCATION_FILE}.{uuid.uuid4().hex}"
        tmp.write_text(uuid.uuid4().hex[:12])
        with contextlib.suppress(FileExistsError):
            os.link(tmp, marker)  # the first container to get here names the dir for every other
        tmp.unlink(missing_ok=True)
        ident = marker.read_text().strip()
    return f"{socket.gethostname()}:{base}#{ident}"


def broadcast_ready(job: JobConfig) -> Callable[[Any], bool]:
    """The gate of a container's planner: whether the broadcast bootstrap stores of a stream have published their
    bootstrapped snapshots (asked only for jobs with one, until they have); a task's main input waits for it."""

    def ready(stream: Any) -> bool:
        from sparza.blobstore import blob_store_manager_from_config
        from sparza.state.adjunct import broadcast_bootstrap_published

        return broadcast_bootstrap_published(job.config, stream, blob_store_manager_from_config(job.config),
                                             job.name, job.job_id)

    return ready


class TaskLoop:
    """One task's planning inside a container: its own planner, its plan, and the batch planned but not committed."""

    def __init__(self, engine: EngineJob, model: TaskModel) -> None:
        self.engine = engine
        self.model = model
        self.planner = BatchPlanner(engine.job, [model], engine.ops, engine.positions,
                                    start_positions=engine.start_positions, broadcast_ready=broadcast_ready(engine.job))
        if engine.targets is not None:
            self.planner.targets = dict(engine.targets)
        self.ssp_set = frozenset(model.ssps)
        self.drain_request: dict[str, Any] | None = None
        self.plan: BatchPlan | None = None
        self._pending: BatchPlan | None = None
        self._idle_at: tuple[str | None, ...] | None = None
        self._idle_read = 0  # the number of the job's positions read _idle_at was taken from
        """The upcoming offsets of the task's SSPs when its planner last found nothing to do: while they stay (and no
        window, drain or publication is due) the planner is not asked again, so an idle task costs a tuple compare
        per pass, not a plan (a container with a thousand idle tasks would spend its poll interval planning)."""

    def start(self, checkpoint: TaskCheckpoint | None, drain: dict[str, Any] | None) -> None:
        """The start plan from the task's checkpoint (an open intent is replayed first)."""
        checkpoints = {self.model.name: checkpoint} if checkpoint is not None else {}
        try:
            self.plan = self.planner.initial(checkpoints)
        except OffsetPastEndError:
            # The job's metadata of this pass may predate a checkpoint another container committed since (a task
            # handed over mid-run): read it again before refusing. A stream that lost its data is refused still.
            self.engine.refresh()
            self.plan = self.planner.initial(checkpoints)
        self._pending = None
        self._idle_at = None
        self.drain_request = None
        self.set_drain(drain)

    def set_drain(self, request: dict[str, Any] | None) -> None:
        """The job's drain request as the host sent it (None: none, or cancelled): the planner caps the task's
        source partitions at its offsets."""
        if request != self.drain_request:
            self.drain_request = request
            self.planner.drain = DrainRequest.from_json(request) if request is not None else None
            self._idle_at = None

    def next_split(self, now_ms: int) -> Any:
        """The task's next batch as a split, or None when it has nothing to do now."""
        assert self.plan is not None
        positions = self.engine.positions()
        read = self.engine.reads
        if self.engine.partition_changes:  # an input's partitions changed: stop (fail) or regroup, never read on
            check_running(self.engine.key, self.engine.expansion, self.engine.partition_changes)
        seen = tuple(p.upcoming if (p := positions.get(ssp)) is not None else None for ssp in self.model.ssps)
        if seen == self._idle_at and not self._window_due(now_ms):
            return None
        planned = self.planner.next(self.plan, now_ms)
        if planned is self.plan:
            # Waiting for a broadcast publication is not idle: it may appear without any input moving.
            self._idle_at = None if self.planner.broadcast_waits() else seen
            self._idle_read = read
            return None
        self._idle_at = None
        self._pending = planned
        return self.planner.splits(self.plan, planned)[0]

    def idle(self, now_ms: int) -> bool:
        """True when asking the planner now is known to give nothing: it found nothing to do last time, no read of
        the job's positions since found one of the task's SSPs moved, and no window is due."""
        return (self._idle_at is not None and not self.engine.moved_since(self.ssp_set, self._idle_read)
                and not self._window_due(now_ms))

    def _window_due(self, now_ms: int) -> bool:
        window_ms = self.engine.job.window_ms
        return (window_ms > 0 and self.plan is not None and self.engine.targets is None
                and now_ms - self.plan.planned_at_ms >= window_ms)

    def committed(self) -> None:
        """The split :meth:`next_split` returned was committed (or skipped as a replay): move the plan on."""
        self.plan = self._pending
        self._idle_at = None

    def ended(self) -> bool:
        """True when the task's inputs all ended (in this run or an earlier one) and nothing is left to do."""
        return self.plan is not None and self.plan.task(self.model.name).ended


class ContainerHost(Protocol):
    """Where a container reports, and whether its host is still there."""

    def report(self, event: Event) -> None:
        """One event (see :mod:`~sparza.engine.messages`); called from the container's loop thread only."""

    def alive(self) -> bool:
        """False once the host has been silent too long or went away: the container then stops at a batch
        boundary (its tasks continue from their commits wherever the host runs them next)."""


class CommitPool(Protocol):
    """Where a container runs its tasks' commits (and, in a pool of its own, their restores)."""

    def submit(self, work: Callable[[], Any], on_done: Callable[[], None]) -> Future[Any]:
        """Run ``work``; call ``on_done`` (from any thread) when it finished."""

    def close(self) -> None:
        """Wait for the running commits and release the pool."""


class InlineCommits:
    """Commits run in the caller's thread, at once: a deterministic container for tests and the in-process harness
    (the same commit code, one at a time)."""

    def submit(self, work: Callable[[], Any], on_done: Callable[[], None]) -> Future[Any]:
        """Run ``work`` now. What it raises that is no ``Exception`` (a container killed mid-commit, an interrupt)
        propagates at once, as it would stop a process there: nothing more of the pass runs."""
        future: Future[Any] = Future()
        try:
            future.set_result(work())
        except Exception as exc:  # handed to the loop, which judges it
            future.set_exception(exc)
        on_done()
        return future

    def close(self) -> None:
        """Nothing runs in the background."""


class ThreadedCommits:
    """Commits run in ``threads`` threads beside the container's loop (see the module docstring)."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="sparza-commit")

    def submit(self, work: Callable[[], Any], on_done: Callable[[], None]) -> Future[Any]:
        """Queue ``work``; ``on_done`` runs in the pool's thread when it finished."""
        future = self._pool.submit(work)
        future.add_done_callback(lambda _f: on_done())
        return future

    def close(self) -> None:
        """Wait for the running commits, then stop the threads."""
        self._pool.shutdown(wait=True)


@dataclass
class _Task:
    """One task in a container."""

    job: str
    name: str
    loop: TaskLoop
    instance: TaskInstance
    state: str = "idle"  # restoring, idle, committing, retry, done
    last_started: float = float("-inf")
    revoked: bool = False
    future: Future[Any] | None = None  # its commit, or its restore, in flight
    failures: int = 0  # failed attempts since the last commit
    retry_at: float = 0.0
    waiting: str | None = None  # what its main input waits for, as last reported
    batch: int = 0  # the batch in flight (or last run)
    looked_at: float = float("-inf")  # when a pass last found nothing for it to do (it is looked at again a poll later)


@dataclass
class _Job:
    engine: EngineJob
    command: AddJob
    location: str
    removing: bool = False
    tasks: set[str] = field(default_factory=set)


class Container:
    """The run loop of one container (see the module docstring).

    ``host`` hears every event; :meth:`command` takes the host's commands (from any thread). ``clock``
    (monotonic seconds) and ``wall_ms`` (epoch ms, the batches' ``planned_at``) are injectable so an in-process
    host can run a container without waiting; ``commits`` chooses where commits run (default: a thread pool of
    ``job.container.commit.threads`` from the first job's config) and ``restores`` where restores run (default: the
    ``commits`` given, else a pool of ``job.container.restore.threads``); ``resolve`` puts the secrets back into a
    shipped config (the host's business: the engine never looks for them).
    """

    def __init__(self, host: ContainerHost, *, index: int = 0, clock: Clock = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 resolve: Callable[[Config], Config] = lambda config: config,
                 commits: CommitPool | None = None, restores: CommitPool | None = None) -> None:
        self.host = host
        self.index = index
        self.clock = clock
        self.wall_ms = wall_ms
        self.resolve = resolve
        self._commits = commits
        self._restores = restores if restores is not None else commits
        self.jobs: dict[str, _Job] = {}
        self.tasks: dict[tuple[str, str], _Task] = {}
        self.stopping = False
        self._inbox: list[Command] = []
        self._inbox_lock = threading.Lock()
        self._wake = threading.Event()
        self._queries: StoreQueries | None = None

    # --- the host's side ----------------------------------------------------------------------
    def command(self, command: Command) -> None:
        """Take one command from the host (any thread); the loop applies it at its next pass, except a store query,
        which a thread of its own answers at once (:mod:`~sparza.engine.queries`)."""
        if isinstance(command, QueryStore):
            if self._queries is None:
                self._queries = StoreQueries(self._stores_of, self.host.report)
            self._queries.submit(command)
            return
        with self._inbox_lock:
            self._inbox.append(command)
        self._wake.set()

    def _stores_of(self, job: str, task: str) -> Any:
        found = self.tasks.get((job, task))
        return found.instance.stores if found is not None else None

    @property
    def idle(self) -> bool:
        """True when no commit or restore is still running (finished ones wait for the next pass to be reported)."""
        return all(t.future is None or t.future.done() for t in self.tasks.values())

    # --- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        """Run until a :class:`~sparza.engine.messages.StopContainer` released every task, or the host is gone; then
        close every job (the committed stores stay on disk for whoever runs the tasks next)."""
        try:
            while True:
                if not self.host.alive() and not self.stopping:
                    _log.warning("container %s: its host went silent or away: stopping at a batch boundary (its "
                                 "tasks continue from their commits wherever the host runs them next)", self.index)
                    self.command(StopContainer())
                progressed = self.step()
                if self.stopping and not self.tasks:
                    return
                if not progressed:
                    self._wake.wait(self._wait_s())
                    self._wake.clear()
        finally:
            self.close()

    def step(self, *, run_due: bool = True) -> bool:
        """One pass of the loop (see the module docstring); True when anything happened. ``run_due=False`` leaves out
        step 4 (no batch starts): an in-process host settles commands and finished commits between rounds."""
        progressed = self._apply_commands()
        progressed = self._collect_commits() or progressed
        progressed = self._release_revoked() or progressed
        if not self.stopping and run_due:
            progressed = self._run_due() or progressed
        return progressed

    def close(self) -> None:
        """Wait for running commits, release every task still here, close every job (idempotent)."""
        for task in self.tasks.values():
            task.revoked = True  # a restore still running stops at its next store (released below)
        if self._queries is not None:
            self._queries.close()
            self._queries = None
        if self._restores is not None and self._restores is not self._commits:
            self._restores.close()
        if self._commits is not None:
            self._commits.close()
        self._collect_commits()
        for key in list(self.tasks):
            self._release(self.tasks[key])
        for job in self.jobs.values():
            with contextlib.suppress(Exception):
                job.engine.close()
        self.jobs.clear()

    def _wait_s(self) -> float:
        now = self.clock()
        poll_s = self._poll_ms() / 1000.0
        nexts = [now + poll_s]
        for task in self.tasks.values():
            if task.state == "idle" and not task.revoked:
                # Due a commit interval after its last batch started, but a task that had nothing to do is asked
                # again a poll interval after that (task.poll.interval.ms): at task.commit.ms 0 an idle container
                # otherwise ran its passes back to back (16 idle tasks: 6,800 metadata reads/s, a core).
                nexts.append(max(task.last_started + self._commit_s(task.job), task.looked_at + poll_s))
            elif task.state == "retry":
                nexts.append(task.retry_at)
        return max(0.0, min(nexts) - now)

    def _poll_ms(self) -> int:
        values = [POLL_INTERVAL_MS.get(j.engine.config) for j in self.jobs.values()]
        return max(min(values), 1) if values else 50

    def _commit_s(self, job: str) -> float:
        return self.jobs[job].engine.job.commit_ms / 1000.0

    # --- commands ------------------------------------------------------------------------------
    def _apply_commands(self) -> bool:
        with self._inbox_lock:
            commands, self._inbox = self._inbox, []
        for command in commands:
            if isinstance(command, AddJob):
                self._add_job(command)
            elif isinstance(command, AssignTasks):
                for name in command.tasks:
                    self._assign(command.job, name)
            elif isinstance(command, RevokeTasks):
                for name in command.tasks:
                    task = self.tasks.get((command.job, name))
                    if task is not None:
                        task.revoked = True
            elif isinstance(command, SetDrain):
                job = self.jobs.get(command.job)
                if job is not None:
                    job.command.drain = command.drain
                for task in self.tasks.values():
                    if task.job == command.job:
                        task.loop.set_drain(command.drain)
            elif isinstance(command, RemoveJob):
                job = self.jobs.get(command.job)
                if job is not None:
                    job.removing = True
                    for task in self.tasks.values():
                        if task.job == command.job:
                            task.revoked = True
            elif isinstance(command, StopContainer):
                self.stopping = True
                for task in self.tasks.values():
                    task.revoked = True
            elif isinstance(command, Ping):
                pass
        return bool(commands)

    def _add_job(self, command: AddJob) -> None:
        if command.job in self.jobs:
            # The job again (a coordinator's next job model, a restarted run of a stage): same config, maybe a
            # new generation, new start positions and targets.
            job = self.jobs[command.job]
            left = [self.tasks[(command.job, name)] for name in sorted(job.tasks)]
            if job.engine.partition_changes and all(t.state not in ("committing", "restoring") for t in left):
                # Its tasks stopped to regroup for new partition counts (the host let the job go and added it again):
                # the job again means new task models. Tasks of the old models still here stopped between batches.
                for task in left:
                    self._release(task)
                with contextlib.suppress(Exception):
                    job.engine.close()
                del self.jobs[command.job]
                self._add_job(command)
                return
            job.command = command
            job.removing = False
            engine = job.engine
            engine.generation = command.generation
            engine.start_positions = {SystemStreamPartition.parse(k): v for k, v in command.start_positions.items()}
            engine.targets = ({SystemStreamPartition.parse(k): v for k, v in command.targets.items()}
                              if command.targets is not None else None)
            self.host.report(JobReady(command.job, job.location))
            return
        try:
            engine = EngineJob(self.resolve(Config(command.config)), generation=command.generation,
                               task_count=command.task_count, start_positions=command.start_positions,
                               targets=command.targets)
            location = location_of(engine.job)
        except Exception as exc:
            # Storage down while the job opens its inputs (an Azurite or account outage as containers start) is
            # not the job's fault: the manager asks again once it may answer. A config error is reported for good.
            transient = isinstance(exc, (ConnectionError, TimeoutError))
            self.host.report(JobReady(command.job, "", error=f"{type(exc).__name__}: {exc}", transient=transient))
            return
        if self._commits is None:
            self._commits = ThreadedCommits(COMMIT_THREADS.get(engine.config))
        if self._restores is None:
            self._restores = ThreadedCommits(RESTORE_THREADS.get(engine.config))
        self.jobs[command.job] = _Job(engine, command, location)
        self.host.report(JobReady(command.job, location))

    def _assign(self, job_key: str, name: str) -> None:
        job = self.jobs.get(job_key)
        if job is None or (job_key, name) in self.tasks:
            return
        if self.stopping:  # too late for this container: the host gives the task to another
            self.host.report(TasksReleased(job_key, [name]))
            return
        instance = TaskInstance(job.engine, name)
        instance.stores.resident = True
        instance.location = job.location
        task = _Task(job_key, name, TaskLoop(job.engine, job.engine.models[name]), instance)
        self.tasks[(job_key, name)] = task
        job.tasks.add(name)
        self._start(task)

    def _start(self, task: _Task) -> None:
        """(Re)start a task's planning from its checkpoint as stored now (an open intent is replayed first)."""
        job = self.jobs[task.job]
        try:
            stored = job.engine.checkpoints.read(task.name)
            checkpoint = stored.checkpoint if stored is not None else None
            if checkpoint is not None and checkpoint.committed:
                # A commit that failed during cleanup (after its checkpoint), or a process that died there, left the
                # committed snapshots with a TTL; a task with no next batch would keep it until gc deleted them.
                task.instance.stores.finish_cleanup(dict(checkpoint.stores))
            task.loop.start(checkpoint, job.command.drain)
        except PLANNING_ERRORS as exc:
            self._fail(task, BatchResult(task.name, 0, BatchStatus.FAILED,
                                         error=f"task '{task.name}': {type(exc).__name__}: {exc}"))
            return
        except Exception as exc:
            self._attempt_failed(task, 0, exc)
            return
        if stored is not None and checkpoint is not None and (
                (checkpoint.committed and checkpoint.stores) or checkpoint.fence_systems()):
            # Its stores restore beside the loop (module docstring); the task runs nothing until they are open. Its
            # outputs are fenced there first (TaskInstance.restore_stores).
            instance = task.instance
            generation = job.engine.generation  # as its first batch would write (the loop may change the engine's)
            task.state = "restoring"
            task.batch = checkpoint.batch + 1

            def restore() -> bool:
                # Read by the restore thread: a revoke (or the container closing) stops it at its next store.
                return instance.restore_stores(stored, generation=generation, cancelled=lambda: task.revoked)

            task.future = self._restore_pool().submit(restore, self._wake.set)

    # --- results -------------------------------------------------------------------------------
    def _report_result(self, task: _Task, result: BatchResult) -> None:
        result.system_metrics = self.jobs[task.job].engine.clients.metrics.changes()
        self.host.report(TaskResult(task.job, result))

    def _collect_commits(self) -> bool:
        progressed = False
        for task in list(self.tasks.values()):
            future = task.future
            if task.state not in ("committing", "restoring") or future is None or not future.done():
                continue
            progressed = True
            task.future = None
            restored = task.state == "restoring"
            task.state = "idle"
            exc = future.exception()
            if restored:
                if exc is None:
                    # Its stores are open: it joins the rotation; revoked, it is released (what the restore opened
                    # is closed then, after the restore thread returned: it touches nothing of the task after).
                    continue
                if not isinstance(exc, Exception):
                    raise exc
                with contextlib.suppress(Exception):
                    task.instance.abort()
                self._attempt_failed(task, task.batch, exc)  # as a first batch that failed restoring
            elif exc is None:
                self._committed(task, future.result())
            elif isinstance(exc, Exception):
                self._attempt_failed(task, task.batch, exc)
            else:
                raise exc
        return progressed

    def _committed(self, task: _Task, result: BatchResult) -> None:
        task.failures = 0
        task.loop.committed()
        self._report_result(task, result)
        if result.ended:
            self._finish(task, "ended")
        elif result.drained:
            self._finish(task, "drained")

    def _finish(self, task: _Task, why: str) -> None:
        task.state = "done"
        self.host.report(TaskDone(task.job, task.name, why))

    def _fail(self, task: _Task, result: BatchResult) -> None:
        """A deterministic failure: report it; the task stops (the host stops the job)."""
        self._report_result(task, result)
        self._finish(task, "failed")

    def _attempt_failed(self, task: _Task, batch: int, exc: Exception) -> None:
        """A batch of ``task`` raised ``exc`` (its instance already dropped what it held): judge it (module
        docstring)."""
        task.state = "idle"
        if isinstance(exc, CheckpointFencedError):
            # A newer generation owns the task (another processor took over): nothing more of it may be written.
            self.host.report(TaskLost(task.job, task.name, f"{type(exc).__name__}: {exc}"))
            self._drop(task)
            return
        engine = self.jobs[task.job].engine
        try:
            result = failed_attempt(engine.config, task.name, batch, exc)
        except TaskAttemptError as attempt:
            task.failures += 1
            limit = MAX_RESTARTS.get(engine.config)
            if task.failures > limit:
                self._fail(task, BatchResult(task.name, batch, BatchStatus.FAILED, error=(
                    f"task '{task.name}' failed {task.failures} times in a row without a commit: {attempt}; next: fix "
                    "the cause (the trace file named has the details) and start the job again "
                    "(job.container.max.restarts sets how many retries)")))
                return
            base = RETRY_BACKOFF_MS.get(engine.config)
            delay_ms = min(base * (2 ** (task.failures - 1)), 30_000)
            task.state = "retry"
            task.retry_at = self.clock() + delay_ms / 1000.0
            self.host.report(TaskRetrying(task.job, task.name, str(attempt), task.failures, delay_ms))
            return
        self._fail(task, result)

    # --- releasing -----------------------------------------------------------------------------
    def _release_revoked(self) -> bool:
        released: dict[str, list[str]] = {}
        for task in list(self.tasks.values()):
            if task.revoked and task.state not in ("committing", "restoring"):
                self._release(task)
                released.setdefault(task.job, []).append(task.name)
        for job_key, names in released.items():
            if self.stopping:
                for name in names:
                    self.host.report(TaskDone(job_key, name, "stopped"))
            else:
                self.host.report(TasksReleased(job_key, sorted(names)))
            job = self.jobs.get(job_key)
            if job is not None and job.removing and not job.tasks:
                with contextlib.suppress(Exception):
                    job.engine.close()
                del self.jobs[job_key]
        return bool(released)

    def _release(self, task: _Task) -> None:
        """Close the task's stores (committed on disk, reopened in place by whoever runs it here next)."""
        with contextlib.suppress(Exception):
            task.instance.stores.close_committed()
        self._drop(task)

    def _drop(self, task: _Task) -> None:
        self.tasks.pop((task.job, task.name), None)
        job = self.jobs.get(task.job)
        if job is not None:
            job.tasks.discard(task.name)

    # --- running due tasks ---------------------------------------------------------------------
    def _run_due(self) -> bool:
        now = self.clock()
        due = []
        for task in self.tasks.values():
            if task.revoked or task.state in ("done", "committing", "restoring"):
                continue
            if task.state == "retry":
                if now < task.retry_at:
                    continue
                task.state = "idle"
                self._start(task)  # from the checkpoint as stored now: an open intent replays exactly
                if task.state != "idle":
                    continue
            if now - task.last_started >= self._commit_s(task.job):
                due.append(task)
        if not due:
            return False
        for job_key in {task.job for task in due}:
            engine = self.jobs[job_key].engine
            engine.refresh()  # one metadata read per job and pass
            engine.positions()
        ran = False
        wall = self.wall_ms()
        for task in due:
            # An idle task also hears that its job's input partitions changed.
            if task.state != "idle" or (task.loop.idle(wall)
                                        and not self.jobs[task.job].engine.partition_changes):
                task.looked_at = now
                continue
            if self._step(task):
                ran = True
            else:
                task.looked_at = now
        return ran

    def _step(self, task: _Task) -> bool:
        """Plan and process the task's next batch if it has one, and hand its commit to the pool; True when it ran."""
        job = self.jobs[task.job]
        try:
            split = task.loop.next_split(self.wall_ms())
        except RegroupNeeded as exc:
            # Partitions grew and the job regroups: the task stops here, between batches; the host starts the job's
            # tasks again, grouped for the new counts (sparza.engine.partitions).
            if task.waiting != "regroup":
                _log.info("task %s: %s", task.name, exc)
            task.waiting = "regroup"
            self._finish(task, "regroup")
            return False
        except PLANNING_ERRORS as exc:
            # What a planner raises for an input re-created behind the checkpoint, input after an ended task's end:
            # deterministic, so the job stops.
            self._fail(task, BatchResult(task.name, task.loop.plan.batch if task.loop.plan else 0, BatchStatus.FAILED,
                                         error=f"task '{task.name}': {type(exc).__name__}: {exc}"))
            return False
        except Exception as exc:  # the input's metadata could not be read: retried like a failed batch
            self._attempt_failed(task, task.loop.plan.batch if task.loop.plan else 0, exc)
            return False
        if split is None:
            waits = task.loop.planner.broadcast_waits()
            if task.loop.ended():
                self._finish(task, "ended")
            elif not waits:
                if job.engine.targets is not None:
                    self._finish(task, "caught up")
            elif next(iter(waits)) != task.waiting:
                task.waiting = next(iter(waits))
                self.host.report(TaskWaiting(task.job, task.name, task.waiting))
            return False
        task.waiting = None
        task.last_started = self.clock()
        instance = task.instance
        try:
            processed = instance.process(split, SplitInput(job.engine.clients, split),
                                         spark_batch_id=None, generation=job.engine.generation)
        except Exception as exc:
            self._attempt_failed(task, split.batch, exc)
            return True
        if isinstance(processed, BatchResult):  # a replay the checkpoint already holds
            self._committed(task, processed)
            return True
        task.state = "committing"
        task.batch = split.batch
        task.future = self._pool().submit(lambda: instance.commit(processed), self._wake.set)
        return True

    def _pool(self) -> CommitPool:
        if self._commits is None:
            self._commits = ThreadedCommits(8)
        return self._commits

    def _restore_pool(self) -> CommitPool:
        if self._restores is None:
            self._restores = ThreadedCommits(2)
        return self._restores

    def positions(self, job: str) -> Mapping[SystemStreamPartition, SspPosition]:
        """The last positions the container read for ``job`` (for tools and tests)."""
        return self.jobs[job].engine.positions()
