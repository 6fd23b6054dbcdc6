"""The driver side of the container mode, whatever hosts the containers: which container runs which task.

A :class:`ContainerManager` belongs to one processor. It starts containers through its host's :class:`Launcher`
(Spark tasks, or objects in this process for :class:`sparza.testing.TestRunner`), talks to each through a
:class:`ContainerLink` (:mod:`~sparza.engine.messages` commands), and hears their events. Jobs join and leave at
any time (:meth:`ContainerManager.join`); each is a :class:`JobMember`, the runner's side of the job.

What it does, each time something changes:

1. **Containers.** It keeps as many containers as the host has slots for (at most one per task, at most
   ``job.container.count``), starting one when a slot is free. A container that ends or whose link breaks is
   lost: its tasks get new containers at once; the others are not touched. A lost container is started again
   (a new one, with a new index) while the jobs that need it have restarts left.
2. **Jobs.** Every container hears of every job (:class:`~sparza.engine.messages.AddJob`) and answers where it
   keeps that job's state (its location).
3. **Tasks.** Once the containers it started answered for a job (or ``job.container.start.timeout.ms`` passed),
   tasks without a container are placed (:func:`~sparza.engine.assignment.place_tasks`: where their state is,
   else the least-loaded container). When a new container joins, only the tasks over the other containers'
   share move: each is revoked where it runs (it finishes its batch and commits), then assigned to its new
   container. No other task stops. Once the job's tasks were placed, tasks that lost their container wait for a
   starting one only ``job.container.lost.wait.ms`` (1 s) and only while the host has a free slot for it: the
   replacement of a lost executor's container waits for a core that comes back with a worker, if ever, so its
   tasks go to the survivors at once and move onto it by the rebalance when it joins.
4. **Leaving.** A job that stops (or ended, caught up, drained) is removed from every container; it has left
   once each of its tasks is released.

The manager's state is touched by one thread only: the host's transport threads put what they hear on a queue
(:meth:`connected`, :meth:`event`, :meth:`lost`), and :meth:`step` (called by the manager's own thread, or by
an in-process host between container steps) applies it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparza.config import Config, Int, define_key
from sparza.engine.assignment import place_tasks
from sparza.engine.errors import JobFailedError
from sparza.engine.messages import (
    AddJob,
    AssignTasks,
    Command,
    Event,
    Hello,
    JobReady,
    Ping,
    QueryStore,
    RemoveJob,
    RevokeTasks,
    SetDrain,
    StopContainer,
    StoreAnswer,
    TaskDone,
    TaskLost,
    TaskResult,
    TaskRetrying,
    TasksReleased,
    TaskWaiting,
)

__all__ = ["LOST_WAIT_MS", "START_TIMEOUT_MS", "ContainerLink", "ContainerManager", "JobMember", "Launcher"]

_log = logging.getLogger(__name__)

START_TIMEOUT_MS = define_key("job.container.start.timeout.ms", 60000,
                              "Container mode: how long the placement of a job's tasks waits for the containers "
                              "started for it to answer (so each task goes where its state is); after it, tasks go to "
                              "the containers that answered.", "runtime", kind=Int(min_value=0))


LOST_WAIT_MS = define_key("job.container.lost.wait.ms", 1000,
                          "Container mode: once a job's tasks were placed, how long tasks that lost their container "
                          "wait for a container still starting (its replacement) before they go to the containers "
                          "that run; they wait only while the host has a free slot for it (a lost executor's "
                          "replacement, pending until a worker is back, holds nothing).", "runtime",
                          kind=Int(min_value=0))


RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
"""A container that could not open a job because storage did not answer is offered the job again after 1 s, then
2, 4 ... up to 30 s while it keeps failing: the job goes on once storage is back, as its batches do."""


class ContainerLink(Protocol):
    """The manager's handle on one container."""

    def send(self, command: Command) -> None:
        """Send ``command`` (a link that broke drops it: the container is reported lost)."""


class Launcher(Protocol):
    """How a host starts containers."""

    def slots(self) -> int:
        """How many containers can run at once now (executor slots)."""

    def launch(self, index: int) -> None:
        """Start container ``index`` (returns at once). It connects back (:meth:`ContainerManager.connected`); when it
        ends, the host calls :meth:`ContainerManager.lost`."""

    def close(self) -> None:
        """Stop what is still running (after the containers were asked to stop)."""


class JobMember(Protocol):
    """One job in the manager: the runner's side of it."""

    key: str
    tasks: list[str]
    affinity: bool
    count: int | None

    def add_job(self) -> AddJob:
        """What every container hears of the job (built when it joins)."""

    def last_locations(self) -> Mapping[str, str]:
        """Task → the location of its last commit (host affinity)."""

    def on_event(self, event: Event) -> None:
        """A container's report about one of the job's tasks (results, done, waiting, retrying, lost)."""

    def on_notice(self, line: str) -> None:
        """What the status line should say (tasks that moved, containers lost and started again)."""

    def container_lost(self, reason: str) -> bool:
        """A container that ran tasks of this job was lost; False when the job gives up (it then fails)."""

    def manager_failed(self, error: BaseException) -> None:
        """The manager itself failed (a bug): the job cannot go on and must end with ``error``, never as a success.
        :meth:`left` follows."""

    def left(self) -> None:
        """Every task of the job was released and the containers forgot it."""


@dataclass
class _Container:
    index: int
    launched_at: float
    link: ContainerLink | None = None
    host: str = ""
    ready: dict[str, str] = field(default_factory=dict)  # job -> location
    refused: dict[str, str] = field(default_factory=dict)  # job -> why it cannot run the job
    told: set[str] = field(default_factory=set)  # jobs it heard of
    retry: dict[str, tuple[float, float]] = field(default_factory=dict)  # job -> (when to offer it again, pause)


@dataclass
class _Job:
    member: JobMember
    add: AddJob
    joined_at: float
    owner: dict[str, int | None]  # task -> the container running it (None: none)
    last_location: dict[str, str]
    moving: dict[str, int] = field(default_factory=dict)  # task -> container it goes to once released
    orphaned: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # task -> (container, location, why)
    done: set[str] = field(default_factory=set)  # tasks that left the run loop for good (ended, caught up, ...)
    leaving: bool = False
    drain: dict[str, Any] | None = None
    waiting_since: float | None = None  # since when tasks without a container wait for containers still starting
    placed: bool = False  # its tasks were placed once: later waits are job.container.lost.wait.ms


class ContainerManager:
    """See the module docstring. ``clock`` is monotonic seconds (injectable for in-process hosts)."""

    def __init__(self, launcher: Launcher, *, clock: Callable[[], float] = time.monotonic,
                 ping_s: float = 1.0, linger_s: float = 3.0, adopt: bool = False) -> None:
        self.launcher = launcher
        self.clock = clock
        self.ping_s = ping_s
        self.linger_s = linger_s
        """How long containers wait for a next job once the last one left (a coordinator's next job model, the next
        stage under ``--once``) before they are stopped: a job that comes back finds its tasks' stores open."""
        self._idle_since: float | None = None
        self._closing = False
        self.adopt = adopt
        self._answers: dict[str, Future[StoreAnswer]] = {}
        self._answers_lock = threading.Lock()
        """Take in containers the host started without being asked (its own retry of a lost one), while the jobs
        want more: a launcher that starts all its containers at once (one Spark stage) does."""
        self._inputs: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._containers: dict[int, _Container] = {}
        self._jobs: dict[str, _Job] = {}
        self._next_index = 0
        self._last_ping = 0.0
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._closed = False
        self.lost_containers = 0
        """How many containers were lost (ended or cut off while jobs needed them)."""
        self._slots = 0  # the host's slots at the last step (Launcher.slots)

    # --- what the host's transport and the runner call (any thread) ---------------------------
    def connected(self, index: int, link: ContainerLink) -> None:
        """Container ``index`` connected; ``link`` reaches it."""
        self._put("connected", (index, link))

    def event(self, index: int, event: Event) -> None:
        """Container ``index`` reported ``event`` (a store query's answer goes to its asker at once)."""
        if isinstance(event, StoreAnswer):
            with self._answers_lock:
                future = self._answers.get(event.id)
            if future is not None and not future.done():
                future.set_result(event)
            return
        self._put("event", (index, event))

    def query(self, query: QueryStore, timeout_s: float = 2.0) -> StoreAnswer:
        """Send ``query`` to the container that runs its task and wait for the answer (at most ``timeout_s``). Any
        thread; a task without a container now (moving, lost) is an answer with an error saying so."""
        job = self._jobs.get(query.job)
        index = job.owner.get(query.task) if job is not None else None
        container = self._containers.get(index) if index is not None else None
        if job is None:
            return StoreAnswer(query.id, False, error=f"job {query.job} does not run in this processor")
        if container is None or container.link is None:
            return StoreAnswer(query.id, False, error=f"task '{query.task}' has no container now (it is moving, or "
                                                      "its container was lost): ask again in a moment")
        future: Future[StoreAnswer] = Future()
        with self._answers_lock:
            self._answers[query.id] = future
        try:
            container.link.send(query)
            return future.result(timeout_s)
        except FutureTimeout:
            return StoreAnswer(query.id, False, error=f"no answer from container {index} within {timeout_s:.1f} s")
        finally:
            with self._answers_lock:
                self._answers.pop(query.id, None)

    def lost(self, index: int, reason: str) -> None:
        """Container ``index`` ended or its link broke (``reason`` says how)."""
        self._put("lost", (index, reason))

    def join(self, member: JobMember) -> None:
        """Run ``member``'s tasks in this processor's containers."""
        self._put("join", member)

    def leave(self, key: str) -> None:
        """Stop job ``key``: its tasks finish their batches, commit and are released; then it has left."""
        self._put("leave", key)

    def drain(self, key: str, request: dict[str, Any] | None) -> None:
        """Job ``key`` drains (``request``), or no longer does (None)."""
        self._put("drain", (key, request))

    def _put(self, kind: str, body: Any) -> None:
        self._inputs.put((kind, body))
        self._wake.set()

    # --- running ------------------------------------------------------------------------------
    def start(self) -> None:
        """Run :meth:`step` in a thread of its own until no job and no container is left."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="sparza-containers", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self.finished():
                self.step()
                if self._inputs.empty():  # else the step stopped short of what arrived: go on at once
                    self._wake.wait(0.25)
                self._wake.clear()
        except BaseException as exc:  # a bug in the manager itself: fail every job rather than hang
            _log.exception("the container manager failed")
            # The launcher talks to Spark's JVM through a local socket: refused or reset, the JVM ended under the
            # driver (killed, out of memory), which is not sparza's bug.
            cause = ("Spark's JVM is gone (it ended under the driver: killed, or out of memory?)"
                     if isinstance(exc, ConnectionError) else "a bug in sparza; the driver's log has the traceback")
            error = JobFailedError(f"the container manager failed ({type(exc).__name__}: {exc}): {cause}. Every task "
                                   "restarts from its last commit when the job is started again")
            for job in list(self._jobs.values()):
                job.member.manager_failed(error)
                job.member.left()
            self._jobs.clear()
        finally:
            self.launcher.close()

    def close(self) -> None:
        """Stop the containers as soon as no job is left (no lingering): the session is about to stop."""
        self._put("close", None)

    def _on_close(self, _body: Any) -> None:
        self._closing = True

    def finished(self) -> bool:
        """True when no job and no container is left (the manager's thread then ends)."""
        return not self._jobs and not self._containers and self._inputs.empty()

    @property
    def containers(self) -> dict[int, str]:
        """Index → host of every connected container (for status lines and tests)."""
        return {i: c.host for i, c in self._containers.items() if c.link is not None}

    def owners(self, key: str) -> dict[str, int | None]:
        """Task → the container that runs it now, of job ``key`` (for tests and tools)."""
        job = self._jobs.get(key)
        return dict(job.owner) if job is not None else {}

    def step(self) -> None:
        """Apply what arrived, then make the containers and assignments what they should be.

        What arrived is applied for at most ``ping_s`` before the rest of the step runs (the next step goes on with
        it), and containers are pinged meanwhile when a ping is due: a job's reports (its results, status line and
        metrics, which a task result runs here) can keep the queue full for as long as they keep up, and a
        container that heard nothing for ``job.container.driver.timeout.ms`` stops (1,024 tasks: both containers
        stopped 10 s into a backlog, and nothing ran again).
        """
        began = self.clock()
        while True:
            try:
                kind, body = self._inputs.get_nowait()
            except queue.Empty:
                break
            getattr(self, f"_on_{kind}")(body)
            now = self.clock()
            self._ping(now)
            if now - began >= self.ping_s:
                break
        now = self.clock()
        self._launch(now)
        for job in list(self._jobs.values()):
            self._tell(job)
            self._place(job, now)
            self._maybe_left(job)
        if self._jobs:
            self._idle_since = None
        else:
            self._idle_since = now if self._idle_since is None else self._idle_since
            if self._closing or now - self._idle_since >= self.linger_s:
                for container in self._containers.values():
                    if container.link is not None and "stop" not in container.told:
                        container.told.add("stop")
                        container.link.send(StopContainer())
        self._ping(now)

    def _ping(self, now: float) -> None:
        """Ping every connected container when ``ping_s`` passed since the last ping."""
        if now - self._last_ping >= self.ping_s:
            self._last_ping = now
            for container in self._containers.values():
                if container.link is not None:
                    container.link.send(Ping())

    # --- inputs ------------------------------------------------------------------------------
    def _on_connected(self, body: tuple[int, ContainerLink]) -> None:
        index, link = body
        container = self._containers.get(index)
        if container is None and self.adopt and len(self._containers) < max(self._wanted(), 1):
            container = self._containers[index] = _Container(index, self.clock())
        if container is None:  # not one this manager (still) wants: tell it to go
            link.send(StopContainer())
            return
        container.link = link

    def _on_event(self, body: tuple[int, Event]) -> None:
        index, event = body
        container = self._containers.get(index)
        if container is None:
            return  # a late report of a lost container: its commits are in the checkpoints anyway
        if isinstance(event, Hello):
            container.host = event.host
            return
        if isinstance(event, JobReady):
            job = self._jobs.get(event.job)
            if event.error is not None:
                container.refused[event.job] = event.error
                again = ""
                if event.transient:
                    pause = min(RETRY_MAX_S, 2 * container.retry[event.job][1]) if event.job in container.retry \
                        else RETRY_FIRST_S
                    container.retry[event.job] = (self.clock() + pause, pause)
                    again = f"; offered again in {pause:.0f}s"
                if job is not None:
                    job.member.on_notice(f"container {index} cannot run job {event.job}: {event.error}{again}")
            else:
                container.ready[event.job] = event.location
                if container.retry.pop(event.job, None) is not None and job is not None:
                    job.member.on_notice(f"container {index} runs job {event.job} again")
            return
        job_key = getattr(event, "job", None)
        job = self._jobs.get(job_key) if job_key is not None else None
        if job is None:
            return
        if isinstance(event, TasksReleased):
            for task in event.tasks:
                self._released(job, task, index)
            return
        if isinstance(event, TaskDone):
            if job.owner.get(event.task) == index:
                if event.why in ("stopped",):
                    job.owner[event.task] = None
                else:
                    job.done.add(event.task)
            job.member.on_event(event)
            return
        if isinstance(event, TaskLost):
            if job.owner.get(event.task) == index:
                job.owner[event.task] = None
            job.member.on_event(event)
            return
        if isinstance(event, TaskResult):
            location = container.ready.get(job.add.job)
            if location:
                job.last_location[event.result.task] = location
        if isinstance(event, TaskResult | TaskWaiting | TaskRetrying):
            job.member.on_event(event)

    def _on_lost(self, body: tuple[int, str]) -> None:
        index, reason = body
        container = self._containers.pop(index, None)
        if container is None:
            return
        orphans = 0
        for job in self._jobs.values():
            mine = [t for t, owner in job.owner.items() if owner == index]
            where = container.ready.get(job.add.job, "?")
            for task in mine:
                job.owner[task] = None
                # A task moving away from it will never be released: it is an orphan like the others (kept in
                # job.moving, it would hold every placement of the job for ever).
                job.moving.pop(task, None)
                if task not in job.done:
                    job.orphaned[task] = (index, where, reason)
            for task, target in list(job.moving.items()):
                if target == index:
                    del job.moving[task]
            orphans += len(mine)
            if mine and not job.leaving:
                self.lost_containers += 1
                if not job.member.container_lost(f"container {index} on {container.host or 'an executor'} was lost "
                                                 f"({reason}); its {len(mine)} task(s) move to the other containers"):
                    job.leaving = True
        if orphans:
            _log.warning("container %s lost (%s): %s task(s) get new containers", index, reason, orphans)

    def _on_join(self, member: JobMember) -> None:
        if member.key in self._jobs:
            raise ValueError(f"job {member.key} already runs in this processor's containers")
        add = member.add_job()
        self._jobs[member.key] = _Job(member, add, self.clock(), dict.fromkeys(member.tasks),
                                      dict(member.last_locations()), drain=add.drain)

    def _on_leave(self, key: str) -> None:
        job = self._jobs.get(key)
        if job is not None:
            job.leaving = True

    def _on_drain(self, body: tuple[str, dict[str, Any] | None]) -> None:
        key, request = body
        job = self._jobs.get(key)
        if job is None:
            return
        job.drain = request
        job.add.drain = request
        for container in self._containers.values():
            if container.link is not None and key in container.told:
                container.link.send(SetDrain(key, request))

    # --- decisions -----------------------------------------------------------------------------
    def _wanted(self) -> int:
        """How many containers the jobs want: one per slot, at most one per task, at most job.container.count."""
        tasks = sum(len([t for t in j.owner if t not in j.done]) for j in self._jobs.values() if not j.leaving)
        if tasks == 0:
            return 0
        counts = [j.member.count for j in self._jobs.values() if j.member.count]
        slots = self._slots = self.launcher.slots()
        return max(1, min([slots, tasks, *counts]))

    def _launch(self, now: float) -> None:
        wanted = self._wanted()
        while len([c for c in self._containers.values() if "stop" not in c.told]) < wanted:
            index = self._next_index
            self._next_index += 1
            self._containers[index] = _Container(index, now)
            self.launcher.launch(index)

    def _tell(self, job: _Job) -> None:
        if job.leaving:
            return
        key = job.add.job
        now = self.clock()
        for container in self._containers.values():
            due = container.retry.get(key)
            if due is not None and key in container.refused and now >= due[0]:
                # A transient refusal (storage was down): offer the job again; the pause doubles while it lasts.
                del container.refused[key]
                container.told.discard(key)
        for container in self._containers.values():
            if container.link is not None and job.add.job not in container.told and "stop" not in container.told:
                container.told.add(job.add.job)
                container.link.send(job.add)

    def _place(self, job: _Job, now: float) -> None:
        """Give every task without a container one; move tasks onto new containers (module docstring)."""
        if job.leaving or job.moving:
            return
        key = job.add.job
        ready = {i: c.ready[key] for i, c in self._containers.items()
                 if key in c.ready and c.link is not None and "stop" not in c.told}
        if not ready:
            return
        config = Config(job.add.config)
        timeout_s = START_TIMEOUT_MS.get(config) / 1000.0
        starting = [c for c in self._containers.values() if key not in c.ready and key not in c.refused
                    and now - max(c.launched_at, job.joined_at) < timeout_s]
        if starting and any(current is None for current in job.owner.values()) and self._may_wait(job, starting):
            # Wait: a task whose state is at a container still starting should go there. At the job's start at most
            # the start timeout in all, so containers that keep failing to start (each one new) cannot hold the tasks
            # for ever; later (tasks that lost their container) at most job.container.lost.wait.ms.
            bound_s = LOST_WAIT_MS.get(config) / 1000.0 if job.placed else timeout_s
            if job.waiting_since is None:
                job.waiting_since = now
            if now - job.waiting_since < bound_s:
                return
        job.waiting_since = None
        job.placed = True
        live = [t for t in job.owner if t not in job.done]
        current = {t: job.owner[t] for t in live}
        target = place_tasks(live, ready, current, job.last_location, affinity=job.member.affinity)
        assign: dict[int, list[str]] = {}
        revoke: dict[int, list[str]] = {}
        for task in live:
            now_at, goes = current[task], target[task]
            if now_at == goes:
                continue
            if now_at is None:
                job.owner[task] = goes
                assign.setdefault(goes, []).append(task)
                lost = job.orphaned.pop(task, None)
                if lost is not None:
                    job.member.on_notice(
                        f"task {task} moves from container {lost[0]} ({lost[1]}) to container {goes} "
                        f"({ready[goes]}): its executor is gone (container {lost[0]} {lost[2]}); it restores its "
                        "stores there (from the blob store unless that dir holds them)")
            else:
                job.moving[task] = goes
                revoke.setdefault(now_at, []).append(task)
        for index, tasks in revoke.items():
            self._send(index, RevokeTasks(key, tasks))
        for index, tasks in assign.items():
            self._send(index, AssignTasks(key, tasks))
        for index, tasks in revoke.items():
            for task in tasks:
                job.member.on_notice(self._describe_move(job, task, index, job.moving[task]))

    def _may_wait(self, job: _Job, starting: list[_Container]) -> bool:
        """Whether tasks without a container may wait for ``starting`` containers: always at the job's start (state
        may be at one of them); later only while one of them can plausibly start: it connected already, or the
        host has a free slot for it (a Python worker that crashed leaves its executor's core free at once; a lost
        executor's replacement waits for a worker to come back, and the tasks must not wait for that)."""
        if not job.placed:
            return True
        running = sum(1 for c in self._containers.values() if c.link is not None and "stop" not in c.told)
        return any(c.link is not None for c in starting) or self._slots > running

    def _describe_move(self, job: _Job, task: str, source: int, target: int) -> str:
        where = self._containers[target].ready.get(job.add.job, "?")
        came = self._containers[source].ready.get(job.add.job, "?") if source in self._containers else "?"
        return (f"task {task} moves from container {source} ({came}) to container {target} ({where}): rebalanced onto "
                "a new container; it restores its stores there (from the blob store unless that dir holds them)")

    def _released(self, job: _Job, task: str, index: int) -> None:
        if job.owner.get(task) != index:
            return
        target = job.moving.pop(task, None)
        job.owner[task] = None
        if job.leaving or task in job.done:
            return
        if target is not None and target in self._containers and job.add.job in self._containers[target].ready:
            job.owner[task] = target
            self._send(target, AssignTasks(job.add.job, [task]))

    def _maybe_left(self, job: _Job) -> None:
        if not job.leaving:
            return
        key = job.add.job
        for container in self._containers.values():
            if container.link is not None and key in container.told and f"remove:{key}" not in container.told:
                container.told.add(f"remove:{key}")
                container.link.send(RemoveJob(key))
        running = [t for t, owner in job.owner.items() if owner is not None and owner in self._containers
                   and t not in job.done]
        if running:
            return
        del self._jobs[key]
        for container in self._containers.values():
            container.told.discard(key)
            container.told.discard(f"remove:{key}")
            container.ready.pop(key, None)
            container.refused.pop(key, None)
            container.retry.pop(key, None)
        job.member.left()

    def _send(self, index: int, command: Command) -> None:
        container = self._containers.get(index)
        if container is not None and container.link is not None:
            container.link.send(command)
