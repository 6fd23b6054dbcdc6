"""How :class:`~sparza.testing.TestRunner` hosts a job's tasks: the engine's two execution modes, in this process.

- **Containers** (``job.execution.mode: containers``, the default, as on Spark): a :class:`RunnerProcess` is the
  runner's process, an :class:`~sparza.engine.inprocess.InProcessHost` with its containers; each job (an
  application's stage) joins it as an :class:`~sparza.engine.inprocess.InProcessJob` and its tasks run in those
  containers, planned, processed and committed by the container's own task loops (:class:`ContainerJob`). A round
  is one pass in which every due task runs at most one batch; the host's clock moves a whole commit interval per
  round, so every task is due in every round whatever ``task.commit.ms`` says, and a task that failed retries in the
  next round (its backoff has passed).
- **Batches** (``job.execution.mode: batches``): the micro-batch adapter's path, a
  :class:`~sparza.engine.planner.BatchPlanner` for the whole job and :func:`~sparza.runtime.driver.batchtask.
  make_task_runner` per split, one batch of every task at a time (:class:`BatchJob`). The plan lives only as long as
  the runner's process: a restart plans from the task checkpoints (an open intent replays exactly), as every host
  does; no offset log is kept beside them.

Either way a process that dies (:meth:`RunnerProcess.kill`) loses what it did not commit: its containers' stores are
closed without a commit and what they sent is abandoned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparza.clock import ManualClock
from sparza.config import Config
from sparza.engine.inprocess import InProcessHost, InProcessJob
from sparza.engine.messages import Event
from sparza.metrics import MetricsRegistry

__all__ = ["ROUND_S", "BatchJob", "ContainerJob", "EngineWrapper", "HostedJob", "RoundOutcome", "RunnerProcess"]

ROUND_S = 3600.0
"""How far the containers' monotonic clock moves per round: past any commit interval and retry backoff (30 s at
most), so every idle task is due in every round."""


class HostedJob:
    """What both modes share of one job (or one stage of an application): its typed config, task models, checkpoint
    store, drain monitor and the standalone job claim, as a ``sparza run`` processor holds them."""

    def __init__(self, name: str, config: Config, *, clock: Callable[[], int] | None = None) -> None:
        from sparza.engine.jobconfig import JobConfig

        self.name = name
        self._clock = clock  # epoch ms (the runner's clock): the drain monitor's polls are timed by it
        self.job = JobConfig.from_config(config)
        self.config = self.job.config
        self.batches = 0
        self.ended = False
        self.drained = False
        self.claim: Any = None  # JobClaim while this "process" holds (or tries to take) the job's claim
        self.generation = 0
        self.fresh = True
        self.regroups = 0  # times its tasks started again for grown input partitions
        self.metrics = MetricsRegistry()
        """The job's registry as a ``sparza run`` driver keeps it: every task result's metric changes merged (a task's
        own under ``<task>:<group>``), and what the driver's own storage clients count (the drain monitor's reads,
        the checkpoint reads). Kept across restarts of the runner's process: the whole test's counts."""
        self.open()

    def open(self) -> None:
        """What a (re)started processor builds: the task models, the checkpoint store, the drain monitor."""
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.inputs import InputSystems
        from sparza.runtime.driver.drainmonitor import DrainMonitor

        inputs = InputSystems(self.job, metrics=self.metrics)
        self.inputs = inputs
        self.tasks = inputs.task_models()
        self.checkpoints = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics)
        clock = self._clock
        # Read every job.drain-monitor.poll.interval.ms of the runner's clock, as a processor reads it on its own.
        self.monitor = DrainMonitor(self.config, metrics=self.metrics,
                                    **({"clock": lambda: clock() / 1000.0} if clock is not None else {}))
        self.fresh = True

    def read_drain_now(self) -> None:
        """Read the drain request at once (a drain requested or removed by the runner itself)."""
        self.monitor.poll(force=True)

    def carry(self, other: HostedJob) -> None:
        """Take over what ``other`` (the same job before a config change) knew: batches, ends, the claim."""
        self.batches, self.ended, self.drained = other.batches, other.ended, other.drained
        self.regroups = other.regroups
        self.claim, self.generation = other.claim, other.generation
        self.metrics.merge_changes(other.metrics.changes())

    def record(self, results: list[Any]) -> None:
        """Merge the metric changes of task results into :attr:`metrics`, as the driver does with each report."""
        for result in results:
            self.metrics.merge_changes(result.metrics, f"{result.task}:")
            self.metrics.merge_changes(result.system_metrics)

    def hold_claim(self, processor_id: str, clock: ManualClock) -> None:
        """Take the job's claim as ``sparza run`` does (and fence older holders), or renew it when held:
        :class:`~sparza.coordination.jobclaim.ClaimHeldError` when a live processor holds it,
        :class:`~sparza.coordination.jobclaim.ClaimLostError` when another took it over."""
        from sparza.coordination.jobclaim import CLAIM_RENEW_INTERVAL_MS, CLAIM_TIMEOUT_MS, JobClaim
        from sparza.engine.checkpoint import SupportsJobClaim, stamp_generation
        from sparza.errors import SparzaError

        if self.claim is not None and self.claim.held:
            self.claim.renew()
            return
        store = self.checkpoints
        if not isinstance(store, SupportsJobClaim):
            raise SparzaError(f"the checkpoint store {store.describe()} cannot keep a job claim")
        if self.claim is None or self.claim.lost is not None:
            self.claim = JobClaim(
                store.claim_backend(), self.job.job_key, processor_id,
                timeout_ms=CLAIM_TIMEOUT_MS.get(self.config),
                renew_interval_ms=CLAIM_RENEW_INTERVAL_MS.get(self.config), clock=clock,
                epoch_floor=lambda: max((cp.generation for cp in store.read_all().values()), default=0))
        epoch = self.claim.acquire()
        stamp_generation(store, [t.name for t in self.tasks], epoch)
        self.generation = epoch
        self.claimed()

    def claimed(self) -> None:
        """The claim was just taken: a query that starts now reads the checkpoints now."""

    def release_claim(self) -> None:
        """Give the claim up, as a processor that stops cleanly does."""
        claim, self.claim = self.claim, None
        if claim is not None:
            claim.release()

    def restarted(self) -> None:
        """A new process: what the old one held in memory is gone."""
        self.open()


class BatchJob(HostedJob):
    """The micro-batch path (``job.execution.mode: batches``): one planner for the job, a split per task, each run by
    the function the Spark source's ``read`` runs. The plan is this process's memory only (see the module
    docstring)."""

    def open(self) -> None:
        """A fresh planner over fresh admins, as a (re)started processor's Spark source builds."""
        from sparza.engine.planner import BatchPlanner

        super().open()
        self.spark_batch_id = 0
        self.planner = BatchPlanner(self.job, self.tasks, self.inputs.ops, self.inputs.positions)
        self.plan: Any = None
        self.pending: Any = None
        self.replan()

    def claimed(self) -> None:
        if self.fresh:  # `sparza run` starts its query (initialOffset) only once it holds the claim
            self.replan()

    def _check_partitions(self) -> None:
        """What a processor's containers do at each poll: an input whose partition count changed stops the job
        (``job.partition.expansion: fail``) or regroups its tasks (``group``, ``new-tasks``): they start again from
        their checkpoints, grouped for the new counts (:mod:`sparza.engine.partitions`)."""
        from sparza.engine.partitions import RegroupNeeded, changes_between, check_running, expansion_policy
        from sparza.engine.worker import WORKER

        broadcast = (frozenset(s.stream for s in self.job.inputs if s.broadcast)
                     - frozenset(s.stream for s in self.job.inputs if not s.broadcast))
        changes = changes_between(self.inputs.partition_counts, self.inputs.positions(), broadcast)
        try:
            check_running(self.job.job_key, expansion_policy(self.config), changes)
        except RegroupNeeded:
            WORKER.forget(self.config)
            self.open()
            self.regroups += 1

    def replan(self) -> None:
        """The start plan from the task checkpoints."""
        self.plan = self.planner.initial(self.checkpoints.read_all())
        self.pending = None
        self.fresh = True  # no batch planned since: a query that starts now reads the checkpoints now

    def step(self, now_ms: int) -> list[Any]:
        """Plan and run one batch of every task; empty when there is nothing to plan. A batch that raises stays
        pending and runs again, with the same plan, on the next step (as Spark retries a task)."""
        from sparza.engine.errors import tasks_failed
        from sparza.engine.executor import TaskAttemptError
        from sparza.engine.results import BatchStatus, result_from_row
        from sparza.engine.split import marker_batch
        from sparza.runtime.driver.batchtask import make_task_runner
        from sparza.testing.faults import InjectedFault

        if self.pending is None:
            self._check_partitions()
            # The driver's drain monitor, read before a plan once its poll interval passed (as a processor does).
            self.planner.drain = self.monitor.poll()
            planned = self.planner.next(self.plan, now_ms)
            if planned is self.plan:
                return []
            self.pending = planned
            self.fresh = False
        splits = self.planner.splits(self.plan, self.pending)
        run_tasks = make_task_runner(dict(self.config.items()), self.spark_batch_id, self.generation,
                                     len(self.tasks))
        results: list[Any] = []
        for split in splits:
            try:
                for batch in run_tasks(iter([marker_batch(split)])):
                    results.extend(result_from_row(row) for row in batch.to_pylist())
            except TaskAttemptError as exc:
                # An attempt Spark would retry; a failure the test injected is re-raised as what it is.
                if isinstance(exc.__cause__, InjectedFault):
                    raise InjectedFault(str(exc.__cause__)) from exc
                raise
        self.record(results)
        failed = [r for r in results if r.status is BatchStatus.FAILED]
        if failed:
            raise tasks_failed([r.error for r in failed])  # as sparza run reports them
        self.plan, self.pending = self.pending, None
        self.spark_batch_id += 1  # a retried batch keeps its id, as in Spark
        self.batches += 1
        self.ended = bool(results) and all(r.ended for r in results)
        self.drained = bool(results) and all(r.drained for r in results)
        if self.drained and self.plan.drain is not None:
            # What a processor does when it stops drained: the request goes once every task of every job drained.
            from sparza.runtime.driver.drainmonitor import finish_drain

            finish_drain(self.config)
            self.read_drain_now()  # the next plan must not run under the request just removed
        return results

    def freeze(self) -> None:
        """``--once``: plan only up to what exists now."""
        self.planner.freeze_targets()

    def thaw(self) -> None:
        """The end of a ``--once`` run."""
        self.planner.targets = None

    def waits(self) -> dict[str, list[str]]:
        """What the last plan held main input back for (reason → tasks)."""
        return dict(self.planner.broadcast_waits())


class RoundOutcome:
    """What one round gave a job: its committed (and skipped or failed) batch results, the tasks that wait for a
    broadcast publication, and the failures the runner must raise (a retry-able attempt, a task lost)."""

    def __init__(self) -> None:
        self.results: list[Any] = []
        self.retrying: list[str] = []
        self.lost: list[str] = []
        self.regrouped = False  # its tasks stopped to regroup for grown partitions and start again
        self.moved = False  # a container was lost in the round: its tasks start again elsewhere

    @property
    def progressed(self) -> bool:
        """True when the round ran a batch of the job or moved or regrouped its tasks (more rounds may follow)."""
        return bool(self.results) or self.regrouped or self.moved

    @property
    def failed(self) -> list[Any]:
        """Results of batches that failed for good (a poison message, a task exception)."""
        from sparza.engine.results import BatchStatus

        return [r for r in self.results if r.status is BatchStatus.FAILED]


class ContainerJob(HostedJob):
    """A job in the container mode: the :class:`~sparza.engine.inprocess.InProcessJob` it joined the runner's process
    with (None while it runs nowhere), and what its tasks reported."""

    def open(self) -> None:
        """A new process: no member yet (the old process's one died with it)."""
        super().open()
        self.member: Any = None
        self.seen = 0
        self.waiting: dict[str, str] = {}
        self.done: dict[str, str] = {}
        self.drain_json: dict[str, Any] | None = None

    def joined(self, member: Any) -> None:
        """``member`` runs the job now."""
        self.member = member
        self.seen = 0
        self.waiting = {}
        self.done = {}

    def collect(self) -> RoundOutcome:
        """The events the member received since the last call, sorted into a :class:`RoundOutcome`."""
        from sparza.engine.errors import FENCED_OFF
        from sparza.engine.messages import TaskDone, TaskLost, TaskResult, TaskRetrying, TaskWaiting

        out = RoundOutcome()
        member = self.member
        if member is None:
            return out
        events, self.seen = member.events[self.seen:], len(member.events)
        for event in events:
            if isinstance(event, TaskResult):
                out.results.append(event.result)
                self.record([event.result])
                self.waiting.pop(event.result.task, None)
            elif isinstance(event, TaskWaiting):
                self.waiting[event.task] = event.why
            elif isinstance(event, TaskDone):
                if event.why != "stopped":
                    self.done[event.task] = event.why
            elif isinstance(event, TaskRetrying):
                out.retrying.append(event.error)
            elif isinstance(event, TaskLost):
                out.lost.append(f"{FENCED_OFF} task '{event.task}': {event.error}")
        whys = [self.done.get(t.name) for t in self.tasks]
        if whys and all(w == "ended" for w in whys):
            self.ended = True
        if whys and all(w in ("ended", "drained") for w in whys) and "drained" in whys:
            self.drained = True
        return out

    def waits(self) -> dict[str, list[str]]:
        """What tasks not done wait for (reason → tasks), as they reported it."""
        out: dict[str, list[str]] = {}
        for task, why in self.waiting.items():
            if task not in self.done:
                out.setdefault(why, []).append(task)
        return out

    def regrouping(self) -> bool:
        """True when every task is done and some stopped to regroup for grown input partitions: the host lets the
        job go and starts its tasks again, grouped for the new counts."""
        whys = [self.done.get(t.name) for t in self.tasks]
        return bool(whys) and "regroup" in whys and all(w in ("regroup", "ended", "drained", "caught up")
                                                       for w in whys)

    def unfinished(self) -> list[str]:
        """Tasks neither done nor waiting."""
        return [t.name for t in self.tasks if t.name not in self.done and t.name not in self.waiting]


class _Member(InProcessJob):
    """A job of the runner's process. Under ``once`` it leaves once every task is done, as ``sparza run --once``;
    otherwise it stays until told (:meth:`RunnerProcess.leave`): a task that ended or drained stays done, as in a
    processor that keeps running, and the runner decides when the job stops."""

    def on_event(self, event: Event) -> None:
        """Keep the event; leave by itself only under ``once``."""
        if self.once:
            super().on_event(event)
            return
        from sparza.engine.messages import TaskDone

        self.events.append(event)
        if isinstance(event, TaskDone) and event.why != "stopped":
            self.done[event.task] = event.why


EngineWrapper = Callable[[Any], None]
"""``wrap(engine)``: called with each :class:`~sparza.engine.job.EngineJob` a container of the runner's process builds
(and those it holds when the wrapper is added); it may replace the engine's real objects (its ``checkpoints``) with
wrappers around them, which the tasks of that container then use."""


class _RunnerHost(InProcessHost):
    """An in-process host whose containers hand each job engine they build to the runner's wrappers (before any task of
    it is assigned there): faults are injected around real objects, not by hooks in the engine."""

    def __init__(self, wrappers: list[EngineWrapper], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wrappers = wrappers

    def _launch(self, index: int) -> None:
        super()._launch(index)
        container = self.containers[index]
        add_job = container._add_job

        def add_and_wrap(command: Any) -> None:
            known = command.job in container.jobs
            add_job(command)
            job = container.jobs.get(command.job)
            if job is not None and not known:
                for wrap in self.wrappers:
                    wrap(job.engine)

        container._add_job = add_and_wrap  # type: ignore[method-assign]

    def wrap_running(self, wrap: EngineWrapper) -> None:
        """Apply ``wrap`` to the engines the containers hold now, and to the tasks they run."""
        for container in self.containers.values():
            for job in container.jobs.values():
                wrap(job.engine)
            for task in container.tasks.values():
                task.instance.checkpoints = container.jobs[task.job].engine.checkpoints


class RunnerProcess:
    """The runner's process in the container mode: an :class:`~sparza.engine.inprocess.InProcessHost` with
    ``containers`` slots, its containers' clock moved :data:`ROUND_S` per round and their wall clock the runner's
    :class:`~sparza.clock.ManualClock`. ``threaded_commits`` runs commits in the containers' pools (beside processing,
    as on Spark) instead of inline."""

    def __init__(self, clock: ManualClock, *, containers: int = 1, threaded_commits: bool = False,
                 wrappers: list[EngineWrapper] | None = None) -> None:
        self.rounds = 0
        self.host = _RunnerHost(wrappers if wrappers is not None else [], slots=containers, clock=self._seconds,
                                wall_ms=lambda: clock.now_ms, threaded_commits=threaded_commits)
        self.alive = True

    def _seconds(self) -> float:
        return self.rounds * ROUND_S

    def join(self, job: ContainerJob, *, once: bool, drain: dict[str, Any] | None) -> None:
        """Run ``job`` here (``once``: up to what its inputs hold now, as ``sparza run --once``)."""
        from sparza.engine.container import MAX_RESTARTS

        member = _Member(job.config, generation=job.generation, once=once,
                         max_restarts=MAX_RESTARTS.get(job.config), drain=drain, metrics=job.metrics)
        job.drain_json = drain
        job.joined(member)
        self.host.join(member)

    def settle(self) -> None:
        """Deliver commands and events until nothing moves; no batch starts."""
        self.host.step(run_due=False)

    def round(self) -> None:
        """One round: settle, one pass in which every due task runs at most one batch, settle."""
        self.settle()
        self.rounds += 1
        self.host.step(max_passes=1)
        self.settle()

    def drain(self, job: ContainerJob, request: dict[str, Any] | None) -> None:
        """Job ``job`` drains (``request``) or no longer does (None)."""
        if job.member is not None and request != job.drain_json:
            job.drain_json = request
            self.host.manager.drain(job.member.key, request)

    def leave(self, job: ContainerJob) -> None:
        """Stop ``job`` here (its tasks finish, commit and are released) and wait until it left."""
        member = job.member
        if member is None:
            return
        if not member.has_left:
            member.leave()
            for _ in range(1000):
                self.settle()
                if member.has_left:
                    break
                self.rounds += 1  # a task in retry is due at once
        job.collect()
        job.member = None

    def kill(self) -> None:
        """The process dies: every container is killed (nothing uncommitted survives)."""
        for index in list(self.host.containers):
            self.host.kill(index)
        self.alive = False

    def close(self) -> None:
        """Stop every container cleanly."""
        if self.alive:
            self.host.close()
            self.alive = False
