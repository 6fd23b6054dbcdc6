"""The Spark host of the container mode: containers as ordinary long-running Spark tasks, one Spark job each.

A :class:`ContainerService` belongs to one SparkSession (one processor). It holds the engine's
:class:`~sparza.engine.manager.ContainerManager` (which container runs which task), the channel the containers
report on (:mod:`sparza.runtime.channel`) and a :class:`SparkLauncher`, which starts each container as a
single-task Spark job (``spark.range(1).mapInArrow(run_container)``) from a thread of its own. Every job (an
application stage, a task.class job) that runs in container mode joins it through a :class:`ContainerQuery`,
which stands for that job's streaming query towards :class:`~sparza.runtime.driver.runner.JobRunner` (the part of
``StreamingQuery``'s interface the runner uses).

Why one Spark job per container, not one barrier stage for all: a barrier stage fails and restarts as a whole, so
losing one executor stopped every container of every job, and it must be ended to take in a new executor, so
every hand-over stopped them all. A container that is its own Spark job fails alone: its tasks get new
containers at once (the manager hears the lost connection), the others never stop, and a new executor gets a new
container while the old ones keep running (only the tasks that move onto it pause). ``docs/runtime.md`` has the
measurements of both shapes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sparza.config import BOOL, STR, Choice, Int, define_key
from sparza.engine.container import MAX_RESTARTS
from sparza.engine.errors import FENCED_OFF, JobFailedError, tasks_failed
from sparza.engine.manager import ContainerManager
from sparza.engine.messages import AddJob, Event, TaskDone, TaskLost, TaskResult, TaskRetrying, TaskWaiting
from sparza.engine.partitions import REGROUP_REASON
from sparza.engine.results import BatchResult, BatchStatus
from sparza.errors import ConfigError
from sparza.runtime.channel import ChannelServer
from sparza.runtime.container.sparktask import CONTAINER_SCHEMA, run_container

__all__ = [
    "CHANNEL_HOST",
    "CONTAINER_COUNT",
    "DRIVER_TIMEOUT_MS",
    "EPOCH_MS",
    "EXECUTION_MODE",
    "EXECUTION_MODES",
    "HOST_AFFINITY",
    "LAUNCH",
    "MAX_RESTARTS",
    "ContainerQuery",
    "ContainerService",
    "SparkLauncher",
    "SparkStageLauncher",
    "check_container_session",
    "execution_mode",
    "wait_for_containers",
]

_log = logging.getLogger(__name__)

_PKG = "runtime"
EXECUTION_MODES = ("containers", "batches")
EXECUTION_MODE = define_key("job.execution.mode", "containers",
                            "containers: each Spark task is a long-running container that hosts tasks, keeps them "
                            "where their state is and processes messages as they arrive; batches: one Spark "
                            "micro-batch per batch (every task moves with Spark's placement).", _PKG,
                            kind=Choice(*EXECUTION_MODES))
EPOCH_MS = define_key("job.container.epoch.ms", None,
                      "No longer used: containers run until the job stops, and tasks move one by one (a new "
                      "executor, a lost one); kept so old configs still load.", _PKG, kind=Int(min_value=1))
CONTAINER_COUNT = define_key("job.container.count", None,
                             "Container mode: how many containers (Spark tasks) run the processor's tasks; default (or "
                             "0) one per executor slot, at most one per task.", _PKG, kind=Int(min_value=0))
HOST_AFFINITY = define_key("job.host-affinity.enabled", True,
                           "Container mode: keep each task on the executor whose state dir holds its state (Samza's "
                           "key); false spreads tasks evenly.", _PKG, kind=BOOL)
DRIVER_TIMEOUT_MS = define_key("job.container.driver.timeout.ms", None,
                               "Container mode: a container whose driver has been silent this long stops at the next "
                               "batch boundary (a frozen or cut-off processor stops doing work); default: half of "
                               "job.coordinator.standalone.claim.timeout.ms, at most 10 s.", _PKG,
                               kind=Int(min_value=100))
LAUNCH = define_key("job.container.launch", "jobs",
                    "Container mode: how containers become Spark tasks: jobs (one single-task Spark job each: a lost "
                    "one is replaced alone, new executors get new containers) or stage (one Spark stage of all of "
                    "them, Spark retrying a lost one; the shape measured beside jobs in docs/runtime.md).", _PKG,
                    kind=Choice("jobs", "stage"))
CHANNEL_HOST = define_key("job.container.channel.host", None,
                          "Container mode: the address executors reach the driver's container channel at (default "
                          "spark.driver.host).", _PKG, kind=STR)


def execution_mode(config: Any) -> str:
    """``containers`` or ``batches`` (``job.execution.mode``)."""
    return EXECUTION_MODE.get(config)


def check_container_session(spark: Any) -> None:
    """Refuse a session the container mode cannot run on, naming the setting: one whose executors come and go with
    the load (dynamic allocation), since the containers are sized to the executor slots there are and hold them."""
    value = str(spark.conf.get("spark.dynamicAllocation.enabled", "false") or "false").strip().lower()
    if value == "true":
        raise ConfigError("job.execution.mode", "containers", "", message=(
            "job.execution.mode is containers, but the Spark session has spark.dynamicAllocation.enabled: true: the "
            "containers are sized to the executor slots the session has and keep them for as long as the job runs, "
            "so executors would neither be released nor asked for. Set job.execution.mode: batches (one "
            "micro-batch per batch, any executors), or turn dynamic allocation off and size the executors for the "
            "job"))


class SparkLauncher:
    """Starts each container as a single-task Spark job from a thread of its own (see the module docstring)."""

    def __init__(self, spark: Any, address: Callable[[], tuple[str, int, str]], driver_timeout_ms: Callable[[], int],
                 on_lost: Callable[[int, str], None]) -> None:
        self.spark = spark
        self._address = address
        self._driver_timeout_ms = driver_timeout_ms
        self._on_lost = on_lost
        self._threads: dict[int, threading.Thread] = {}
        self._slots_known = False
        self._closed = False

    def slots(self) -> int:
        """How many tasks the session's executors run at once now (waits up to 60 s for the first executor). Once
        executors were seen, 0 is an answer (every executor lost, none back yet): the manager keeps one container
        asked for, which Spark starts when an executor registers, and the stall watchdog names the tasks no
        container runs meanwhile (``job.stall.timeout.ms``)."""
        from sparza.runtime.driver.session import is_connect

        if is_connect(self.spark):
            return _connect_slots(self.spark)
        sc = self.spark.sparkContext
        if self._slots_known:
            return _concurrent_tasks(sc)
        deadline = time.monotonic() + 60.0
        last, stable_since = -1, time.monotonic()
        while True:
            slots = _concurrent_tasks(sc)
            now = time.monotonic()
            if slots != last:
                last, stable_since = slots, now
            if slots > 0 and (sc.master.startswith("local") or now - stable_since >= 2.0):
                break
            if now >= deadline:
                if slots > 0:
                    break
                raise JobFailedError("no executor registered with the Spark master within 60 s: containers need "
                                     "at least one executor slot; check the cluster (spark.cores.max, workers)")
            time.sleep(0.25)
        self._slots_known = True
        return slots

    def launch(self, index: int) -> None:
        """Start container ``index``'s Spark job (its thread reports the container lost when the job ends)."""
        thread = threading.Thread(target=self._run, args=(index,), name=f"sparza-container-{index}", daemon=True)
        self._threads[index] = thread
        thread.start()

    def _run(self, index: int) -> None:
        from sparza.runtime.driver.session import is_connect

        reason = "its Spark task ended"
        tag = f"sparza-container-{index}"  # names the container's Spark job in the UI and the event log
        try:
            _activate(self.spark)
            if is_connect(self.spark):
                self.spark.addTag(tag)
            else:
                self.spark.sparkContext.setJobGroup(tag, f"sparza container {index}", interruptOnCancel=False)
            df = self.spark.range(1, numPartitions=1)
            fn = functools.partial(run_container, self._address(), index, self._driver_timeout_ms())
            df.mapInArrow(fn, CONTAINER_SCHEMA).collect()
        except Exception as exc:
            reason = f"its Spark task failed: {_short(exc)}"
        finally:
            if is_connect(self.spark):
                with contextlib.suppress(Exception):
                    self.spark.removeTag(tag)
            self._threads.pop(index, None)
            self._on_lost(index, reason)

    def close(self) -> None:
        """Cancel the container jobs still running (after the manager asked them to stop and waited)."""
        from sparza.runtime.driver.session import is_connect

        self._closed = True
        deadline = time.monotonic() + 30.0
        for thread in list(self._threads.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
        for index in list(self._threads):
            with contextlib.suppress(Exception):
                if is_connect(self.spark):
                    self.spark.interruptTag(f"sparza-container-{index}")
                else:
                    self.spark.sparkContext.cancelJobGroup(f"sparza-container-{index}")


class SparkStageLauncher(SparkLauncher):
    """Starts the containers asked for together as one Spark stage (one task each); Spark retries a lost one, which
    the manager takes in as a new container (see :func:`~sparza.runtime.container.sparktask.run_container_of_stage`).
    Containers asked for later (a replacement, a new executor's) start as a stage of their own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: list[int] = []
        self._lock = threading.Lock()

    def launch(self, index: int) -> None:
        """Queue container ``index``; the containers queued within 0.2 s start as one stage."""
        with self._lock:
            first = not self._pending
            self._pending.append(index)
        if first:
            threading.Timer(0.2, self._start_stage).start()

    def _start_stage(self) -> None:
        with self._lock:
            indexes, self._pending = self._pending, []
        name = f"stage-{indexes[0]}"
        thread = threading.Thread(target=self._run_stage, args=(indexes,), name=f"sparza-containers-{name}",
                                  daemon=True)
        for index in indexes:
            self._threads[index] = thread
        thread.start()

    def _run_stage(self, indexes: list[int]) -> None:
        from sparza.runtime.container.sparktask import run_container_of_stage

        reason = "its Spark stage ended"
        try:
            _activate(self.spark)
            self.spark.sparkContext.setJobGroup(f"sparza-container-{indexes[0]}", "sparza containers",
                                                interruptOnCancel=False)
            df = self.spark.range(len(indexes), numPartitions=len(indexes))
            fn = functools.partial(run_container_of_stage, self._address(), indexes, self._driver_timeout_ms())
            df.mapInArrow(fn, CONTAINER_SCHEMA).collect()
        except Exception as exc:
            reason = f"its Spark stage failed: {_short(exc)}"
        finally:
            for index in indexes:
                self._threads.pop(index, None)
                self._on_lost(index, reason)


class ContainerService:
    """The container mode of one SparkSession: manager, channel and launcher (see the module docstring)."""

    _services: dict[int, ContainerService] = {}
    _lock = threading.Lock()

    @classmethod
    def of(cls, spark: Any, *, channel_host: str | None = None, launch: str = "jobs") -> ContainerService:
        """The service of ``spark`` (created on first use; a new one once the old one finished)."""
        with cls._lock:
            service = cls._services.get(id(spark))
            if service is None or service.spark is not spark or service.finished():
                service = cls._services[id(spark)] = ContainerService(spark, channel_host, launch)
            return service

    def __init__(self, spark: Any, channel_host: str | None, launch: str = "jobs") -> None:
        self.spark = spark
        self.driver_timeout_ms = 10_000
        self.channel: ChannelServer | None = None
        self._channel_host = channel_host
        shape = SparkStageLauncher if launch == "stage" else SparkLauncher
        self.launcher = shape(spark, self._address, lambda: self.driver_timeout_ms, self._lost)
        self.manager = ContainerManager(self.launcher, adopt=launch == "stage")
        self.live: Any = None
        """The processor's live store query endpoint (:mod:`sparza.runtime.driver.livequery`), once a job asked."""

    def live_queries(self, host: str, port: int) -> Any:
        """The live query endpoint of this processor (started on first use, on ``host``:``port``)."""
        from sparza.runtime.driver.livequery import LiveQueryServer

        with ContainerService._lock:
            if self.live is None:
                self.live = LiveQueryServer(self.manager, host, port)
            return self.live

    def _address(self) -> tuple[str, int, str]:
        if self.channel is None:
            self.channel = ChannelServer(self._channel_host or _driver_host(self.spark), self.manager.connected,
                                         self.manager.event, self.manager.lost)
        return self.channel.address

    def _lost(self, index: int, reason: str) -> None:
        self.manager.lost(index, reason)

    def finished(self) -> bool:
        """True once the manager has no job and no container left (its thread ended)."""
        thread = self.manager._thread
        return thread is not None and not thread.is_alive()

    def join(self, member: ContainerQuery) -> None:
        """Run ``member``'s tasks in this session's containers."""
        self.driver_timeout_ms = min(self.driver_timeout_ms, member.driver_timeout_ms)
        self._address()  # the channel exists before the first container starts
        self.manager.join(member)
        self.manager.start()


def wait_for_containers(spark: Any, timeout_s: float = 60.0) -> None:
    """Wait until the containers of ``spark`` ended (after its last job left): before the session stops, so no
    container's Spark task is cut off mid-commit."""
    service = ContainerService._services.get(id(spark))
    thread = service.manager._thread if service is not None and service.spark is spark else None
    if service is not None and thread is not None:
        service.manager.close()
        thread.join(timeout_s)


class ContainerQuery:
    """One job in the container mode, seen by :class:`~sparza.runtime.driver.runner.JobRunner` as its streaming query
    (and by the engine's manager as a :class:`~sparza.engine.manager.JobMember`).

    ``build_add_job()`` gives what every container hears of the job; ``locations()`` where each task last committed;
    ``on_results(results, containers)`` receives committed results (at most about once a second, and when the job
    leaves); ``on_notice(line)`` gets what the status line should say (tasks that moved, containers lost).
    """

    def __init__(self, service: ContainerService, key: str, tasks: list[str], build_add_job: Callable[[], AddJob],
                 locations: Callable[[], Mapping[str, str]], on_results: Callable[[list[BatchResult], int], None],
                 on_notice: Callable[[str], None], *, once: bool, affinity: bool, count: int | None,
                 max_restarts: int, driver_timeout_ms: int = 10_000, report_interval_s: float = 1.0,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.service = service
        self.stopping = stopping
        """The runner is stopping (a signal came) even before it called :meth:`request_stop`."""
        self.key = key
        self.tasks = list(tasks)
        self.build_add_job = build_add_job
        self._locations = locations
        self.on_results = on_results
        self.on_notice = on_notice
        self.once = once
        self.affinity = affinity
        self.count = count
        self.max_restarts = max_restarts
        self.driver_timeout_ms = driver_timeout_ms
        self.report_interval_s = report_interval_s
        self.name = key
        self._lock = threading.Lock()
        self._pending: list[BatchResult] = []
        self._last_report = time.monotonic()
        self._done: dict[str, str] = {}
        self._finished = threading.Event()
        self._stop_requested = False
        self._error: BaseException | None = None
        self._lost = 0  # containers lost without a commit of this job since
        self._committed_since_loss = False
        self._message = "Waiting for containers"  # not "Initializing sources": a runner waits on that
        self._waiting: dict[str, str] = {}
        self._waiting_since: dict[str, float] = {}
        self._waits_noticed: set[str] = set()
        self._last_progress = time.monotonic()
        self.drain_request: dict[str, Any] | None = None
        """The job's drain request as JSON (:meth:`sparza.engine.drain.DrainRequest.to_json`), or None."""
        self.ended_because: str | None = None
        """Why the job left by itself (``all inputs ended``, ``caught up``, ``drained``), else None."""

    # --- StreamingQuery-like interface ---------------------------------------------------------
    def start(self) -> ContainerQuery:
        """Join the session's containers."""
        self.service.join(self)
        return self

    @property
    def isActive(self) -> bool:
        """True until the job left."""
        return not self._finished.is_set()

    @property
    def status(self) -> dict[str, Any]:
        """``{"message", "isTriggerActive"}`` as StreamingQuery.status."""
        return {"message": self._message, "isTriggerActive": False, "isDataAvailable": False}

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Wait for the job to leave (up to ``timeout`` s); raises its failure as StreamingQuery does."""
        finished = self._finished.wait(timeout)
        self.flush(force=False)
        self._check_stalled()
        if self._error is not None and finished:
            raise self._error
        return finished

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop the job (each task finishes its batch and commits) and wait until it left, at most ``timeout_s``: a
        task stuck in a call that does not return must not hold the run for ever (what it did not commit runs again
        at the next start)."""
        self.request_stop()
        if not self._finished.wait(timeout_s):
            stuck = sorted(t for t in self.tasks if self._done.get(t) is None)
            if self._error is None:
                self._error = JobFailedError(
                    f"the containers of {self.key} did not stop within {timeout_s:.0f} s of being asked: task(s) "
                    f"{', '.join(stuck[:6])}{' and more' if len(stuck) > 6 else ''} did not finish their batch; what "
                    "they did not commit runs again at the next start")
            self._message = "Stopped"
            self._finished.set()
        self.flush(force=True)

    def exception(self) -> BaseException | None:
        """The failure that ended the job, or None."""
        return self._error

    def unplaced(self) -> list[str]:
        """The job's tasks no container runs now (moving, waiting for a container to start), done ones left out:
        what the stall watchdog names."""
        owners = self.service.manager.owners(self.key)
        with self._lock:
            done = dict(self._done)
        return sorted(t for t, owner in owners.items() if owner is None and done.get(t) is None)

    def finished_tasks(self) -> set[str]:
        """The tasks done with this run (ended, caught up, drained, failed): input waiting for them is no stall."""
        with self._lock:
            return {t for t, why in self._done.items() if why not in (None, "stopped")}

    # --- the runner's side ---------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask for the end of this job (its tasks stop at a batch boundary)."""
        with self._lock:
            if self._stop_requested:
                return
            self._stop_requested = True
        self.service.manager.leave(self.key)

    def drain(self, request: dict[str, Any] | None) -> None:
        """The job drains (``request``), or no longer does (None): its containers hear it."""
        self.drain_request = request
        self.service.manager.drain(self.key, request)

    @property
    def stop_requested(self) -> bool:
        """True once :meth:`request_stop` was called, or the runner is stopping."""
        return self._stop_requested or self.stopping()

    def fail(self, error: BaseException) -> None:
        """The job failed: remember why and stop it."""
        if self._error is None:
            self._error = error
        self.request_stop()

    # --- the manager's side (JobMember) --------------------------------------------------------
    def add_job(self) -> AddJob:
        """What every container hears of the job."""
        add = self.build_add_job()
        add.drain = self.drain_request
        self._message = "Processing new data"
        return add

    def last_locations(self) -> Mapping[str, str]:
        """Task → where it last committed."""
        return self._locations()

    def on_event(self, event: Event) -> None:
        """A container's report about one of this job's tasks."""
        if isinstance(event, TaskResult):
            self._add_result(event.result)
        elif isinstance(event, TaskDone):
            with self._lock:
                self._done[event.task] = event.why
            self._maybe_leave()
        elif isinstance(event, TaskWaiting):
            with self._lock:
                self._waiting[event.task] = event.why
                self._waiting_since.setdefault(event.why, time.monotonic())
        elif isinstance(event, TaskRetrying):
            limit = self.max_restarts
            self.on_notice(f"task {event.task} failed ({event.error}); it alone starts again from its last commit in "
                           f"{event.delay_ms / 1000.0:.1f} s (attempt {event.attempt} of {limit}); the other tasks "
                           "go on")
        elif isinstance(event, TaskLost):  # only a fenced-off checkpoint write loses a task
            self.fail(tasks_failed([f"{FENCED_OFF} task '{event.task}': {event.error}"]))

    def container_lost(self, reason: str) -> bool:
        """A container that ran some of this job's tasks was lost: they move; False once restarts are exhausted."""
        if self.stop_requested:
            return True
        if self._committed_since_loss:
            self._lost = 0
        self._committed_since_loss = False
        self._lost += 1
        if self._lost > self.max_restarts:
            self.fail(JobFailedError(
                f"{self._lost} containers of {self.key} were lost in a row without a commit: {reason}; next: fix the "
                "cause (the executors' logs have the details) and start the job again (job.container.max.restarts "
                "sets how many)"))
            return False
        self.on_notice(f"{reason} (restart {self._lost} of {self.max_restarts})")
        return True

    def manager_failed(self, error: BaseException) -> None:
        """The manager itself failed: the job ends with ``error`` (the run exits non-zero), not as caught up."""
        self.fail(error)

    def left(self) -> None:
        """Every task was released: the job is over in this processor."""
        self.flush(force=True)
        if self.ended_because is None and self._error is None:
            whys = [self._done.get(t) for t in self.tasks]
            if _regrouping(whys):
                self.ended_because = REGROUP_REASON
            elif whys and all(w == "ended" for w in whys):
                self.ended_because = "all inputs ended"
            elif whys and all(w in ("ended", "drained") for w in whys):
                self.ended_because = "drained"
            elif self.once and whys and all(w in ("ended", "caught up") for w in whys):
                self.ended_because = "caught up"
        self._message = "Stopped"
        self._finished.set()

    # --- inside ----------------------------------------------------------------------------------
    def _add_result(self, result: BatchResult) -> None:
        with self._lock:
            self._pending.append(result)
            self._waiting.pop(result.task, None)  # it ran a batch: it waits no more
            if result.status is BatchStatus.COMMITTED:
                self._committed_since_loss = True
                if result.messages:
                    self._last_progress = time.monotonic()
        if result.status is BatchStatus.FAILED:
            self.flush(force=True)
            self.fail(tasks_failed([result.error or f"task '{result.task}' failed"]))
            return
        if result.shutdown:
            self.request_stop()
        self.flush(force=False)

    def _maybe_leave(self) -> None:
        """Every task is done (ended, drained, caught up under --once): the job leaves by itself."""
        with self._lock:
            whys = [self._done.get(t) for t in self.tasks]
        if not whys or any(w is None for w in whys):
            return
        if _regrouping(whys):
            self.ended_because = REGROUP_REASON
        elif all(w == "ended" for w in whys):
            self.ended_because = "all inputs ended"
        elif all(w in ("ended", "drained") for w in whys):
            self.ended_because = "drained"
        elif self.once and all(w in ("ended", "caught up") for w in whys):
            self.ended_because = "caught up"
        else:
            return
        self.request_stop()

    def flush(self, *, force: bool) -> None:
        """Hand the results gathered so far to the runner (at most once per report interval unless forced), and say
        what tasks wait for once they have for a report interval."""
        self._notice_waits(force=force)
        with self._lock:
            if not self._pending or (not force and time.monotonic() - self._last_report < self.report_interval_s):
                return
            results, self._pending = self._pending, []
        try:
            self.on_results(results, len(self.service.manager.containers))
        finally:
            # The interval counts from the end of a report: results that arrive while one is written (its status
            # line, metrics, lag) wait for the next, so one report takes all of them. Counted from its start, a
            # report slower than the interval was followed by one per result (1,024 tasks: one a second in all).
            with self._lock:
                self._last_report = time.monotonic()

    def _waits(self) -> dict[str, list[str]]:
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

    def _check_stalled(self) -> None:
        """Under ``--once``: a job whose remaining tasks all wait for a broadcast publication, with no message
        committed for a while (10 s, or 4 commit intervals), fails naming the store and its builder: nothing can
        bring that publication any more (its builder was given a batch to publish in)."""
        from sparza.engine.errors import broadcast_stall
        from sparza.engine.planner import describe_waits

        if not self.once or self._error is not None or self.stop_requested:
            return
        with self._lock:
            waits = self._waits()
            waiting = {t for tasks in waits.values() for t in tasks}
            rest = [t for t in self.tasks if t not in waiting and self._done.get(t) not in ("ended", "caught up")]
            quiet = time.monotonic() - self._last_progress
        if waits and not rest and quiet >= 10.0:
            self.fail(broadcast_stall(self.key, describe_waits(waits)))


def _regrouping(whys: list[str | None]) -> bool:
    """True when every task is done and some stopped to regroup for grown input partitions (the others ended or
    drained): the job leaves so that its runner starts it again, grouped for the new counts."""
    return bool(whys) and "regroup" in whys and all(w in ("regroup", "ended", "drained", "caught up") for w in whys)


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


_CAUSES = (("ExecutorLostFailure", "an executor was lost"),
           ("Python worker exited unexpectedly", "a container's Python worker died"),
           ("TaskAttemptError", None), ("StorageUnavailableError", None))


def _short(error: BaseException) -> str:
    """The cause of a failed container job in one line: Spark's message says only that a task failed."""
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
