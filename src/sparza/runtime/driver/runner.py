"""The driver of one processor: a SparkSession, one streaming query per job (or stage), the batch loop.

The query's source is :class:`~sparza.runtime.driver.source.SparzaDataSource`, whose ``read`` runs each
task of the batch on an executor (see :mod:`sparza.engine.executor`); its sink is ``foreachBatch``,
which collects the one result row per task, merges their metrics and prints a status line. A failed
task row stops the job with its message (SSP, offset, cause).

Stopping (SIGINT/SIGTERM, see :mod:`sparza.interrupts`; every input ended; a task's
``coordinator.shutdown()``) is clean: a stop
file tells the source to plan no further batch, the runner waits for the running batch to commit,
then stops the query. ``--once`` uses Spark's AvailableNow trigger: what exists at start is
processed in capped batches, then the query ends by itself. A drain (``--drain``, ``sparza drain``; see
:mod:`sparza.engine.drain`) stops the job once every task drained, with reason ``drained``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparza.azure.requests import TOTAL as STORAGE_TOTAL
from sparza.config import Config, Int, define_key
from sparza.engine.errors import JobFailedError, JobStalledError, tasks_failed
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig, offset_default
from sparza.engine.model import TaskModel
from sparza.engine.offsets import LagCounts
from sparza.engine.results import BatchResult, BatchStatus, result_from_row
from sparza.errors import SparzaError
from sparza.interrupts import StopOnSignals
from sparza.metrics import JsonLinesReporter, MetricsRegistry, attach_prometheus
from sparza.runtime.driver.preflight import check_executor_imports
from sparza.runtime.driver.report import (
    BootstrapProgress,
    Discards,
    RunNotices,
    RunOutcome,
    describe_storage_requests,
    short_error,
)
from sparza.runtime.driver.retention import CommittedMessages
from sparza.runtime.driver.session import add_py_files, build_spark_session, is_connect, py_files

__all__ = ["JobRunner", "build_spark_session"]

_log = logging.getLogger(__name__)

STALL_TIMEOUT_MS = define_key("job.stall.timeout.ms", 300_000,
                              "A task whose input has messages waiting while its committed offsets did not move for "
                              "this long has stalled (whatever the other tasks do): the status line names it at half "
                              "of it (gauges job/stalled-tasks and <task>:task/stalled-s), and at all of it the run "
                              "ends (exit 1) naming the stalled tasks, their waiting partitions and whether a "
                              "container runs them; 0 turns the watchdog off.", "runtime",
                              kind=Int(min_value=0))

class JobRunner:
    """Runs one job's tasks (all of them, or those the coordinator assigns) as one streaming query."""

    def __init__(self, config: Config, *, spark: Any = None, master: str | None = None, remote: str | None = None,
                 processor_id: str = "0", once: bool = False, tasks: list[str] | None = None,
                 generation: int = 0, status: Callable[[str], None] | None = None,
                 install_signal_handlers: bool = True, claim: bool | None = None,
                 metrics: MetricsRegistry | None = None, drain: bool = False) -> None:
        self.job = JobConfig.from_config(config)
        self.config = self.job.config  # in sparza's spelling (Samza class names and aliases translated)
        self.master = master
        self.remote = remote
        self.processor_id = processor_id
        self.once = once
        self.drain_at_start = drain
        """``--drain``: request a drain when the run starts (unless one is pending), and stop once drained."""
        self.task_filter = tasks
        self.generation = generation
        self._dir_generation = generation  # a coordinator's generation names the Spark dir; a claim epoch does not
        # Standalone (all tasks in this processor): hold the job's claim while running (see JobClaim).
        self.claims_job = (claim if claim is not None
                           else self.job.coordinator_factory == "standalone" and tasks is None)
        self._claim: Any = None
        self._claim_lost: BaseException | None = None
        self._started = False
        self._started_at = time.monotonic()
        self._counted_at_start = (0, 0)  # storage requests and task-commits in the registry when the run started
        self.status = status or (lambda line: print(line, file=sys.stderr, flush=True))
        self.install_signal_handlers = install_signal_handlers
        self._spark = spark
        self._owns_spark = spark is None
        self._shipped: dict[str, str] = dict(self.config.items())  # what Spark sees: no secrets once started
        self._secrets: Any = None
        # A coordinated processor passes its own registry (its coordinator's metrics, kept across models).
        self.metrics = metrics if metrics is not None else MetricsRegistry()
        self._stop = threading.Event()
        self._stop_reason = ""
        self._in_batch = threading.Lock()
        self._failure: BaseException | None = None
        self._batches = 0
        self._query: Any = None
        self._detach_prometheus: Callable[[], None] | None = None
        self._jsonl: JsonLinesReporter | None = None
        self._adjunct_stores: dict[str, Any] = {}
        self._watch: Any = None  # StorageWatch while running
        self._inputs: InputSystems | None = None
        self._committed_messages: CommittedMessages | None = None
        self._delete_errors_said: set[str] = set()
        self.last_results: list[BatchResult] = []
        self._task_offsets: dict[str, dict[str, str]] = {}
        self._lags = LagCounts()  # each task's lag per SSP, counted from what moved since the last report
        self._ssps: dict[str, Any] = {}  # SSP name -> SystemStreamPartition (parsed once)
        self._last_commit = time.monotonic()  # when a task last committed a batch (the stall watchdog's clock)
        self._live: Any = None  # the live query endpoint this job is served on
        self._last_stall_check = 0.0
        self._stall_warned: set[str] = set()  # the stalled tasks a warning named
        self._stuck_since: dict[str, tuple[float, Any]] = {}  # task -> (since when it waits, its offsets then)
        self._stall_gauged: set[str] = set()
        self._first_upcoming: dict[Any, str] = {}  # SSP -> its upcoming offset when the watchdog first looked
        self._checkpoint_offsets: dict[str, dict[str, str]] = {}  # the watchdog's read of the task checkpoints
        self._checkpoints_read_for: set[str] = set()  # the tasks that read was for
        self._restart_query: Callable[[], Any] | None = None  # micro-batch mode: start the query again
        self._query_restarts = 0
        self._batches_at_restart = 0  # task -> its newest reported offsets (for lag)
        self.discards = Discards()
        """Messages this run did not deliver or write as sent (late at windows, undeserializable, ignored)."""
        self.notices = RunNotices()
        """Replays skipped, restores from the blob store, fenced producers: in the status line and the summary."""
        self._drain_monitor: Any = None
        self.drain: Any = None
        """The drain request this run works under (a :class:`~sparza.engine.drain.DrainRequest`), or None."""

    # --- setup ---------------------------------------------------------------------------------
    @property
    def spark_checkpoint_dir(self) -> str:
        """Spark's checkpoint dir of this processor's query (per generation when coordinated)."""
        base = self.job.spark_checkpoint_dir(self.processor_id)
        return base if self._dir_generation == 0 else f"{base}/g{self._dir_generation}"

    def _stop_file(self) -> Path:
        return Path(self.spark_checkpoint_dir + ".stop")

    def request_stop(self, reason: str) -> None:
        """Finish the running batch, commit, and stop (thread- and signal-safe)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            with contextlib.suppress(OSError):
                self._stop_file().parent.mkdir(parents=True, exist_ok=True)
                self._stop_file().write_text(reason)
            self._stop.set()

    # --- the job claim (standalone) ------------------------------------------------------------
    def acquire_claim(self) -> None:
        """Standalone: take the job's claim (or raise ClaimHeldError naming its holder), fence older holders.

        The claim's epoch becomes the generation of every task-checkpoint write of this run, and each
        task's stored generation is raised to it first, so a previous holder that is still alive
        somewhere has its intent and checkpoint writes refused. Does nothing when already held or
        when this runner does not claim (a coordinator assigns its tasks).
        """
        if not self.claims_job or self._claim is not None:
            return
        from sparza.coordination.jobclaim import CLAIM_RENEW_INTERVAL_MS, CLAIM_TIMEOUT_MS, JobClaim
        from sparza.engine.checkpoint import SupportsJobClaim, checkpoint_store_from_config, stamp_generation

        store = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics)
        if not isinstance(store, SupportsJobClaim):
            raise JobFailedError(f"the checkpoint store {store.describe()} cannot keep a job claim")

        def floor() -> int:
            return max((cp.generation for cp in store.read_all().values()), default=0)

        claim = JobClaim(store.claim_backend(), self.job.job_key, self.processor_id,
                         timeout_ms=CLAIM_TIMEOUT_MS.get(self.config),
                         renew_interval_ms=CLAIM_RENEW_INTERVAL_MS.get(self.config), epoch_floor=floor)
        epoch = claim.acquire()
        self._claim = claim
        try:
            # The run's own InputSystems: the first to settle the partition record sees (and says) what changed.
            self._inputs = self._inputs or InputSystems(self.job, metrics=self.metrics)
            stamp_generation(store, [t.name for t in self._inputs.task_models()], epoch)
        except BaseException:
            self._release_claim()
            raise
        self.generation = epoch
        claim.start_renewing(self._on_claim_lost)

    def _on_claim_lost(self, error: BaseException) -> None:
        self._claim_lost = error
        self.request_stop("lost the job claim")

    def _check_claim(self) -> None:
        """Renew now (outside the schedule): records the loss when another processor took the claim."""
        from sparza.coordination.jobclaim import ClaimLostError

        claim = self._claim
        if claim is None or self._claim_lost is not None:
            return
        try:
            claim.renew()
        except ClaimLostError as exc:
            self._claim_lost = exc
        except Exception:  # storage trouble: the renewal thread keeps judging
            pass

    def _release_claim(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()

    def _tasks(self, inputs: InputSystems) -> list[TaskModel]:
        tasks = inputs.task_models()
        if self.task_filter is not None:
            wanted = set(self.task_filter)
            tasks = [t for t in tasks if t.name in wanted]
        return tasks

    # --- the batch -----------------------------------------------------------------------------
    def _on_batch(self, df: Any, batch_id: int) -> None:
        watch = self._watch
        if watch is not None:
            watch.batch_started(int(batch_id))
        try:
            self._run_batch(df, batch_id)
        finally:
            if watch is not None:
                watch.batch_ended()

    def _run_batch(self, df: Any, batch_id: int) -> None:
        with self._in_batch:
            if self._claim_lost is not None:  # its writes would be refused anyway: run nothing more
                self._failure = self._claim_lost
                raise self._failure
            started = time.perf_counter()
            rows = df.collect()  # the source's read ran each task (sparza.runtime.driver.source): one row per task
            results = [result_from_row(r) for r in rows]
            self.last_results = results
            failed = [r for r in results if r.status is BatchStatus.FAILED]
            if failed:
                self._check_claim()  # a fenced write usually means the claim is gone: say that, not the symptom
                self._failure = self._claim_lost or tasks_failed([r.error for r in failed])
                self.request_stop("failed")
                raise self._failure
            elapsed = (time.perf_counter() - started) * 1000.0
            self._record(results, elapsed, int(batch_id))
            self._batches += 1
            if results and all(r.ended for r in results):
                self.request_stop("all inputs ended")
            elif results and all(r.drained for r in results):
                self.request_stop("drained")
            if any(r.shutdown for r in results):
                self.request_stop("a task asked to shut down")

    def _on_container_results(self, results: list[BatchResult], containers: int) -> None:
        """Results the containers committed since the last report (container mode): status line and metrics."""
        if self._watch is not None and any(r.status is BatchStatus.COMMITTED for r in results):
            self._watch.progress()
        with self._in_batch:
            failed = [r for r in results if r.status is BatchStatus.FAILED]
            done = [r for r in results if r.status is not BatchStatus.FAILED]
            if done:
                tasks = len({r.task for r in done})
                committed = sum(1 for r in done if r.status is BatchStatus.COMMITTED)
                messages = sum(r.messages for r in done)
                elapsed = max((r.process_ms + r.commit_ms for r in done), default=0.0)
                batch = max(r.batch for r in done)
                self._record(done, elapsed, batch, batches=committed,
                             label=f"batch {batch} ({containers} container(s): {committed} task batch(es) of {tasks} "
                                   f"task(s)): {messages} msgs in")
                self._batches += committed
            if failed and self._failure is None:
                self._check_claim()
                self._failure = self._claim_lost or tasks_failed([r.error for r in failed])
                self.request_stop("failed")
            if any(r.shutdown for r in results):
                self.request_stop("a task asked to shut down")

    def _record(self, results: list[BatchResult], elapsed_ms: float, batch_id: int, *,
                label: str | None = None, batches: int = 1) -> None:
        agg = "aggregate"
        messages = sum(r.messages for r in results)
        for r in results:
            self.metrics.merge_changes(r.metrics, f"{r.task}:")
            self.metrics.merge_changes(r.system_metrics)  # the workers' producers, consumers and backups
        discards = Discards.of(results)
        self.discards.add(discards)
        notices = RunNotices.of(results)
        self.notices.add(notices)
        counts = {  # the job's aggregate counters, by name
            "messages-in": messages,
            "messages-processed": sum(r.processed for r in results),
            "messages-dropped": discards.undeserializable,
            "exceptions-ignored": discards.ignored,
            "messages-dead-lettered": discards.dead_lettered,
            "late-messages": discards.late,
            "late-messages-routed": discards.late_routed,
            "batches": batches,
            "task-commits": sum(1 for r in results if r.status is BatchStatus.COMMITTED),
            "tasks-skipped": notices.tasks_skipped,
            "flushes-skipped": notices.flushes_skipped,
            "stores-restored-from-blob-store": notices.restores,
            "producers-fenced": notices.fenced,
            "batches-written-elsewhere": notices.written_elsewhere,
        }
        for name, count in counts.items():
            self.metrics.counter(agg, name).inc(count)
        self.metrics.timer(agg, "batch-ms").update(elapsed_ms)
        commit_ms = max((r.commit_ms for r in results), default=0.0)
        self.metrics.timer(agg, "commit-ms").update(commit_ms)
        if any(r.status is BatchStatus.COMMITTED for r in results):
            self._last_commit = time.monotonic()
        lag = self._lag(results)
        self.metrics.gauge(agg, "lag").set(-1 if lag is None else lag)
        self.metrics.gauge("job", "generation").set(self.generation)
        batch = max((r.batch for r in results), default=0)
        bootstrap = self._bootstrap.update(results)
        if bootstrap is not None:
            self.metrics.gauge(agg, "bootstrap-remaining").set(bootstrap[1] - bootstrap[0])
        head = label or f"batch {batch} (spark {batch_id}): {messages} msgs in"
        self.status(f"{head}, lag {'?' if lag is None else lag}, "
                    f"batch {elapsed_ms:.0f} ms, commit {commit_ms:.0f} ms"
                    + (f", {notices.describe()}" if notices else "")
                    + (f", {discards.describe()}" if discards else "")
                    + (f", {BootstrapProgress.render(*bootstrap)}" if bootstrap is not None else ""))
        if self._jsonl is not None:
            self._jsonl.report()
        self._delete_committed_messages()

    def _delete_committed_messages(self) -> None:
        """Intermediate streams lose what every task committed past (:mod:`sparza.runtime.driver.retention`). A
        failure costs nothing but the space: it is said once per kind, counted, and tried again next time."""
        deleter = self._committed_messages
        if deleter is None or not deleter.due():
            return
        try:
            deleter.delete()
        except Exception as exc:
            self.metrics.counter("job", "delete-committed-errors").inc()
            kind = type(exc).__name__
            if kind not in self._delete_errors_said:
                self._delete_errors_said.add(kind)
                self.status(f"sparza: {self.job.job_key}: warning: cannot delete the committed messages of "
                            f"intermediate streams ({short_error(str(exc))}); they stay until the next try "
                            f"(job.delete.committed.messages.interval.ms)")

    def _lag(self, results: list[BatchResult]) -> int | None:
        """Messages not yet planned, in total (None when unknown); per input stream in the gauge
        ``<system>.<stream>/input-lag``, and per adjunct store in ``adjunct-<store>/bootstrap-lag``."""
        inputs = self._inputs
        if inputs is None:
            return None
        from sparza.streams import SystemStreamPartition

        for r in results:  # a container reports each task when it commits: keep every task's newest offsets
            if r.offsets:
                self._task_offsets[r.task] = dict(r.offsets)
        per_ssp: dict[Any, int] = {}
        unknown = False
        try:
            positions = inputs.positions()
            for task, offsets in self._task_offsets.items():
                for name, offset in offsets.items():
                    ssp = self._ssps.get(name)
                    if ssp is None:
                        ssp = self._ssps[name] = SystemStreamPartition.parse(name)
                    n = self._lags.count((task, name), inputs.ops[ssp.system], ssp, offset, positions[ssp].upcoming)
                    if n is None:
                        unknown = True
                        continue
                    per_ssp[ssp] = max(n, per_ssp.get(ssp, 0))  # a broadcast SSP: its furthest-behind task
        except Exception:
            return None  # lag is informational: never fail a batch over it
        per_stream: dict[Any, int] = {}
        for ssp, n in per_ssp.items():
            per_stream[ssp.system_stream] = per_stream.get(ssp.system_stream, 0) + n
        for stream, n in per_stream.items():
            self.metrics.gauge(str(stream), "input-lag").set(n)
        self._adjunct_lag(per_stream)
        return None if unknown else sum(per_stream.values())

    def _adjunct_lag(self, per_stream: dict[Any, int]) -> None:
        """While an adjunct store bootstraps (a task reports ``bootstrapped`` false), its bootstrap lag is
        its stream's lag; 0 once every task's store is bootstrapped."""
        stores = self._adjunct_stores
        if not stores:
            return
        snapshot = self.metrics.snapshot()
        for name, stream in stores.items():
            flags = [m.get("bootstrapped") for g, m in snapshot.items()
                     if g.endswith(f":adjunct-{name}") and "bootstrapped" in m]
            bootstrapping = not flags or not all(flags)
            self.metrics.gauge(f"adjunct-{name}", "bootstrap-lag").set(
                per_stream.get(stream, 0) if bootstrapping else 0)

    # --- run -----------------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        """Run until stopped, failed, ended or (``once``) caught up. Returns how it ended."""
        previous = self._install_signals()
        try:
            self.start()
            while True:
                while self.poll():
                    pass
                if not self._regroup_due():
                    break
                self._regroup()
            return self.finish()
        finally:
            self._restore_signals(previous)
            self.close()

    def start(self) -> None:
        """Build the SparkSession if needed and start the query (returns at once)."""
        # The summary's storage requests are this run's: a coordinated processor's registry outlives its runs.
        self._started_at = time.monotonic()
        self._counted_at_start = (self.metrics.total(STORAGE_TOTAL), self.metrics.value("aggregate", "task-commits"))
        self.acquire_claim()  # before anything touches the job's shared files
        self._started = True
        from sparza.runtime.driver.drainmonitor import DrainMonitor, request_drain

        if self.drain_at_start:
            request_drain([self.config])
        self._drain_monitor = DrainMonitor(self.config, metrics=self.metrics)
        self._poll_drain(force=True)  # the first epoch (containers) or plan already knows a pending drain
        self._inputs = inputs = self._inputs or InputSystems(self.job, metrics=self.metrics)
        self._committed_messages = CommittedMessages(self.job, inputs.admins, metrics=self.metrics)
        self._bootstrap = BootstrapProgress(self.job, inputs)
        tasks = self._tasks(inputs)
        self._task_count = len(inputs.task_models())
        self._say_grouping(inputs)
        from sparza.state.adjunct import AdjunctConfig

        self._adjunct_stores = {spec.name: spec.stream for spec in AdjunctConfig.from_config(self.config).stores}
        self._jsonl = (JsonLinesReporter(self.metrics, self.job.metrics_jsonl_path, source=self.job.job_key)
                       if self.job.metrics_jsonl_path else None)
        if self.job.prometheus_port is not None:
            # One endpoint per process: the stages of an application and a coordinator's runs share it.
            self._detach_prometheus = attach_prometheus(self.metrics, self.job.prometheus_port,
                                                        labels={"sparza_job": self.job.job_key})
        self.metrics.gauge("job", "generation").set(self.generation)
        from sparza.azure import storage_timeout_s
        from sparza.runtime.driver.storagewatch import StorageWatch, azure_probes

        self._watch = StorageWatch(azure_probes(self.config, self.metrics), storage_timeout_s(self.config),
                                   lambda line: self.status(f"sparza: {self.job.job_key}: warning: {line}"),
                                   self.metrics)
        if self._spark is None:
            self._spark = build_spark_session(self.job, self.master, f"sparza-{self.job.job_key}", self.remote,
                                              warn=lambda line: self.status(f"sparza: warning: {line}"))
        spark = self._spark
        add_py_files(spark, py_files(self.config))
        check_executor_imports(spark, self.config)  # cluster/Connect executors: one line now, not a failed batch
        self._ship_secrets(spark)
        self._stop_file().unlink(missing_ok=True)
        resets = self._announce_resets(tasks)
        all_ended = bool(tasks) and not resets and self._all_ended_before(tasks)  # raises before starting
        options = {"config": json.dumps(self._shipped), "tasks": json.dumps([t.name for t in tasks]),
                   "generation": str(self.generation), "task_count": str(self._task_count)}
        name = f"sparza-{self.job.job_key}-{self.processor_id}".replace(".", "_")
        from sparza.runtime.driver.containers import execution_mode

        host = ("" if execution_mode(self.config) == "containers"
                else ", micro-batches driven by this client (Spark Connect)" if is_connect(spark)
                else f", micro-batches (Spark's offset log, its bookkeeping only: {self.spark_checkpoint_dir})")
        self.status(f"sparza: job {self.job.job_key}, {len(tasks)} task(s), processor {self.processor_id}"
                    + (f" (claim epoch {self.generation})" if self._claim is not None else "") + host)
        if not host:
            self._query = self._container_query(spark, tasks)
        else:
            from sparza.runtime.driver.source import SparzaDataSource

            # Only the micro-batch mode reads through the data source: registering it costs the container mode
            # seconds of start-up (the JVM side of a Python data source), for nothing.
            spark.dataSource.register(SparzaDataSource)
            # Every start, restarts included, plans from the task checkpoints (runtime/driver/source.py).
            batches = self._client_query if is_connect(spark) else self._streaming_query
            self._restart_query = lambda: batches(spark, options, name)
            self._query = self._restart_query()
        if all_ended:
            # Nothing will be planned, so no batch would ever notice that every input ended: stop now.
            self.request_stop("all inputs ended")

    def _say_grouping(self, inputs: InputSystems) -> None:
        """What this start does about input partitions that changed since the last (``job.partition.expansion``)."""
        from sparza.engine.partitions import expansion_policy

        grouping = inputs.grouping
        line = grouping.describe(expansion_policy(self.config))
        if line:
            self.metrics.counter("job", "partition-regroups").inc()
            self.status(f"sparza: {self.job.job_key}: {line}")
        for note in grouping.notes:
            self.status(f"sparza: {self.job.job_key}: warning: {note}")

    def _regroup_due(self) -> bool:
        """True when the container query left because its input partitions grew and the tasks regroup
        (``job.partition.expansion``: group or new-tasks), with no failure and no stop asked for."""
        from sparza.engine.partitions import REGROUP_REASON
        from sparza.runtime.driver.containers import ContainerQuery

        query = self._query
        return (self._stop_reason == REGROUP_REASON and self._failure is None and self._claim_lost is None
                and not self._stop.is_set() and isinstance(query, ContainerQuery) and not query.isActive
                and query.exception() is None)

    def _regroup(self) -> None:
        """Start the job's tasks again, grouped for the input partitions they have now (every task stopped at a batch
        boundary: nothing is in flight). Samza restarts the job here; the SparkSession and the claim stay."""
        from sparza.engine.checkpoint import checkpoint_store_from_config, stamp_generation

        assert self._spark is not None
        self._query.stop()
        self._stop_reason = ""
        self._stop_live_queries()
        old = self._inputs
        self._inputs = inputs = InputSystems(self.job, metrics=self.metrics)
        if old is not None:
            old.close()
        self._committed_messages = CommittedMessages(self.job, inputs.admins, metrics=self.metrics)
        self._bootstrap = BootstrapProgress(self.job, inputs)
        tasks = self._tasks(inputs)
        self._task_count = len(inputs.task_models())
        self._task_offsets.clear()
        self._lags.clear()
        self._checkpoints_read_for = set()
        if self._claim is not None:  # tasks new to the job are fenced like the others
            stamp_generation(checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics),
                             [t.name for t in tasks], self.generation)
        self._say_grouping(inputs)
        self.status(f"sparza: {self.job.job_key}: every task stopped at a batch boundary; starting {len(tasks)} "
                    "task(s) again, regrouped")
        self._query = self._container_query(self._spark, tasks)

    def _ship_secrets(self, spark: Any) -> None:
        """Secrets go to Spark as a distributed file, never as an option or in a function (runtime/secrets.py)."""
        from sparza.runtime.driver.shipping import ship_secrets

        if self._secrets is None:
            self._shipped, self._secrets = ship_secrets(spark, self.config)

    def _streaming_query(self, spark: Any, options: dict[str, str], name: str) -> Any:
        """Structured Streaming: the source plans on the driver, ``foreachBatch`` runs each batch."""
        reader = (spark.readStream.format("sparza").options(**options)
                  .option("stop_file", str(self._stop_file())).load())
        writer = (reader.writeStream.foreachBatch(self._on_batch)
                  .option("checkpointLocation", self.spark_checkpoint_dir).queryName(name))
        if self.once:
            writer = writer.trigger(availableNow=True)
        elif self.job.commit_ms > 0:
            writer = writer.trigger(processingTime=f"{self.job.commit_ms} milliseconds")
        return writer.start()

    def _container_query(self, spark: Any, tasks: list[TaskModel]) -> Any:
        """Container mode: the job joins the session's containers (see :mod:`sparza.runtime.driver.containers`)."""
        from sparza.coordination.jobclaim import CLAIM_TIMEOUT_MS
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.messages import AddJob
        from sparza.runtime.driver.containers import (
            CHANNEL_HOST,
            CONTAINER_COUNT,
            DRIVER_TIMEOUT_MS,
            HOST_AFFINITY,
            LAUNCH,
            MAX_RESTARTS,
            ContainerQuery,
            ContainerService,
            check_container_session,
        )

        assert self._inputs is not None
        check_container_session(spark)
        start = {str(ssp): pos.upcoming for ssp, pos in self._inputs.positions().items()}
        names = [t.name for t in tasks]
        store = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics)
        shipped = dict(self._shipped)
        cfg = self.config

        def add_job() -> AddJob:
            return AddJob(job=self.job.job_key, config=shipped, generation=self.generation,
                          task_count=self._task_count, start_positions=start,
                          targets=dict(start) if self.once else None)

        def locations() -> dict[str, str]:
            wanted = set(names)
            return {t: cp.location for t, cp in store.read_all().items() if cp.location and t in wanted}

        def notice(line: str) -> None:
            self.metrics.counter("aggregate", "container-notices").inc()
            if " moves from " in line:
                self.metrics.counter("aggregate", "tasks-moved").inc()
            elif " was lost " in line:
                self.metrics.counter("aggregate", "container-restarts").inc()
            elif " starts again from its last commit" in line:
                self.metrics.counter("aggregate", "task-retries").inc()
            self.status(f"sparza: {self.job.job_key}: {line}")

        # The default follows the claim timeout it must stay within (half of it, at most 10 s).
        driver_timeout_ms = DRIVER_TIMEOUT_MS.get(cfg) or min(10_000, CLAIM_TIMEOUT_MS.get(cfg) // 2)
        service = ContainerService.of(spark, channel_host=CHANNEL_HOST.get(cfg), launch=LAUNCH.get(cfg))
        query = ContainerQuery(
            service, self.job.job_key, names, add_job, locations, self._on_container_results, notice,
            once=self.once, affinity=HOST_AFFINITY.get(cfg), count=CONTAINER_COUNT.get(cfg) or None,
            max_restarts=MAX_RESTARTS.get(cfg), stopping=self._stop.is_set, driver_timeout_ms=driver_timeout_ms)
        query.drain_request = self.drain.to_json() if self.drain is not None else None  # pending at the start
        if self._watch is not None:
            self._watch.running(f"the containers of {self.job.job_key}")
        self._serve_live_queries(service, names)
        return query.start()

    def _serve_live_queries(self, service: Any, names: list[str]) -> None:
        """Answer live store queries for this job (``job.live.query.port``) and say where, in the job's ``_live``
        document (``sparza store get --live`` reads it) and the status line."""
        import os
        import socket

        from sparza.engine.checkpoint import SupportsJobDocuments, checkpoint_store_from_config
        from sparza.runtime.driver.livequery import (
            LIVE_DOCUMENT,
            LIVE_QUERY_HOST,
            LIVE_QUERY_PORT,
            LiveJob,
            router,
        )

        port = LIVE_QUERY_PORT.get(self.config)
        if port < 0 or self._inputs is None:
            return
        try:
            server = service.live_queries(LIVE_QUERY_HOST.get(self.config), port)
        except OSError as exc:
            self.status(f"sparza: {self.job.job_key}: warning: live store queries are off: cannot serve them on "
                        f"{LIVE_QUERY_HOST.get(self.config)}:{port} ({exc}); set job.live.query.port")
            return
        server.add(LiveJob(self.job.job_key, names, router(self.config, self._inputs)))
        self._live = server
        store = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics)
        if isinstance(store, SupportsJobDocuments):
            document = {"url": server.url, "job": self.job.job_key, "processor": self.processor_id,
                        "host": socket.gethostname(), "pid": os.getpid(), "tasks": names}
            with contextlib.suppress(Exception):  # the queries work without it; only the CLI's lookup needs it
                store.write_document(LIVE_DOCUMENT, json.dumps(document, sort_keys=True).encode())
        self.status(f"sparza: {self.job.job_key}: live store queries at {server.url}/v1/stores/<store>/get?key=..."
                    " (sparza store get --live)")

    def _stop_live_queries(self) -> None:
        server, self._live = self._live, None
        if server is None:
            return
        server.remove(self.job.job_key)
        from sparza.engine.checkpoint import SupportsJobDocuments, checkpoint_store_from_config
        from sparza.runtime.driver.livequery import LIVE_DOCUMENT

        store = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics)
        if isinstance(store, SupportsJobDocuments):
            with contextlib.suppress(Exception):
                found = store.read_document(LIVE_DOCUMENT)
                if found is not None and json.loads(found).get("url") == server.url:
                    store.delete_document(LIVE_DOCUMENT)

    def _client_query(self, spark: Any, options: dict[str, str], name: str) -> Any:
        """Spark Connect: this process plans each batch and runs it as one batch job whose result rows come back
        here (see :mod:`sparza.runtime.driver.clientloop` for why)."""
        from sparza.runtime.driver.clientloop import ClientDrivenQuery
        from sparza.runtime.driver.source import SparzaStreamReader

        return ClientDrivenQuery(spark, SparzaStreamReader(options), self._on_batch,
                                 trigger_ms=max(self.job.commit_ms, 0), available_now=self.once,
                                 stop_requested=self._stop.is_set, name=name).start()

    def wait_initialized(self, timeout_s: float = 60.0) -> None:
        """Wait until the query has initialized its source (or stopped, or ``timeout_s`` passed)."""
        query = self._query
        deadline = time.monotonic() + timeout_s
        while query is not None and time.monotonic() < deadline:
            try:
                if not query.isActive or query.status.get("message") != "Initializing sources":
                    return
            except Exception:
                return  # a failed query: poll()/finish() report it
            time.sleep(0.1)

    def _announce_resets(self, tasks: list[TaskModel]) -> int:
        """``samza.reset.offset`` of main inputs: say what the start plan resets (every start plans from the task
        checkpoints, see :meth:`~sparza.engine.planner.BatchPlanner.initial`). Returns how many SSPs are reset."""
        if not any(spec.reset_offset for spec in self.job.inputs):
            return 0
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.planner import plan_resets
        from sparza.streams import SystemStreamPartition

        checkpoints = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics).read_all()
        resets, warnings = plan_resets(self.job, tasks, checkpoints)
        for warning in warnings:
            _log.warning("%s: %s", self.job.job_key, warning)
            self.status(f"sparza: {self.job.job_key}: warning: {warning}")
        count = sum(len(v) for v in resets.values())
        if not count:
            return 0
        streams = sorted({SystemStreamPartition.parse(s).system_stream for v in resets.values() for s in v},
                         key=str)
        self.status(f"sparza: {self.job.job_key}: samza.reset.offset: {count} partition(s) of "
                    f"{', '.join(str(s) for s in streams)} start at samza.offset.default, not at their checkpoint")
        self.metrics.counter("job", "reset-offsets").inc(count)
        return count

    def _all_ended_before(self, tasks: list[TaskModel]) -> bool:
        """True when every task ended in an earlier run. Raises when an ended task's inputs got messages
        after its end: stopping at once would leave them unprocessed without a word."""
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.planner import input_after_end, input_after_end_error
        from sparza.state.adjunct import AdjunctConfig

        checkpoints = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics).read_all()
        if not all(t.name in checkpoints and checkpoints[t.name].ended for t in tasks):
            return False
        assert self._inputs is not None
        positions = self._inputs.positions()
        adjunct = AdjunctConfig.from_config(self.config).input_streams()
        for task in tasks:
            found = input_after_end(task, checkpoints[task.name].offsets, positions, self._inputs.ops, adjunct)
            if found:
                raise input_after_end_error(task.name, found)
        return True

    @property
    def failed(self) -> bool:
        """True once a batch failed, or the query ended for any reason but a clean stop: the other stages of
        an application then stop too, and the run ends saying why."""
        if self._failure is not None:
            return True
        query = self._query
        if query is None or query.isActive or self._stop.is_set():
            return False
        try:
            return query.exception() is not None
        except Exception:
            return True

    def _poll_drain(self, *, force: bool = False) -> None:
        """Samza's DrainMonitor: read the job's drain request (every ``job.drain-monitor.poll.interval.ms``), say
        when it appears or goes, and hand it to the containers (the micro-batch source reads it itself)."""
        monitor = self._drain_monitor
        if monitor is None:
            return
        before = monitor.reads
        request = monitor.poll(force=force)
        if (request.id if request else None) == (self.drain.id if self.drain is not None else None):
            if request is not None and monitor.reads != before:
                self._check_drained(request)
            return
        self.drain = request
        if request is not None:
            self.metrics.counter("job", "drains-requested").inc()
            self.status(f"sparza: {self.job.job_key}: drain {request.id} requested: every task processes its input "
                        f"up to the offsets observed then ({len(request.ends)} source partition(s)), fires what it "
                        "holds, sends its drain downstream and stops")
        else:
            self.status(f"sparza: {self.job.job_key}: the drain request is gone (cancelled, or completed elsewhere)")
        from sparza.runtime.driver.containers import ContainerQuery

        if isinstance(self._query, ContainerQuery):
            self._query.drain(request.to_json() if request is not None else None)
        if request is not None:
            self._check_drained(request)

    def _check_drained(self, request: Any) -> None:
        """Stop when every task of this job already committed the drain's completion (a run started after its tasks
        drained: they have nothing left to drain, and need not run a batch to say so)."""
        from sparza.runtime.driver.drainmonitor import drain_completed

        if self.job.job_key in request.jobs and drain_completed(self.config, request, [self.job.job_key]):
            self.request_stop("drained")

    def poll(self, timeout_s: float = 0.25) -> bool:
        """Wait up to ``timeout_s``; True while the query runs and no stop was requested."""
        self._poll_drain()
        self._check_stall()
        query = self._query
        if query is None or not query.isActive or self._stop.is_set():
            return self._restarted(query) or self._noticed_end(query)
        try:
            query.awaitTermination(timeout_s)
        except Exception:  # the query failed: restart it if that may cure it, else finish() reports it
            return self._restarted(query)
        if query.isActive and not self._stop.is_set():
            return True
        return self._restarted(query) or self._noticed_end(query)

    def _check_stall(self) -> None:
        """The stall watchdog (``job.stall.timeout.ms``), per task: a task with messages waiting in its input whose
        committed offsets did not move for that long has stalled, whatever the other tasks do (one task left without
        a container, or never asked again, while the others commit, is as silent a loss as a job that stopped). Said
        at half the timeout (a status line naming the tasks, the gauge ``job/stalled-tasks`` and
        ``<task>:task/stalled-s``); at all of it the run ends with a :class:`JobStalledError` naming them: a stalled
        job must never look healthy."""
        timeout_s = STALL_TIMEOUT_MS.get(self.config) / 1000.0
        now = time.monotonic()
        if timeout_s <= 0 or self._stop.is_set() or now - self._last_stall_check < min(5.0, timeout_s / 4):
            return
        self._last_stall_check = now
        waiting = self._waiting_tasks()
        if now - self._last_commit >= 5.0 and self._inputs is not None:
            # No result came to recompute the lag: keep the gauge true to what waits (it would stay at its last
            # value, often 0, while input waits for a task that commits nothing).
            lag: dict[str, int] = {}
            for _mark, ssps in waiting.values():
                for ssp, n in ssps.items():
                    lag[ssp] = max(lag.get(ssp, 0), n)
            self.metrics.gauge("aggregate", "lag").set(sum(lag.values()))
        for task in list(self._stuck_since):
            if task not in waiting:
                del self._stuck_since[task]
        for task, (mark, _ssps) in waiting.items():
            seen = self._stuck_since.get(task)
            if seen is None or seen[1] != mark:  # new input waiting, or its offsets moved: its clock starts now
                self._stuck_since[task] = (now, mark)
        quiet = {task: now - since for task, (since, _mark) in self._stuck_since.items()}
        stuck = {task: q for task, q in quiet.items() if q >= timeout_s / 2}
        self.metrics.gauge("job", "stalled-tasks").set(len(stuck))
        for task in self._stall_gauged - set(stuck):
            self.metrics.gauge(f"{task}:task", "stalled-s").set(0)
        for task, q in stuck.items():
            self.metrics.gauge(f"{task}:task", "stalled-s").set(round(q))
        self._stall_gauged = set(stuck)
        self._stall_warned &= set(stuck)
        ended = {task: q for task, q in stuck.items() if q >= timeout_s}
        if not stuck or (not ended and set(stuck) <= self._stall_warned):
            return
        named = ended or stuck
        longest = max(named.values())
        tasks = sorted(named)
        names = "task(s) " + ", ".join(f"'{t}'" for t in tasks[:6]) + (
            f" and {len(tasks) - 6} more" if len(tasks) > 6 else "")
        per_ssp: dict[str, int] = {}
        for task in tasks:
            for ssp, n in waiting[task][1].items():
                per_ssp[ssp] = max(per_ssp.get(ssp, 0), n)
        shown = ", ".join(f"{ssp} ({n})" for ssp, n in sorted(per_ssp.items())[:6]) + (
            f" and {len(per_ssp) - 6} more" if len(per_ssp) > 6 else "")
        total = sum(per_ssp.values())
        if now - self._last_commit >= longest:
            lead = f"no task committed for {longest:.0f} s while {total} message(s) wait in {shown} ({names})"
        else:
            lead = f"{names} committed nothing for {longest:.0f} s while {total} message(s) wait in {shown}"
        lead += self._stall_cause(tasks)
        if not ended:
            self._stall_warned |= set(stuck)
            self.metrics.counter("job", "stall-warnings").inc()
            self.status(f"sparza: {self.job.job_key}: warning: {lead}; the run ends if this lasts {timeout_s:.0f} s "
                        "(job.stall.timeout.ms)")
            return
        self.metrics.counter("job", "stalls").inc()
        self._failure = JobStalledError(
            f"job {self.job.job_key} stalled: {lead}; next: look at the executors' logs and the status lines above for "
            "the tasks' last words, then start the job again (it continues from its last commits; "
            "job.stall.timeout.ms sets the limit)")
        self.request_stop("stalled")

    def _stall_cause(self, tasks: list[str]) -> str:
        """What the container mode knows of stalled ``tasks``: those no container runs now."""
        unplaced = getattr(self._query, "unplaced", None)
        if unplaced is None:
            return ""
        try:
            none = [t for t in unplaced() if t in tasks]
            containers = len(self._query.service.manager.containers)
        except Exception:
            return ""
        if not none:
            return "; each runs in a container but plans nothing"
        return (f"; no container runs {', '.join(repr(t) for t in none[:6])} ({containers} container(s) connected: "
                "are the executors there, and do their containers start? see the status lines above)")

    def _waiting_tasks(self) -> dict[str, tuple[tuple[tuple[str, str], ...], dict[str, int]]]:
        """Task → (its committed offsets, SSP → messages past them) for each task of this processor with messages
        waiting in its main inputs (offsets as the task last reported them, else as its checkpoint has them; tasks
        the job is done with left out)."""
        inputs = self._inputs
        if inputs is None:
            return {}
        from sparza.engine.checkpoint import checkpoint_store_from_config

        try:
            positions = inputs.positions()
            offsets = dict(self._task_offsets)
            models = self._tasks(inputs)
            unknown = {m.name for m in models if m.name not in offsets}
            if unknown - self._checkpoints_read_for:
                # Read once per set of tasks: a task that has not committed in this run keeps the checkpoint it had
                # (each read is storage requests, and the watchdog looks every few seconds).
                store = checkpoint_store_from_config(self.config, self.job.job_key, metrics=self.metrics)
                self._checkpoint_offsets = {name: dict(cp.offsets) for name, cp in store.read_all().items()}
                self._checkpoints_read_for = {m.name for m in models}
            for name in unknown:
                if name in self._checkpoint_offsets:
                    offsets[name] = self._checkpoint_offsets[name]
            finished = getattr(self._query, "finished_tasks", None)
            done = finished() if finished is not None else set()
            out: dict[str, tuple[tuple[tuple[str, str], ...], dict[str, int]]] = {}
            for model in models:
                if model.name in done:
                    continue
                mine = offsets.get(model.name, {})
                waits: dict[str, int] = {}
                for ssp in model.ssps:
                    if ssp not in positions:
                        continue
                    start = mine.get(str(ssp))
                    first = self._first_upcoming.setdefault(ssp, positions[ssp].upcoming)
                    if start is None:  # no commit yet: where the task starts without a checkpoint
                        oldest = offset_default(self.config, ssp.system_stream) == "oldest"
                        start = positions[ssp].oldest if oldest else first
                        if start is None:
                            continue
                    # --once reads what was there at the start: what came later waits for no task of this run.
                    end = first if self.once else positions[ssp].upcoming
                    n = inputs.ops[ssp.system].count_between(ssp, start, end)
                    if n:
                        waits[str(ssp)] = int(n)
                if waits:
                    out[model.name] = (tuple(sorted(mine.items())), waits)
            return out
        except Exception:
            return {}  # the watchdog only reports: storage trouble shows in the lag and the storage watch already

    def _restarted(self, query: Any) -> bool:
        """Micro-batch mode: a query that died of something a new attempt may cure (Spark's retries of a task
        exhausted, an executor lost) is started again, at most
        ``job.container.max.restarts`` times in a row without a committed batch, saying so. True when
        restarted. A failed task result (a poison message, a task exception) is never restarted."""
        if self._restart_query is None or query is None or query.isActive or self._stop.is_set() \
                or self._failure is not None:
            return False
        try:
            error = query.exception()
        except Exception as exc:
            error = exc
        if error is None or "PartitionCountChangedError" in str(error):  # a new attempt stops the same way
            return False
        if self._batches > self._batches_at_restart:
            self._query_restarts = 0
        from sparza.runtime.driver.containers import MAX_RESTARTS

        limit = MAX_RESTARTS.get(self.config)
        if self._query_restarts >= limit:
            return False
        self._query_restarts += 1
        self._batches_at_restart = self._batches
        self.metrics.counter("aggregate", "query-restarts").inc()
        self.status(f"sparza: {self.job.job_key}: the streaming query failed ({short_error(str(error))}); "
                    f"starting it again from the last commits (restart {self._query_restarts} of {limit})")
        self._query = self._restart_query()
        return True

    def _noticed_end(self, query: Any) -> bool:
        """A container query that left its pool by itself says why (all inputs ended, caught up)."""
        from sparza.runtime.driver.containers import ContainerQuery

        why = query.ended_because if isinstance(query, ContainerQuery) else None
        if why and not self._stop_reason:
            self._stop_reason = why if why != "caught up" else "caught up (--once)"
        return False

    def finish(self) -> RunOutcome:
        """Let the running batch commit, stop the query and say how it ended (raises if it failed)."""
        query = self._query
        try:
            if query.isActive:
                self._quiesce(query)
                query.stop()
            exc = query.exception()
        except Exception as error:  # a failed query raises its failure from stop()/exception()
            exc = error
        if self._failure is not None or exc is not None:
            # A container's fenced write (TaskLost) fails the query without passing _on_container_results: when the
            # claim is gone that is why, so renew now rather than racing the renewal thread to say so.
            self._check_claim()
        if self._claim_lost is not None:
            raise self._claim_lost
        if self._failure is not None:
            raise self._failure
        if isinstance(exc, SparzaError):  # the container pool's own account of a failure: it names the cause
            raise exc
        if exc is not None:
            from sparza.engine.executor import write_trace_text

            trace = write_trace_text(self.config, "query", str(exc))
            raise JobFailedError(f"the streaming query of {self.job.job_key} failed: {short_error(str(exc))}; "
                                 f"full trace: {trace}")
        reason = self._stop_reason or ("caught up (--once)" if self.once else "stopped")
        detail = self._drained() if reason == "drained" or (self.drain is not None and reason == "all inputs ended") \
            else ""
        requests_before, commits_before = self._counted_at_start
        requests = describe_storage_requests(self.metrics.total(STORAGE_TOTAL) - requests_before,
                                             self.metrics.value("aggregate", "task-commits") - commits_before,
                                             time.monotonic() - self._started_at)
        self.status(f"sparza: {self.job.job_key}: {reason}{detail}; {self._batches} batch(es) committed"
                    + (f"; {requests}" if requests else "")
                    + (f"; {self.notices.describe()}" if self.notices else "")
                    + (f"; {self.discards.describe()}" if self.discards else ""))
        if self.discards:
            advice = self.discards.advice(self.job)
            _log.warning("%s: %s", self.job.job_key, advice)
            self.status(f"sparza: {self.job.job_key}: warning: {advice}")
        return RunOutcome(reason, self._batches, 0, discards=self.discards)

    def _drained(self) -> str:
        """What the summary says of a completed drain. The request goes once every task of every job it covers
        completed it (another stage of the application may still be draining)."""
        from sparza.engine.drain import read_drain
        from sparza.runtime.driver.drainmonitor import finish_drain

        request = self.drain
        if request is None:
            return ""
        if finish_drain(self.config) is not None or read_drain(self.config) is None:  # (or another stage did)
            self.metrics.counter("job", "drains-completed").inc()
            return (f" (drain {request.id}: every task processed its input up to the offsets observed at the request "
                    "and fired what it held; the next run continues from there)")
        return f" (drain {request.id}; the request stays until the other stages drained too)"

    def close(self) -> None:
        """Release the stop file, the metrics endpoint, (if built here) the SparkSession, and the job claim."""
        self._stop_live_queries()
        if self._started:  # a runner refused at start must not touch the running holder's stop file
            self._stop_file().unlink(missing_ok=True)
        if self._jsonl is not None and self._started:
            with contextlib.suppress(OSError):
                self._jsonl.report()  # the run's last state, also when no batch ran
            self._jsonl = None
        if self._detach_prometheus is not None:
            self._detach_prometheus()
            self._detach_prometheus = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._inputs is not None:
            self._inputs.close()   # the query's foreachBatch callback keeps this runner alive until the JVM exits
        self._committed_messages = None   # it holds admins too (a Kafka admin keeps connections to its brokers)
        if self._owns_spark and self._spark is not None:
            from sparza.runtime.driver.containers import wait_for_containers

            wait_for_containers(self._spark)
            with contextlib.suppress(Exception):
                self._spark.stop()
            self._spark = None
            if self._secrets is not None:
                self._secrets.close()  # only now: Spark serves the file from it while the session lives
        self._secrets = None
        self._release_claim()

    def _quiesce(self, query: Any) -> None:
        """Wait until no batch runs (the stop file keeps new ones from being planned)."""
        deadline = time.monotonic() + 600
        idle_checks = 0
        while time.monotonic() < deadline and query.isActive:
            with self._in_batch:
                active = bool(query.status.get("isTriggerActive"))
            idle_checks = 0 if active else idle_checks + 1
            if idle_checks >= 3:
                return
            time.sleep(0.1)

    def _install_signals(self) -> StopOnSignals | None:
        if not self.install_signal_handlers:
            return None
        return StopOnSignals(self.request_stop, self.status).install()

    @staticmethod
    def _restore_signals(previous: StopOnSignals | None) -> None:
        if previous is not None:
            previous.restore()


