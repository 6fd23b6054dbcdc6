"""The driver side of the container mode: epochs of long-running containers, one Spark job each.

A :class:`ContainerPool` belongs to one SparkSession (one processor). Every job (an application stage, a
task.class job) that runs in container mode joins it through a :class:`ContainerQuery`, which stands for
that job's streaming query towards :class:`~sparza.runtime.driver.runner.JobRunner` (the part of
``StreamingQuery``'s interface the runner uses). The pool's thread runs epochs back to back while any job
is in it:

1. **Plan.** An :class:`~sparza.engine.container.EpochPlan` with every job's config (without secrets), its
   tasks, where each task last committed (read from the task checkpoints), and the positions its bounded
   and bootstrap streams are measured against.
2. **Run.** ``spark.range(C).mapInArrow(run_container, barrier=True)``: ``C`` containers at once, one per
   executor slot (``job.container.count`` to choose fewer). A barrier stage starts all of them together,
   which lets them agree on who runs which task (:func:`~sparza.engine.container.assign_tasks`) from
   where each one is. Their reports arrive through the container channel (:mod:`sparza.runtime.channel`)
   while the epoch runs.
3. **End.** After ``job.container.epoch.ms``, or when a job asks to stop (a signal, a failed task, a
   rebalance, a job joining) the pool asks the containers to end: each finishes its running batch,
   commits and returns. A job whose tasks all ended (or caught up, under ``--once``, or drained) leaves the
   pool. A drain requested while an epoch runs reaches its containers over the channel (:meth:`ContainerQuery.drain`):
   each task's planner caps its source partitions at the request's offsets, and a task that drained leaves
   its container's run loop.

An epoch that fails (an executor lost, a container's error that a retry may cure) is started again, with
the executors that are left: the tasks restore from their last commit. After
``job.container.max.restarts`` failed epochs in a row without a committed batch the jobs fail, naming the
cause.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sparza.config import BOOL, STR, Choice, Int, define_key
from sparza.engine.epoch import EpochJob, EpochPlan
from sparza.engine.errors import JobFailedError, tasks_failed
from sparza.engine.results import BatchResult, BatchStatus
from sparza.errors import ConfigError
from sparza.runtime.channel import ChannelEvent, ContainerChannel, result_from_json
from sparza.runtime.container.sparktask import CONTAINER_SCHEMA, run_container

__all__ = ["EXECUTION_MODES", "ContainerPool", "ContainerQuery", "check_container_session", "execution_mode"]

_log = logging.getLogger(__name__)

_PKG = "runtime"
EXECUTION_MODES = ("containers", "batches")
EXECUTION_MODE = define_key("job.execution.mode", "containers",
                            "containers: each Spark task is a long-running container that hosts tasks for an epoch, "
                            "keeps them where their state is and processes messages as they arrive; batches: one "
                            "Spark micro-batch per batch (every task moves with Spark's placement).", _PKG,
                            kind=Choice(*EXECUTION_MODES))
EPOCH_MS = define_key("job.container.epoch.ms", 300000,
                      "Container mode: how long an epoch lasts before the containers hand their tasks back (new "
                      "executors are used from the next epoch).", _PKG, kind=Int(min_value=1))
CONTAINER_COUNT = define_key("job.container.count", None,
                             "Container mode: how many containers (Spark tasks) an epoch runs; default (or 0) one per "
                             "executor slot, at most one per task.", _PKG, kind=Int(min_value=0))
HOST_AFFINITY = define_key("job.host-affinity.enabled", True,
                           "Container mode: keep each task on the executor whose state dir holds its state (Samza's "
                           "key); false spreads tasks evenly at every epoch.", _PKG, kind=BOOL)
MAX_RESTARTS = define_key("job.container.max.restarts", 3,
                          "Failed epochs (containers) or streaming-query deaths (batches) in a row before the job "
                          "fails: an executor lost, Spark's retries of a task exhausted, a worker that did not connect "
                          "back; a committed batch resets the count.", _PKG, kind=Int(min_value=0))
DRIVER_TIMEOUT_MS = define_key("job.container.driver.timeout.ms", None,
                               "Container mode: a container whose driver has been silent this long ends its epoch at "
                               "the next batch boundary (a frozen or cut-off processor stops doing work); default: "
                               "half of job.coordinator.standalone.claim.timeout.ms, at most 10 s.", _PKG,
                               kind=Int(min_value=100))
CHANNEL_HOST = define_key("job.container.channel.host", None,
                          "Container mode: the address executors reach the driver's container channel at (default "
                          "spark.driver.host).", _PKG, kind=STR)


def execution_mode(config: Any) -> str:
    """``containers`` or ``batches`` (``job.execution.mode``)."""
    return EXECUTION_MODE.get(config)


def check_container_session(spark: Any) -> None:
    """Refuse a session the container mode cannot run on, naming the setting: Spark refuses barrier stages when
    executors come and go with the load (dynamic allocation)."""
    value = str(spark.conf.get("spark.dynamicAllocation.enabled", "false") or "false").strip().lower()
    if value == "true":
        raise ConfigError("job.execution.mode", "containers", "", message=(
            "job.execution.mode is containers, but the Spark session has spark.dynamicAllocation.enabled: true, and "
            "Spark refuses the barrier stage an epoch runs its containers in when executors come and go. Set "
            "job.execution.mode: batches (one micro-batch per batch, any executors), or turn dynamic allocation off "
            "and size the executors for the job"))


class ContainerQuery:
    """One job in the container pool, seen by :class:`~sparza.runtime.driver.runner.JobRunner` as its streaming query.

    ``build_epoch_job()`` gives the job's part of the next epoch. ``on_results(results, epoch)`` receives
    committed results (at most about once a second, and at every epoch's end); ``on_notice(line)`` gets
    what the status line should say (tasks that moved, containers restarted).
    """

    def __init__(self, pool: ContainerPool, key: str, tasks: list[str], build_epoch_job: Callable[[], EpochJob],
                 on_results: Callable[[list[BatchResult], int], None], on_notice: Callable[[str], None], *,
                 once: bool, epoch_ms: int, affinity: bool, count: int | None, max_restarts: int,
                 channel_host: str | None = None, driver_timeout_ms: int = 10_000,
                 report_interval_s: float = 1.0, stopping: Callable[[], bool] = lambda: False) -> None:
        self.pool = pool
        self.stopping = stopping
        """The runner is stopping (a signal came) even before it called :meth:`request_stop`: a failed epoch is
        then not started again (a SIGTERM sent to the process group stops the JVM and its workers too)."""
        self.key = key
        self.tasks = set(tasks)
        self.build_epoch_job = build_epoch_job
        self.on_results = on_results
        self.on_notice = on_notice
        self.once = once
        self.epoch_ms = epoch_ms
        self.affinity = affinity
        self.count = count
        self.max_restarts = max_restarts
        self.report_interval_s = report_interval_s
        self.channel_host = channel_host
        self.driver_timeout_ms = driver_timeout_ms
        self.name = key
        self._lock = threading.Lock()
        self._pending: list[BatchResult] = []
        self._last_report = time.monotonic()
        self._done: dict[str, str] = {}
        self._finished = threading.Event()
        self._stop_requested = False
        self._error: BaseException | None = None
        self._failed_epochs = 0
        self._epoch = -1
        # Not "Initializing sources": a runner waits on that, and a container job has no source to start.
        self._message = "Waiting for the next epoch"
        self._committed_since_failure = False
        # Tasks whose main input waits (for a broadcast store's bootstrapped publication), as containers said this
        # epoch; when each reason was first said, and whether the status line said it yet; messages read.
        self._waiting: dict[str, str] = {}
        self._waiting_since: dict[str, float] = {}
        self._waits_noticed: set[str] = set()
        self._read_in_epoch = 0
        self._stalled_epochs = 0
        self.drain_request: dict[str, Any] | None = None
        """The job's drain request as JSON (:meth:`sparza.engine.drain.DrainRequest.to_json`), or None: every
        epoch's plan carries it."""

    # --- StreamingQuery-like interface ---------------------------------------------------------
    def start(self) -> ContainerQuery:
        """Join the pool (its next epoch runs this job's tasks)."""
        self.pool.join(self)
        return self

    @property
    def isActive(self) -> bool:
        """True until the job left the pool."""
        return not self._finished.is_set()

    @property
    def status(self) -> dict[str, Any]:
        """``{"message", "isTriggerActive"}`` as StreamingQuery.status."""
        return {"message": self._message, "isTriggerActive": False, "isDataAvailable": False}

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Wait for the job to leave the pool (up to ``timeout`` s); raises its failure as StreamingQuery does."""
        finished = self._finished.wait(timeout)
        self.flush(force=False)
        if self._error is not None:
            raise self._error
        return finished

    def stop(self) -> None:
        """End the running epoch (each container finishes its batch and commits) and leave the pool."""
        self.request_stop()
        self._finished.wait()
        self.flush(force=True)

    def exception(self) -> BaseException | None:
        """The failure that ended the job, or None."""
        return self._error

    # --- pool side -----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask for the end of this job (the running epoch ends at a batch boundary)."""
        with self._lock:
            if self._stop_requested:
                return
            self._stop_requested = True
        self.pool.end_epoch()

    def drain(self, request: dict[str, Any] | None) -> None:
        """The job drains (``request``), or no longer does (None): the running epoch's containers hear it over
        the channel, the next epochs from their plan (the runner's ``build_epoch_job``)."""
        self.drain_request = request
        self.pool.send_drain(self.key, request)

    @property
    def stop_requested(self) -> bool:
        """True once :meth:`request_stop` was called, or the runner is stopping."""
        return self._stop_requested or self.stopping()

    def fail(self, error: BaseException) -> None:
        """The job failed: remember why and stop it."""
        if self._error is None:
            self._error = error
        self.request_stop()

    def epoch_started(self, epoch: int) -> None:
        """The pool started ``epoch`` with this job in it."""
        self._epoch = epoch
        self._message = "Processing new data"
        self._done = {t: why for t, why in self._done.items() if why in ("ended",)}
        with self._lock:  # each epoch's containers plan afresh, and say again what they wait for
            self._waiting.clear()
            self._waiting_since.clear()
            self._waits_noticed.clear()
            self._read_in_epoch = 0

    def on_event(self, event: ChannelEvent) -> None:
        """A container's report about this job."""
        kind = event.get("type")
        if kind == "result":
            result = result_from_json(event["result"])
            self._add_result(result)
        elif kind == "done":
            with self._lock:
                self._done[str(event["task"])] = str(event["why"])
        elif kind == "waiting":
            with self._lock:
                why = str(event["why"])
                self._waiting[str(event["task"])] = why
                self._waiting_since.setdefault(why, time.monotonic())

    def _add_result(self, result: BatchResult) -> None:
        with self._lock:
            self._pending.append(result)
            self._waiting.pop(result.task, None)  # it ran a batch: it waits no more
            if result.status is BatchStatus.COMMITTED:
                self._committed_since_failure = True
                self._read_in_epoch += result.messages
        if result.status is BatchStatus.FAILED:
            self.flush(force=True)
            self.fail(tasks_failed([result.error or f"task '{result.task}' failed"]))
            return
        if result.shutdown:
            self.request_stop()
        self.flush(force=False)

    def flush(self, *, force: bool) -> None:
        """Hand the results gathered so far to the runner (at most once per report interval unless forced), and say
        what tasks wait for once they have for a report interval (once per epoch)."""
        self._notice_waits(force=force)
        with self._lock:
            if not self._pending or (not force and time.monotonic() - self._last_report < self.report_interval_s):
                return
            results, self._pending = self._pending, []
            self._last_report = time.monotonic()
        self.on_results(results, self._epoch)

    def _waits(self) -> dict[str, list[str]]:
        """Reason → the tasks that wait for it now (the lock held)."""
        out: dict[str, list[str]] = {}
        for task, why in self._waiting.items():
            if self._done.get(task) not in ("ended", "caught up", "drained"):
                out.setdefault(why, []).append(task)
        return out

    def _notice_waits(self, *, force: bool) -> None:
        from sparza.engine.planner import describe_waits

        now = time.monotonic()
        with self._lock:
            due = {why: tasks for why, tasks in self._waits().items() if why not in self._waits_noticed
                   and (force or now - self._waiting_since.get(why, now) >= self.report_interval_s)}
            self._waits_noticed.update(due)
        for line in describe_waits(due):
            self.on_notice(line)

    def _stalled(self) -> BaseException | None:
        """Under ``--once``: the error of a job whose last two epochs read no message while some of its tasks waited
        to their end for a broadcast publication, and every other task was done. Nothing can bring that publication
        any more (the builder is given a batch to publish in at the start of every epoch); two epochs, not one, as
        an epoch cut short (a job joining the pool) may end just as a publication appears."""
        from sparza.engine.errors import broadcast_stall
        from sparza.engine.planner import describe_waits

        with self._lock:
            waits = self._waits()
            waiting = {t for tasks in waits.values() for t in tasks}
            done = all(t in waiting or self._done.get(t) in ("ended", "caught up") for t in self.tasks)
            if not self.once or not waits or self._read_in_epoch or not done:
                self._stalled_epochs = 0
                return None
            self._stalled_epochs += 1
            if self._stalled_epochs < 2:
                return None
        return broadcast_stall(self.key, describe_waits(waits))

    def epoch_ended(self, error: BaseException | None, detail: str | None = None) -> bool:
        """The epoch ended (``error``: it failed; ``detail``: what the failing container said). Returns True
        when this job leaves the pool."""
        self.flush(force=True)
        if self._error is not None:
            return self._leave()
        if error is not None and not self.stop_requested:
            if self._committed_since_failure:
                self._failed_epochs = 0
            self._committed_since_failure = False
            self._failed_epochs += 1
            if self._failed_epochs > self.max_restarts:
                self._error = JobFailedError(
                    f"the containers of {self.key} failed {self._failed_epochs} epochs in a row without a commit: "
                    f"{detail or _short(error)}; next: fix the cause (the executors' logs and the trace file named "
                    "above have the details) and start the job again (job.container.max.restarts sets how many "
                    "restarts)")
                return self._leave()
            self.on_notice(f"containers failed ({detail or _short(error)}); starting them again from the last "
                           f"commits (restart {self._failed_epochs} of {self.max_restarts})")
            return False
        if error is None:
            self._failed_epochs = 0
        whys = [self._done.get(t) for t in self.tasks]
        if self.stop_requested:
            return self._leave()
        stalled = self._stalled()
        if stalled is not None:
            self._error = stalled
            return self._leave()
        if all(w == "ended" for w in whys):
            return self._leave("all inputs ended")
        if all(w in ("ended", "drained") for w in whys):
            return self._leave("drained")
        if self.once and all(w in ("ended", "caught up") for w in whys):
            return self._leave("caught up")
        return False

    def _leave(self, why: str | None = None) -> bool:
        self.ended_because = why
        self._message = "Stopped"
        self._finished.set()
        return True

    ended_because: str | None = None
    """Why the job left the pool by itself (``all inputs ended``, ``caught up``, ``drained``), else None."""


_CAUSES = (("ExecutorLostFailure", "an executor was lost"),
           ("Python worker exited unexpectedly", "a container's Python worker died"),
           ("TaskAttemptError", None), ("StorageUnavailableError", None))


def _short(error: BaseException) -> str:
    """The cause of a failed epoch in one line: Spark's barrier-stage message says only that a task failed."""
    text = str(error)
    lines = [line.strip().lstrip(": ") for line in text.splitlines() if line.strip()]
    for marker, words in _CAUSES:
        for line in lines:
            if marker in line:
                return (words or line)[:400]
    for line in lines:
        if "Error" in line or "Exception" in line or "Failure" in line:
            return line[:400]
    return (lines[0] if lines else type(error).__name__)[:400]


class ContainerPool:
    """The epochs of one SparkSession's container-mode jobs (see the module docstring)."""

    _pools: dict[int, ContainerPool] = {}
    _pools_lock = threading.Lock()

    @classmethod
    def of(cls, spark: Any) -> ContainerPool:
        """The pool of ``spark`` (created on first use)."""
        with cls._pools_lock:
            pool = cls._pools.get(id(spark))
            if pool is None or pool.spark is not spark:
                pool = cls._pools[id(spark)] = ContainerPool(spark)
            return pool

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._lock = threading.Lock()
        self._members: dict[str, ContainerQuery] = {}
        self._thread: threading.Thread | None = None
        self._channel: ContainerChannel | None = None
        self._epoch = 0
        self._running: int | None = None  # the epoch running now
        self._last_error: str | None = None  # what a failing container of the running epoch said
        self._slots_known = False

    def join(self, member: ContainerQuery) -> None:
        """Add a job; the running epoch (if any) ends so the next one includes it."""
        with self._lock:
            if member.key in self._members and self._members[member.key].isActive:
                raise JobFailedError(f"job {member.key} already runs in this processor's containers")
            self._members[member.key] = member
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sparza-epochs", daemon=True)
                self._thread.start()
                return
        self.end_epoch()

    def send_drain(self, job: str, request: dict[str, Any] | None) -> None:
        """Tell the running epoch's containers that ``job`` drains (or no longer does)."""
        with self._lock:
            epoch, channel = self._running, self._channel
        if epoch is not None and channel is not None:
            channel.drain_job(epoch, job, request)

    def end_epoch(self) -> None:
        """Ask the running epoch's containers to finish their batches, commit and return."""
        with self._lock:
            epoch, channel = self._running, self._channel
        if epoch is not None and channel is not None:
            channel.end_epoch(epoch)

    # --- the epoch loop ------------------------------------------------------------------------
    def _dispatch(self, event: ChannelEvent) -> None:
        if event.get("epoch") != self._running:
            return  # a late report from an earlier epoch's container: its results are committed anyway
        kind = event.get("type")
        if kind == "hello":
            for move in event.get("moves", []):
                member = self._members.get(str(move.get("job")))
                if member is not None and move.get("from") is not None:  # a first placement moves no state
                    member.on_notice(_describe_move(move, set(event.get("alive", []))))
            return
        if kind == "error":
            _log.warning("container %s of epoch %s: %s", event.get("container"), event.get("epoch"),
                         event.get("error"))
            self._last_error = str(event.get("error"))
            return
        member = self._members.get(str(event.get("job")))
        if member is not None:
            member.on_event(event)

    def _run(self) -> None:
        time.sleep(0.2)  # the stages of an application join one after the other: one epoch for all of them
        _activate(self.spark)
        try:
            while True:
                with self._lock:
                    members = [m for m in self._members.values() if m.isActive]
                    if not members:
                        self._thread = None
                        return
                self._run_epoch(members)
        except BaseException as exc:  # a bug in the loop itself: fail every job rather than hang
            _log.exception("the container epoch loop failed")
            for member in list(self._members.values()):
                member.fail(exc)
                member.epoch_ended(exc)
        finally:
            with self._lock:
                channel, self._channel = self._channel, None
            if channel is not None:
                channel.close()

    def _ensure_channel(self, members: list[ContainerQuery]) -> ContainerChannel:
        if self._channel is None:
            host = next((m.channel_host for m in members if m.channel_host), None)
            ping_s = max(0.1, min(m.driver_timeout_ms for m in members) / 4000.0)
            self._channel = ContainerChannel(host or _driver_host(self.spark), self._dispatch, ping_s=ping_s)
        return self._channel

    def _run_epoch(self, members: list[ContainerQuery]) -> None:
        epoch = self._epoch = self._epoch + 1
        jobs: list[EpochJob] = []
        live: list[ContainerQuery] = []
        for member in members:
            if member.stop_requested:
                member.epoch_ended(None)
                continue
            try:
                job = member.build_epoch_job()
                job.drain = member.drain_request
                jobs.append(job)
                live.append(member)
            except Exception as exc:  # its checkpoints cannot be read: that job fails, the others go on
                member.fail(exc)
                member.epoch_ended(exc)
        if not live:
            return
        channel = self._ensure_channel(live)
        tasks = sum(len(j.tasks) for j in jobs)
        wanted = min((m.count for m in live if m.count), default=None)
        slots = self._slots()
        count = max(1, min(wanted or slots, tasks))
        if wanted and wanted > slots:
            raise ConfigError("job.container.count", str(wanted),
                              f"at most the {slots} executor slot(s) this Spark session has (all containers of an "
                              "epoch run at once)")
        plan = EpochPlan(epoch=epoch, jobs=jobs, duration_ms=min(m.epoch_ms for m in live),
                         affinity=all(m.affinity for m in live), channel=channel.address,
                         driver_timeout_ms=min(m.driver_timeout_ms for m in live))
        for member in live:
            member.epoch_started(epoch)
        with self._lock:
            self._running = epoch
            self._last_error = None
        for member, job in zip(live, jobs, strict=True):
            if member.drain_request != job.drain:  # a drain requested while this epoch was being planned
                channel.drain_job(epoch, member.key, member.drain_request)
        if any(m.stop_requested for m in live):
            channel.end_epoch(epoch)
        error: BaseException | None = None
        rows: list[Any] = []
        tag = f"sparza-epoch-{epoch}"  # names the epoch's Spark job in the UI and the event log
        self.spark.addTag(tag)
        try:
            df = self.spark.range(count, numPartitions=count)
            rows = df.mapInArrow(functools.partial(run_container, plan.to_json()), CONTAINER_SCHEMA,
                                 barrier=True).collect()
        except Exception as exc:
            error = exc
        finally:
            with contextlib.suppress(Exception):  # a session stopped under us (SIGTERM to the process group)
                self.spark.removeTag(tag)
            with self._lock:
                self._running = None
        for row in rows:  # what a container could not send over the channel
            owner = self._members.get(row["job"])
            if owner is None:
                continue
            body = json.loads(row["body"])
            if row["kind"] == "result":
                owner.on_event({"type": "result", "result": body})
            else:
                owner.on_event({"type": row["kind"], **body})   # done, waiting
        for member in live:
            member.epoch_ended(error, self._last_error if error is not None else None)

    def _slots(self) -> int:
        """How many tasks the session's executors run at once now (waits for executors before the first epoch)."""
        from sparza.runtime.driver.session import is_connect

        if is_connect(self.spark):
            return _connect_slots(self.spark)
        sc = self.spark.sparkContext
        deadline = time.monotonic() + (60.0 if not self._slots_known else 0.0)
        last, stable_since = -1, time.monotonic()
        while True:
            slots = _concurrent_tasks(sc)
            now = time.monotonic()
            if slots != last:
                last, stable_since = slots, now
            if slots > 0 and (self._slots_known or sc.master.startswith("local") or now - stable_since >= 2.0):
                break
            if now >= deadline:
                if slots > 0:
                    break
                raise JobFailedError("no executor registered with the Spark master within 60 s: containers need "
                                     "at least one executor slot; check the cluster (spark.cores.max, workers)")
            time.sleep(0.25)
        self._slots_known = True
        return slots


def _activate(spark: Any) -> None:
    """Make ``spark`` this thread's active session: Spark Connect looks a UDF's session up per thread."""
    from sparza.runtime.driver.session import is_connect

    if is_connect(spark):
        type(spark)._set_default_and_active_session(spark)


def _connect_slots(spark: Any) -> int:
    """Executor slots of a Spark Connect server, from its master (``local[N]``) or ``spark.cores.max``."""
    import os
    import re

    master = str(spark.conf.get("spark.master", "") or "")
    found = re.match(r"^local\[(\d+|\*)(?:,\d+)?\]$", master)
    if found:
        return os.cpu_count() or 1 if found.group(1) == "*" else int(found.group(1))
    if master == "local":
        return 1
    cores = spark.conf.get("spark.cores.max", None)
    if cores:
        return int(cores)
    raise ConfigError("job.container.count", None,
                      f"the number of containers to run on the Spark Connect server (master {master or 'unknown'}): "
                      "a client cannot see its executors; set it to at most the server's executor cores")


def _concurrent_tasks(sc: Any) -> int:
    jsc = sc._jsc.sc()
    try:
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:
        return int(sc.defaultParallelism)


def _driver_host(spark: Any) -> str:
    from sparza.runtime.driver.session import is_connect

    if is_connect(spark):
        return "127.0.0.1"
    return str(spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1"))


def _describe_move(move: dict[str, Any], alive: set[str]) -> str:
    source = move.get("from")
    task = move.get("task")
    where = str(move.get("to"))
    why = ("its state dir's executor is gone (executor lost, or the job was rescaled)" if source not in alive
           else "rebalanced: the containers at its state dir were full")
    return (f"task {task} moved from {source} to {where}: {why}; it restores its stores there (from the blob "
            "store unless that dir still holds them)")
