"""A container: one long-running Spark task that hosts sparza tasks for an epoch (Samza's SamzaContainer).

In the container execution mode (``job.execution.mode: containers``) the driver starts one Spark job per
**epoch** (:mod:`sparza.runtime.driver.epochs`): a barrier stage of ``C`` Spark tasks, one per executor slot,
each of which is a container. Every container runs :func:`run_container`:

1. **Where am I.** Each container names its *location*: the identity of the local state dir of each job
   it may host (:func:`location_of`), which survives executor restarts on the same host. The containers
   exchange their locations (``BarrierTaskContext.allGather``), so each knows every container's.
2. **Which tasks are mine.** Every container computes the same assignment (:func:`assign_tasks`) from the
   containers' locations and where each task committed last (the ``location`` of its task checkpoint,
   which the driver passes in the :class:`EpochPlan`): a task stays with a container at the location that
   holds its state whenever one exists (host affinity, Samza's ``job.host-affinity.enabled``), and only
   tasks whose location is gone (executor lost, rescale) move, to the least-loaded containers.
3. **The run loop.** For each of its tasks the container keeps a :class:`TaskLoop`: a one-task
   :class:`~sparza.engine.planner.BatchPlanner` and the cached
   :class:`~sparza.engine.instance.TaskInstance`.
   It polls the inputs' positions every ``task.poll.interval.ms`` while idle, and whenever a task has new
   messages (and its last batch started at least ``task.commit.ms`` ago) it runs that task's next batch:
   read, process, commit through the same :class:`~sparza.engine.commit.TaskCommit` as a micro-batch
   (intent, producer transactions, snapshots, checkpoint). Stores stay open between batches: the task
   does not leave this process until the epoch ends.
4. **Drain.** A drain (the epoch plan's, or one the driver sends over the channel while the epoch runs) goes
   to the planner of each task of its job, which caps the task's source partitions at the offsets observed at
   the request, exactly as ``--once`` caps them at its targets; a task whose batch says it drained leaves
   the loop (``drained``).
5. **Reporting.** Each batch's result goes to the driver over the container channel
   (:mod:`sparza.runtime.channel`) as it commits, for the status line, metrics and stop decisions; the
   driver's stop request (a signal, a rebalance, a failed stage) is read between batches, so a stop
   waits for at most one batch. Without a channel (the driver cannot be reached) the results come back
   as the Spark task's rows at the epoch's end.

The guarantees are the micro-batch mode's: a batch's range and output version are in the task
checkpoint's intent before any output is flushed, so a container that dies (executor lost, a Spark
retry) restarts its tasks from their last commit and replays an open intent exactly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sparza.config import Config, define_key
from sparza.engine.drain import DrainRequest
from sparza.engine.epoch import EpochJob, EpochPlan
from sparza.engine.errors import RuntimeStateError
from sparza.engine.executor import run_task_batch
from sparza.engine.jobconfig import JobConfig
from sparza.engine.model import TaskModel
from sparza.engine.planner import BatchPlan, BatchPlanner, SspPosition
from sparza.engine.results import BatchResult, BatchStatus
from sparza.errors import ConfigError
from sparza.streams import SystemStreamPartition

__all__ = [
    "Container",
    "ContainerReporter",
    "TaskLoop",
    "assign_tasks",
    "broadcast_ready",
    "location_of",
]

_log = logging.getLogger(__name__)

define_key("task.poll.interval.ms", "50",
           "Container mode: how often an idle container asks its inputs for new messages (Samza's run loop "
           "poll interval); a lower value lowers latency and raises the load on the input systems.", "runtime")

LOCATION_FILE = ".sparza-location"
"""The file in a job's ``job.logged.store.base.dir`` that names that state dir (one uuid per dir)."""


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


def assign_tasks(tasks: list[tuple[str, str]], containers: list[Mapping[str, str]],
                 previous: Mapping[tuple[str, str], str], *, affinity: bool = True) -> dict[tuple[str, str], int]:
    """Which container runs each ``(job, task)``: the same answer on every container (a pure function).

    ``containers[i]`` maps job → container i's location for that job; ``previous`` gives where a task last
    committed. Each container takes at most ``ceil(tasks / containers)`` tasks. With ``affinity``, a task
    goes to a container at its previous location when one has room; the rest go, in task order, to the
    least-loaded container (lowest index first).
    """
    count = len(containers)
    if count == 0:
        raise ValueError("an epoch needs at least one container")
    capacity = -(-len(tasks) // count)
    load = [0] * count
    out: dict[tuple[str, str], int] = {}
    ordered = sorted(tasks)
    if affinity:
        at: dict[tuple[str, str], list[int]] = {}
        for i, locations in enumerate(containers):
            for job, loc in locations.items():
                at.setdefault((job, loc), []).append(i)
        for item in ordered:
            last = previous.get(item)
            if last is None:
                continue
            free = [i for i in at.get((item[0], last), []) if load[i] < capacity]
            if free:
                chosen = min(free, key=lambda i: (load[i], i))
                out[item] = chosen
                load[chosen] += 1
    for item in ordered:
        if item not in out:
            chosen = min(range(count), key=lambda i: (load[i], i))
            out[item] = chosen
            load[chosen] += 1
    return out


PLANNING_ERRORS: tuple[type[Exception], ...] = (RuntimeStateError, ConfigError)
"""Planning failures a retry repeats (see :mod:`sparza.engine.planner`): the job stops at once."""

Clock = Callable[[], float]
"""Seconds, monotonic (``time.monotonic``); injectable so tests can run a container loop without waiting."""


class TaskLoop:
    """One task inside a container: its own planner, its plan, and when its last batch started."""

    def __init__(self, job: JobConfig, model: TaskModel, epoch_job: EpochJob, ops: Mapping[str, Any],
                 positions: Callable[[], Mapping[SystemStreamPartition, SspPosition]]) -> None:
        self.job = job
        self.model = model
        self.epoch_job = epoch_job
        self.planner = BatchPlanner(job, [model], ops, positions,
                                    start_positions={SystemStreamPartition.parse(k): v
                                                     for k, v in epoch_job.start_positions.items()},
                                    broadcast_ready=broadcast_ready(job))
        if epoch_job.targets is not None:
            self.planner.targets = {SystemStreamPartition.parse(k): v for k, v in epoch_job.targets.items()}
        self.drain_request: dict[str, Any] | None = None
        self.plan: BatchPlan | None = None
        self._pending: BatchPlan | None = None
        self.last_started = float("-inf")
        self.done: str | None = None  # why it left the loop: "ended", "caught up", "drained", "stopped", "failed"
        self.waiting: str | None = None  # what its main input waits for, as last reported (None: nothing)
        self.error: Exception | None = None  # a planning failure at start, reported when the loop first runs

    def start(self, checkpoints: Mapping[str, Any]) -> None:
        """The start plan from the task's checkpoint (an open intent is replayed first)."""
        self.plan = self.planner.initial(checkpoints)
        self.set_drain(self.epoch_job.drain)

    def set_drain(self, request: dict[str, Any] | None) -> None:
        """The job's drain request as the driver sent it (None: none, or cancelled): the planner caps the task's
        source partitions at its offsets."""
        if request != self.drain_request:
            self.drain_request = request
            self.planner.drain = DrainRequest.from_json(request) if request is not None else None

    def next_split(self, now_ms: int) -> Any:
        """The task's next batch as a split, or None when it has nothing to do now."""
        assert self.plan is not None
        planned = self.planner.next(self.plan, now_ms)
        if planned is self.plan:
            return None
        self._pending = planned
        return self.planner.splits(self.plan, planned)[0]

    def committed(self) -> None:
        """The split :meth:`next_split` returned was committed (or skipped as a replay): move the plan on."""
        self.plan = self._pending

    def ended(self) -> bool:
        """True when the task's inputs all ended (in this run or an earlier one) and nothing is left to do."""
        return self.plan is not None and self.plan.task(self.model.name).ended


def broadcast_ready(job: JobConfig) -> Callable[[Any], bool]:
    """The gate of a container's planner: whether the broadcast bootstrap stores of a stream have published their
    bootstrapped snapshots (asked only for jobs with one, until they have); a task's main input waits for it."""

    def ready(stream: Any) -> bool:
        from sparza.blobstore import blob_store_manager_from_config
        from sparza.state.adjunct import broadcast_bootstrap_published

        return broadcast_bootstrap_published(job.config, stream, blob_store_manager_from_config(job.config),
                                             job.name, job.job_id)

    return ready


def _cached_positions(inputs: Any) -> tuple[Callable[[], Mapping[SystemStreamPartition, SspPosition]],
                                           Callable[[], None]]:
    """``(positions, refresh)``: one metadata read per poll for all of a job's tasks in this container."""
    cache: list[Mapping[SystemStreamPartition, SspPosition] | None] = [None]

    def positions() -> Mapping[SystemStreamPartition, SspPosition]:
        found = cache[0]
        if found is None:
            found = cache[0] = inputs.positions()
        return found

    def refresh() -> None:
        cache[0] = None

    return positions, refresh


class ContainerReporter(Protocol):
    """Where a container's run loop reports, and how it hears the driver (the channel, or a test)."""

    def result(self, job: str, result: BatchResult) -> None:
        """One task batch committed, was skipped as a replay, or failed deterministically."""

    def done(self, job: str, task: str, why: str) -> None:
        """A task left the run loop: ``caught up`` (--once), ``ended`` (every input ended), ``drained``,
        ``stopped``."""

    def waiting(self, job: str, task: str, why: str) -> None:
        """A task has nothing to do now but is not caught up: its main input waits for ``why`` (a broadcast store's
        bootstrapped publication). Said once per wait; the task's next result ends it."""

    def wait_end(self, wait_s: float) -> bool:
        """Wait up to ``wait_s`` seconds for the driver's request to end the epoch; True once it came."""

    def drains(self) -> Mapping[str, dict[str, Any] | None]:
        """Job → the drain request the driver sent while the epoch runs (None: cancelled); empty: none sent."""


@dataclass
class _JobParts:
    epoch_job: EpochJob
    job: JobConfig
    refresh: Callable[[], None]


class Container:
    """The run loop of one container (see the module docstring); :func:`run_container` builds and runs it.

    ``clock`` (monotonic seconds) and ``wall_ms`` (epoch ms, the batches' ``planned_at``) are injectable so
    an in-process test can run a container without Spark.
    """

    def __init__(self, plan: EpochPlan, index: int, assignment: Mapping[tuple[str, str], int],
                 reporter: ContainerReporter, *, location: Mapping[str, str] | None = None,
                 clock: Clock = time.monotonic, wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 resolve: Callable[[Config], Config] = lambda config: config) -> None:
        self.plan = plan
        self.resolve = resolve  # the host's way to put a shipped config's secrets back
        self.index = index
        self.reporter = reporter
        self.clock = clock
        self.wall_ms = wall_ms
        self.location = dict(location or {})
        self.loops: dict[tuple[str, str], TaskLoop] = {}
        self.stopped = False  # a deterministic failure stopped every task
        self._jobs: dict[str, _JobParts] = {}
        for epoch_job in plan.jobs:
            mine = [t for t in epoch_job.tasks if assignment.get((epoch_job.key, t)) == index]
            if mine:
                self._add_job(epoch_job, mine)

    def _add_job(self, epoch_job: EpochJob, tasks: list[str]) -> None:
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.inputs import InputSystems
        job = JobConfig.from_config(self.resolve(Config(epoch_job.config)))
        inputs = InputSystems(job)
        positions, refresh = _cached_positions(inputs)
        models = {m.name: m for m in inputs.task_models()}
        checkpoints = checkpoint_store_from_config(job.config, job.job_key)
        self._jobs[epoch_job.key] = _JobParts(epoch_job, job, refresh)
        for name in tasks:
            stored = checkpoints.read(name)
            loop = TaskLoop(job, models[name], epoch_job, inputs.ops, positions)
            self.loops[(epoch_job.key, name)] = loop
            try:
                loop.start({name: stored.checkpoint} if stored is not None and stored.checkpoint is not None else {})
            except PLANNING_ERRORS as exc:
                loop.error = exc

    def run(self) -> None:
        """Run every task until the epoch's end, the driver's end request, or each task is done; then
        release the tasks' stores (the next epoch may run them in another process)."""
        try:
            self._loop()
        finally:
            self._release()

    def _finish(self, key: tuple[str, str], loop: TaskLoop, why: str) -> None:
        loop.done = why
        self.reporter.done(key[0], key[1], why)

    def _loop(self) -> None:
        deadline = self.clock() + self.plan.duration_ms / 1000.0
        poll_s = max(self._poll_ms(), 1) / 1000.0
        while True:
            active = [(k, loop) for k, loop in self.loops.items() if loop.done is None]
            if not active:
                return
            now = self.clock()
            if self.reporter.wait_end(0.0) or now >= deadline:
                for key, loop in active:
                    self._finish(key, loop, "stopped")
                return
            drains = self.reporter.drains()
            for key, loop in active:
                if key[0] in drains:
                    loop.set_drain(drains[key[0]])
            # A task is due when its last batch started at least task.commit.ms ago; the others wait for it.
            due = [(key, loop) for key, loop in active if now - loop.last_started >= self._commit_s(key[0])]
            if not due:
                next_due = min(loop.last_started + self._commit_s(key[0]) for key, loop in active)
                self.reporter.wait_end(max(0.0, min(next_due, deadline) - now))
                continue
            for job_key in {key[0] for key, _loop in due}:
                self._jobs[job_key].refresh()  # one metadata read per job and poll
            ran = False
            for key, loop in due:
                if self._step(key, loop):
                    ran = True
                if self.stopped:
                    return
            if not ran:
                self.reporter.wait_end(min(poll_s, max(deadline - self.clock(), 0.0)))

    def _commit_s(self, job_key: str) -> float:
        return self._jobs[job_key].job.commit_ms / 1000.0

    def _step(self, key: tuple[str, str], loop: TaskLoop) -> bool:
        """Run the task's next batch if it has one; True when a batch ran."""
        parts = self._jobs[key[0]]
        try:
            if loop.error is not None:
                raise loop.error
            split = loop.next_split(self.wall_ms())
        except PLANNING_ERRORS as exc:
            # What the driver's planner raises in the micro-batch mode (an input re-created behind the
            # checkpoint, input after an ended task's end): deterministic, so the job stops.
            self._fail(key, loop, BatchResult(key[1], loop.plan.batch if loop.plan else 0, BatchStatus.FAILED,
                                              error=f"task '{key[1]}': {type(exc).__name__}: {exc}"))
            return False
        if split is None:
            waits = loop.planner.broadcast_waits()
            if loop.ended():
                self._finish(key, loop, "ended")
            elif not waits:
                if parts.epoch_job.targets is not None:
                    self._finish(key, loop, "caught up")
            elif next(iter(waits)) != loop.waiting:
                loop.waiting = next(iter(waits))
                self.reporter.waiting(key[0], key[1], loop.waiting)
            return False
        loop.waiting = None
        loop.last_started = self.clock()
        result = run_task_batch(parts.job.config, split, generation=parts.epoch_job.generation,
                                task_count=parts.epoch_job.task_count, resident=True,
                                location=self.location.get(key[0]))
        if result.status is BatchStatus.FAILED:
            self._fail(key, loop, result)
            return True
        self.reporter.result(key[0], result)
        loop.committed()
        if result.ended:
            self._finish(key, loop, "ended")
        elif result.drained:
            self._finish(key, loop, "drained")
        return True

    def _fail(self, key: tuple[str, str], loop: TaskLoop, result: BatchResult) -> None:
        """A deterministic failure: report it and stop every task of this container (the job stops)."""
        self.stopped = True
        self.reporter.result(key[0], result)
        self._finish(key, loop, "failed")
        for other, other_loop in self.loops.items():
            if other_loop.done is None:
                self._finish(other, other_loop, "stopped")

    def _release(self) -> None:
        from sparza.engine.instance import release_instance

        for (job_key, task), _loop in self.loops.items():
            release_instance(self._jobs[job_key].job.config, task)

    def _poll_ms(self) -> int:
        values = [p.job.config.get_int("task.poll.interval.ms", 50, min_value=0) for p in self._jobs.values()]
        return min(values) if values else 50
