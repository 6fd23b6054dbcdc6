"""One task's batch on an executor: restore, process, then commit (:mod:`sparza.engine.commit`).

:meth:`TaskInstance.run_batch` is Samza's TaskInstance lifecycle on a batch boundary:

1. read the task checkpoint; a checkpoint already at this batch means a replay: skip it;
2. bring the stores to the checkpoint's snapshots (reuse the local dir when it matches);
3. deliver every message in order (control messages go to :class:`~sparza.control.TaskControl`);
4. watermark, window, end-of-stream and drain callbacks, decided from the plan (never the local clock);
5. commit with :class:`~sparza.engine.commit.TaskCommit`: intent, flush, adjunct, snapshot, task
   checkpoint, cleanup — numbered steps, each a fault point of the guarantees harness.

Task objects are cached per worker process and reused only while their in-memory view matches the
checkpoint; any failure abandons what the task sent and drops the in-memory task, so a retry starts
from the committed state and leaves nothing of the failed attempt visible.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from sparza.config import Config
from sparza.control.settings import INTERMEDIATE_OUTPUTS
from sparza.deadletters import DataErrorPolicy, dead_letter_value
from sparza.engine.checkpoint import Intent, TaskCheckpoint, VersionedCheckpoint
from sparza.engine.commit import TaskCommit
from sparza.engine.errors import ProcessingError, RuntimeStateError, TaskCodeError
from sparza.engine.job import EngineJob
from sparza.engine.results import BatchResult, BatchStatus
from sparza.engine.split import TaskSplit
from sparza.engine.stores import TaskStores
from sparza.engine.worker import WORKER, SplitInput
from sparza.errors import ErrorKind, SerdeError, SparzaError, StorageUnavailableError, classify
from sparza.metrics import MetricsRegistry
from sparza.serde import BytesSerde, Serde
from sparza.streams import (
    IncomingMessageEnvelope,
    MessageType,
    OutgoingMessageEnvelope,
    SystemStream,
    SystemStreamPartition,
)
from sparza.systems import (
    MessageRows,
    SupportsArrowSend,
    SupportsFencing,
    SupportsPartitionCount,
    SupportsProcessingTime,
    Transaction,
    get_system_factory,
    load_object,
)
from sparza.systems.rows import arrow_rows
from sparza.systems.settings import STREAM_INTERMEDIATE, STREAM_KEY_SERDE, STREAM_MSG_SERDE, stream_serde
from sparza.task import (
    BatchStreamTask,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    MessageBatch,
    StreamTask,
    WatermarkListenerTask,
    WindowableTask,
)

__all__ = ["ProcessedBatch", "TaskInstance", "get_instance", "release_instance"]

_log = logging.getLogger(__name__)

class _Collector:
    """The task's MessageCollector (and BatchCollector): serializes and hands messages to producers (created on
    first use)."""

    __slots__ = ("_instance", "_name", "_sends")

    def __init__(self, instance: TaskInstance) -> None:
        self._instance = instance
        self._name = instance.name
        self._sends: dict[str, Any] = {}  # system -> its producer's send (per-message path)

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        send = self._sends.get(envelope.system_stream.system)
        if send is None:
            send = self._bind(envelope.system_stream.system)
        send(self._name, envelope)  # a direct call: a functools.partial binding the task cost more

    def _bind(self, system: str) -> Any:
        """The ``send`` of the producer of ``system`` (created on first use)."""
        send = self._sends[system] = self._instance.producer(system).send
        return send

    def send_batch(self, stream: SystemStream, rows: pa.RecordBatch | pa.Table) -> None:
        """Arrow rows (``key``, ``value``, optional ``timestamp``/``partition``) to ``stream``: in one call to a
        producer that takes Arrow rows, else message by message through ``send``."""
        producer = self._instance.producer(stream.system)
        if isinstance(producer, SupportsArrowSend):
            producer.send_rows(self._instance.name, stream.stream, rows)
            return
        names = rows.column_names
        n = rows.num_rows
        columns = [rows.column(name).to_pylist() if name in names else [None] * n
                   for name in ("key", "value", "timestamp", "partition")]
        for key, value, ts, partition in zip(*columns, strict=True):
            if key is None and partition is None:
                raise ValueError(f"send_batch to {stream}: a row has neither a key nor a partition")
            self.send(OutgoingMessageEnvelope(stream, value, key=key, partition=partition, timestamp=ts))


class _Coordinator:
    """The task's TaskCoordinator: every batch commits; shutdown stops the job after this batch."""

    def __init__(self) -> None:
        self.shutdown_requested = False
        self.commit_requested = False

    def commit(self) -> None:
        self.commit_requested = True

    def shutdown(self) -> None:
        self.shutdown_requested = True


class _Context:
    """The TaskContext given to ``init``."""

    def __init__(self, instance: TaskInstance) -> None:
        self._instance = instance

    @property
    def task_name(self) -> str:
        return self._instance.name

    @property
    def config(self) -> Config:
        return self._instance.job.config

    @property
    def metrics(self) -> MetricsRegistry:
        return self._instance.metrics

    @property
    def input_ssps(self) -> list[SystemStreamPartition]:
        return list(self._instance.ssps)

    def get_store(self, name: str) -> Any:
        adjunct = self._instance.adjunct
        if adjunct is not None and name in adjunct.store_names:
            return adjunct.get_store(name)
        handles = self._instance.stores.handles
        if name not in handles:
            raise RuntimeStateError(f"task asked for store '{name}' but the config has no stores.{name}.factory "
                                    f"(stores: {', '.join(handles) or 'none'})")
        return handles[name]


_T = TypeVar("_T")


class _TimedReads(Generic[_T]):
    """An iterator over a lazy read (storage is read as the loop asks) that adds up the time spent reading in
    :attr:`seconds`, so a batch's read time is reported apart from its processing."""

    def __init__(self, items: Iterator[_T]) -> None:
        self._items = items
        self.seconds = 0.0

    def __iter__(self) -> Iterator[_T]:
        clock, items = time.perf_counter, self._items
        while True:
            began = clock()
            item = next(items, _END)
            self.seconds += clock() - began
            if item is _END:
                return
            yield item


_END: Any = object()


def _ssp_runs(batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(ssp index, rows)`` for each run of consecutive rows of one SSP (a read batch is usually one run)."""
    column = batch.column("ssp")
    n = batch.num_rows
    if n == 0:
        return
    first = column[0].as_py()
    if column.null_count == 0 and pc.all(pc.equal(column, first)).as_py():
        yield first, batch
        return
    values = column.to_pylist()
    begin = 0
    for i in range(1, n + 1):
        if i == n or values[i] != values[begin]:
            yield values[begin], batch.slice(begin, i - begin)
            begin = i


def _arrow_chunks(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, MessageRows]]:
    """Batches of the split's Arrow rows (with their ``ssp`` column) as ``(SSP index, column lists)`` runs."""
    for batch in batches:
        for ssp_idx, run in _ssp_runs(batch):
            yield ssp_idx, arrow_rows(run)


def _sizes(keys: list[bytes | None], values: list[bytes | None]) -> list[int]:
    """Each message's serialized size (key and value bytes), in C loops when no key or value is missing."""
    if None in keys or None in values:
        return [(len(k) if k is not None else 0) + (len(v) if v is not None else 0)
                for k, v in zip(keys, values, strict=True)]
    return list(map(operator.add, map(len, keys), map(len, values)))  # type: ignore[arg-type]


def _max_timestamp(timestamps: list[int | None]) -> int | None:
    """The largest event time of a run (None when none has one)."""
    try:
        return max(timestamps)  # type: ignore[type-var]
    except TypeError:  # some are None
        return max((t for t in timestamps if t is not None), default=None)
    except ValueError:  # empty
        return None


def _serde(config: Config, ssp: SystemStreamPartition, which: str) -> Serde:
    return stream_serde(config, ssp.system, ssp.stream, which)


def _exception_names(exc: BaseException) -> set[str]:
    names: set[str] = set()
    for cls in type(exc).__mro__:
        names.add(cls.__name__)
        names.add(f"{cls.__module__}.{cls.__qualname__}")
    return names


class TaskInstance:
    """One task of a job in one worker process (see the module docstring)."""

    def __init__(self, engine: EngineJob, name: str) -> None:
        job = engine.job
        self.engine = engine
        self.job = job
        self.name = name
        ssps = list(engine.models[name].ssps)
        self.ssps = ssps
        self.task_count = engine.task_count
        self.checkpoints = engine.checkpoints
        self.clients = engine.clients
        self.metrics = MetricsRegistry()
        self.stores = TaskStores(job, name, self.metrics, backup_metrics=engine.clients.metrics)
        self.committed_batch: int | None = None
        self.task: Any = None
        self.control: Any = None
        self.drains: Any = None  # DrainTracker: the drain messages read and the drain completed (with TaskControl's)
        self._producers: dict[str, Any] = {}
        self._key_serdes = [_serde(job.config, s, "key") for s in ssps]
        self._msg_serdes = [_serde(job.config, s, "msg") for s in ssps]
        from sparza.state.adjunct import AdjunctConfig

        self._adjunct_config = AdjunctConfig.from_config(job.config)
        self.adjunct: Any = None
        self._control_ssps = [s for s in ssps if not self._adjunct_config.is_adjunct(s)]
        self._uses_control = self._needs_control()
        self._window_at = 0
        self._output_batch = 0  # the batch whose outputs the running batch writes (its transactions' version)
        self._planned_at = 0  # its processing time (epoch ms, from the plan)
        self._replayed: Intent | None = None  # the open intent the running batch replays, if it does
        self._data_errors = DataErrorPolicy.from_config(job.config)
        self._dead_lettered = 0
        self._restore_metrics: MetricsRegistry | None = None  # what restore_stores did, for the next batch
        self.location: str | None = None  # where this process keeps the task's state (host affinity)
        self._known: VersionedCheckpoint | None = None
        """The task checkpoint as this instance last wrote it (with its version tag), while the task stays in this
        process (``stores.resident``): the next batch starts from it instead of reading it again. A write by
        anyone else changes the stored tag, so the next conditional write is refused and nothing is lost."""

    # --- setup ---------------------------------------------------------------------------------
    def _needs_control(self) -> bool:
        cfg = self.job.config
        if INTERMEDIATE_OUTPUTS.get(cfg):
            return True
        if any(STREAM_INTERMEDIATE.get(cfg, system=s.system, stream=s.stream) for s in self.ssps):
            return True
        task_cls = load_object(self.job.task_class, "task.class") if self.job.task_class else None
        if task_cls is None:
            return False
        if isinstance(task_cls, type):
            return issubclass(task_cls, WatermarkListenerTask)
        return isinstance(task_cls, WatermarkListenerTask)

    def _new_task(self) -> Any:
        target = self.job.task_class
        if target is None:
            raise RuntimeStateError("no task.class to run (app.class jobs are planned into stages first)")
        cls = load_object(target, "task.class")
        task = cls() if isinstance(cls, type) else cls
        if not isinstance(task, StreamTask | BatchStreamTask):
            from sparza.errors import ConfigError

            raise ConfigError("task.class", target, "a class with process(envelope, collector, coordinator) or "
                              "process_batch(batch, collector, coordinator)")
        return task

    def producer(self, system: str) -> Any:
        """The producer of ``system`` (shared by the tasks of this worker process, registered per task).

        Producers are kept across batches: they hold open table handles, so a batch pays no
        reconnect. Tasks of one worker process run one at a time, so after a failure only the
        failed task can have unflushed messages; the producers it used are then dropped.
        """
        producer = self._producers.get(system)
        if producer is None:
            producer = self.clients.producer(system)
            producer.register(self.name)
            producer.begin(self.name, Transaction(self.app_id, self._output_batch))
            if isinstance(producer, SupportsProcessingTime):
                producer.set_processing_time(self.name, self._planned_at)
            self._producers[system] = producer
        return producer

    @property
    def app_id(self) -> str:
        """The app id of this task's output transactions: ``<job key>/<task>``."""
        return f"{self.job.job_key}/{self.name}"

    def _release_producers(self, *, failed: bool) -> None:
        if failed:
            # A failed batch leaves nothing visible: abandon (never flush) what this task sent, then drop the
            # producer (it may be in a bad state) so the next batches get a new one. It is not stopped: in a
            # container other tasks of the job run beside this one and may have sent through it since (a commit in
            # its thread, a batch being processed); stop() would drop or flush their messages (found by the
            # in-process harness with threaded commits: outputs of tasks beside a failed one were lost).
            for system, producer in self._producers.items():
                self.clients.drop_producer(system, producer)
                with contextlib.suppress(Exception):
                    producer.abandon(self.name)
        self._producers.clear()

    # --- one batch -----------------------------------------------------------------------------
    def run_batch(self, split: TaskSplit, rows: Iterable[pa.RecordBatch], *, spark_batch_id: int | None,
                  generation: int) -> BatchResult:
        """Process and commit one batch of this task (see the module docstring); ``rows`` is read lazily, and not
        at all for a replayed batch."""
        processed = self.process(split, rows, spark_batch_id=spark_batch_id, generation=generation)
        if isinstance(processed, BatchResult):
            return processed
        return self.commit(processed)

    def process(self, split: TaskSplit, rows: Iterable[pa.RecordBatch], *, spark_batch_id: int | None,
                generation: int) -> ProcessedBatch | BatchResult:
        """The first half of a batch: restore the stores, deliver every message, run the boundary callbacks. Returns
        what :meth:`commit` needs, or the batch's result when it is a replay of a committed batch (skipped).

        Outputs stay buffered in the producers until :meth:`commit`; a failure here or there drops the in-memory task
        (:meth:`abort`), so a retry starts from the committed state."""
        self.metrics = MetricsRegistry()
        if self._restore_metrics is not None:  # what the restore ahead of this batch did
            self.metrics.merge_changes(self._restore_metrics.changes())
            self._restore_metrics = None
        self.stores.metrics = self.metrics
        result = BatchResult(self.name, split.batch, BatchStatus.COMMITTED, offsets=split.end_offsets())
        known = self._known if self.stores.resident else None
        versioned = known if known is not None else self.checkpoints.read(self.name)
        stored = versioned.checkpoint if versioned else None
        cp = stored if stored is not None and stored.committed else None  # what was committed
        if cp is not None and cp.batch >= split.batch:
            self._check_replay(split, cp)
            self.stores.finish_cleanup(dict(cp.stores))  # its first attempt may have failed during cleanup
            result.status = BatchStatus.SKIPPED
            result.ended = cp.ended
            result.drained = split.drain is not None and (cp.drain or {}).get("completed") == split.drain["id"]
            self.metrics.counter("task", "batches-skipped").inc()
            result.metrics = self.metrics.changes()
            return result
        self._check_start(split, cp)
        output_batch = self._output_batch = self._output_batch_of(split, stored)
        intent = stored.open_intent() if stored is not None else None
        self._replayed = intent if intent is not None and intent.batch == output_batch else None
        # The batch's processing time, as its first attempt saw it (an open intent's replay keeps its time).
        self._planned_at = self._replayed.planned_at_ms if self._replayed is not None else split.planned_at
        etag = versioned.etag if versioned else None
        started = time.perf_counter()
        try:
            if cp is not None:
                cp, etag = self._recover_deleted_snapshots(cp, etag, generation)
            result = self._process(split, rows, cp, result)
        except BaseException:
            self.abort()
            raise
        result.process_ms = (time.perf_counter() - started) * 1000.0
        return ProcessedBatch(split, cp, etag, result, spark_batch_id, generation, output_batch)

    def _fence_outputs(self, stored: VersionedCheckpoint) -> None:
        """Before the task's first batch here, fence the systems it writes (:class:`~sparza.systems.SupportsFencing`):
        those an open intent of ``stored`` names, else the checkpoint's ``outputs``. An earlier instance that died
        while flushing left something open that holds up readers of every task's output (Kafka: a
        ``read_committed`` consumer waits at its transaction) until this task's first batch began; and the fence is
        the producer's opening (Kafka's ``init_transactions``), which that batch would otherwise wait for. A fence
        that fails is logged and counted (``task.fence-failures``); the batch's own begin then fences, as it
        always did."""
        for system in stored.checkpoint.fence_systems():
            try:
                producer = self.clients.producer(system)
                if isinstance(producer, SupportsFencing):
                    producer.fence(self.name, self.app_id)
            except Exception as exc:
                self.metrics.counter("task", "fence-failures").inc()
                _log.warning("task %s: could not fence its output on %s before its first batch (%s: %s); that batch "
                             "does", self.name, system, type(exc).__name__, exc)

    def restore_stores(self, stored: VersionedCheckpoint | None, *, generation: int,
                       cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Restore and open the stores at the committed snapshots of ``stored`` (the task checkpoint as the
        container read it) before the task's first batch, so that batch starts at once. A container runs it beside
        its loop for a task handed to it; the batch still checks its checkpoint and reopens whatever no longer
        matches. Its metrics are reported with that batch.

        It runs what that batch ran before its stores opened, in the same order and with the same errors: the
        SAMZA-2787 recovery of deleted snapshot blobs (:meth:`_recover_deleted_snapshots`: a fresh snapshot, named
        in the task checkpoint at once; purged blobs raise :class:`RuntimeStateError`), then
        :meth:`TaskStores.preopen`. Restored straight away, a snapshot whose cleanup meets a deleted blob failed
        with the ``DeletedError`` at every retry and one with purged blobs with a ``SnapshotUnavailableError``.
        What this raises the container judges as that first batch's failure (:meth:`abort` first). False when
        ``cancelled`` (the task revoked meanwhile) stopped it; a task cancelled before it began writes nothing."""
        if stored is None:
            return True
        if cancelled():  # revoked while it waited for a restore thread: its next owner restores it
            return False
        # A fresh registry, as a batch starts with: the restore's metrics are merged into its first batch's.
        self._restore_metrics = self.metrics = self.stores.metrics = MetricsRegistry()
        self._fence_outputs(stored)  # first: it may free the readers of every task's output, the restore one task
        if not stored.checkpoint.committed:
            return True
        cp = stored.checkpoint
        cp, _etag = self._recover_deleted_snapshots(cp, stored.etag, generation)
        return self.stores.preopen(dict(cp.stores), cp.batch, cancelled=cancelled)

    def commit(self, batch: ProcessedBatch) -> BatchResult:
        """The second half of a batch: :class:`~sparza.engine.commit.TaskCommit` runs its numbered steps. A container
        runs it beside the processing of its other tasks (never beside this task's next :meth:`process`)."""
        result, cp = batch.result, batch.committed
        commit_started = time.perf_counter()
        try:
            written = self._commit(batch)
        except BaseException:
            self.abort()
            raise
        result.commit_ms = (time.perf_counter() - commit_started) * 1000.0
        self._known = written
        self._release_producers(failed=False)
        if result.ended and not (cp.ended if cp else False):
            self._close_task()
        self.metrics.counter("task", "messages-processed").inc(result.processed)
        self.metrics.timer("task", "process-ms").update(result.process_ms)
        self.metrics.timer("task", "commit-ms").update(result.commit_ms)
        result.metrics = self.metrics.changes()
        return result

    def abort(self) -> None:
        """Whatever happened, the in-memory task no longer matches a checkpoint: drop it (its stores closed, what it
        sent abandoned, never flushed), so the next batch starts from the committed state read again."""
        self.task = None
        self.committed_batch = None
        self._known = None
        self.stores.close()
        if self.adjunct is not None:
            with contextlib.suppress(Exception):
                self.adjunct.close()
        self._release_producers(failed=True)

    def _recover_deleted_snapshots(self, cp: TaskCheckpoint, etag: str | None,
                                   generation: int) -> tuple[TaskCheckpoint, str | None]:
        """SAMZA-2787: committed snapshots with deleted blobs are replaced by fresh ones, and the task
        checkpoint names them at once (same batch and offsets), before gc can purge the old blobs."""
        replaced = self.stores.recover_deleted(dict(cp.stores), cp.batch)
        if not replaced:
            return cp, etag
        cp = replace(cp, generation=generation, stores={**cp.stores, **replaced})
        with self.metrics.timer("task", "checkpoint-write-ms").time():
            etag = self.checkpoints.write(cp, etag)
        self.stores.recovery_committed(cp.batch, replaced)
        return cp, etag

    def _output_batch_of(self, split: TaskSplit, stored: TaskCheckpoint | None) -> int:
        """The batch whose outputs this batch writes (the version of its output transactions): ``split.batch``,
        or the open intent's batch when this batch is that intent's range again (its outputs may already be
        partly flushed).

        The replayed batch must read exactly the intent's ranges, and nothing from SSPs the intent
        does not know; anything else would repeat or lose output, so it is refused.
        """
        intent = stored.open_intent() if stored is not None else None
        if intent is None:
            return split.batch
        starts = split.start_offsets()
        ends = split.end_offsets()
        gone = sorted(s for s in intent.starts if s not in starts)
        if gone:
            raise RuntimeStateError(
                f"task '{self.name}' flushed outputs for batch {intent.batch} reading {', '.join(gone)}, which it "
                "no longer reads, and that batch never committed. Put those inputs back until it has, or accept "
                f"that its outputs may be repeated: sparza checkpoints drop-intent --task '{self.name}'")
        same = (all(starts[s] == v and ends[s] == intent.ends[s] for s, v in intent.starts.items())
                and all(starts[s] == ends[s] for s in starts if s not in intent.starts))
        if same:
            return intent.batch
        raise RuntimeStateError(
            f"task '{self.name}' began flushing outputs for batch {intent.batch} (offsets {intent.starts} "
            f"to {intent.ends}) without committing it, but batch {split.batch} covers {starts} to {ends}: "
            "its outputs would be repeated or lost. Restart the job so the batch is re-planned from the task "
            "checkpoints; if the input was truncated past those offsets, accept repeated outputs with "
            f"sparza checkpoints drop-intent --task '{self.name}'")

    def _check_replay(self, split: TaskSplit, cp: TaskCheckpoint) -> None:
        """A batch the task checkpoint already holds is skipped only if it is that very batch again (Spark
        re-running its last one); any other means Spark's plan is behind the task checkpoints, and skipping it
        would leave the messages past the checkpoint unread while the run reports success. No host keeps an offset
        log of its own any more, so only a concurrent writer of the task gets here."""
        if cp.batch == split.batch and cp.offsets == split.end_offsets():
            return
        raise RuntimeStateError(
            f"task '{self.name}' batch {split.batch} ends at {split.end_offsets()} but its checkpoint (batch "
            f"{cp.batch}) is at {cp.offsets}: something else committed this task since its batch was planned "
            "(another processor or run of the job at the same time); stop every other run of the job and restart "
            "(batches are planned from the task checkpoints)")

    def _check_start(self, split: TaskSplit, cp: TaskCheckpoint | None) -> None:
        """The batch must start where the task checkpoint ends (else another writer committed the task meanwhile)."""
        if cp is None:
            return
        for ssp, start in zip(split.ssps, split.starts, strict=True):
            committed = cp.offsets.get(ssp)
            if committed is not None and committed != start and ssp not in split.reset:
                raise RuntimeStateError(
                    f"task '{self.name}' batch {split.batch} starts {ssp} at {start} but its checkpoint "
                    f"(batch {cp.batch}) is at {committed}: something else committed this task since its batch was "
                    "planned (another processor or run of the job at the same time); stop every other run of the "
                    "job and restart (batches are planned from the task checkpoints)")

    def _prepare(self, split: TaskSplit, cp: TaskCheckpoint | None) -> None:
        committed = dict(cp.stores) if cp else {}
        self.stores.open(committed, cp.batch if cp else None)
        if self._adjunct_config.stores:
            self._prepare_adjunct(split, cp)
        cp_batch = cp.batch if cp else None
        if self.task is None or self.committed_batch != cp_batch:
            self.task = self._new_task()
            if self._uses_control:
                from sparza.control import TaskControl

                self.control = TaskControl.restore(cp.control if cp else None, self.name, self.task_count,
                                                   self._control_ssps, self.job.config, self.metrics,
                                                   drains=cp.drain if cp else None)
                self.drains = self.control.drains
            else:
                from sparza.control.drain import DrainTracker

                self.drains = DrainTracker.restore(cp.drain if cp else None, self._control_ssps)
            if isinstance(self.task, InitableTask):
                self._task_call("init", self.task.init, _Context(self))
        if self.control is not None:
            self.control.bind_metrics(self.metrics)  # the registry is fresh every batch

    def _task_call(self, method: str, fn: Any, *args: Any) -> None:
        """Call task code outside ``process``: what it raises is deterministic (:class:`TaskCodeError`:
        the job stops, Spark does not retry), except storage trouble, which a retry may cure."""
        from sparza.errors import SparzaError

        try:
            fn(*args)
        except (StorageUnavailableError, ConnectionError, TimeoutError):
            raise
        except Exception as exc:
            if isinstance(exc, SparzaError) and not isinstance(exc, RuntimeStateError):
                raise  # sparza's own failure under the task (config, a store, a producer): judged by the executor
            raise TaskCodeError(self.name, method, f"{type(exc).__name__}: {exc}") from exc

    def _prepare_adjunct(self, split: TaskSplit, cp: TaskCheckpoint | None) -> None:
        """Adjunct stores: restore to the checkpoint's entry (every batch: their stores close at commit),
        pick the broadcast snapshot of this batch, read what a forced bootstrap missed."""
        from sparza.blobstore import blob_store_manager_from_config
        from sparza.state.adjunct import TaskAdjunctManager

        if self.adjunct is None:
            from sparza.azure import StorageRequests

            requests = StorageRequests(self.clients.metrics, "adjunct")  # the broadcast snapshots' blob requests
            self.adjunct = TaskAdjunctManager(self.name, self.job.config, self.job.task_store_base_dir,
                                              blob_store_manager_from_config(self.job.config, requests=requests),
                                              self.job.name,
                                              self.job.job_id, input_ssps=list(self.ssps), metrics=self.metrics)
        self.adjunct.metrics = self.metrics
        self.adjunct.restore(cp.adjunct if cp else None)
        if self.stores.resident:
            # A container's task commits on its own schedule: it reads the newest publication, and a replay
            # of an intent reads the one its first attempt read (recorded in the intent).
            self.adjunct.begin_batch(None, pinned=self._replayed.adjunct_reads if self._replayed else None)
        else:
            self.adjunct.begin_batch(self._output_batch)  # a replayed intent reads what its first attempt read
        until = {SystemStreamPartition.parse(s): start for s, start in zip(split.ssps, split.starts, strict=True)
                 if self._adjunct_config.is_adjunct(SystemStreamPartition.parse(s))}
        if until:

            def read(ssp: SystemStreamPartition, start: str | None, end: str | None = None) -> Any:
                return self.clients.consumer(ssp.system).read(ssp, start, end)

            self.adjunct.catch_up(read, until)

    def _process(self, split: TaskSplit, rows: Iterable[pa.RecordBatch], cp: TaskCheckpoint | None,
                 result: BatchResult) -> BatchResult:
        with self.metrics.timer("task", "prepare-ms").time():
            self._prepare(split, cp)
        collector = _Collector(self)
        coordinator = _Coordinator()
        task = self.task
        if isinstance(task, BatchStreamTask):
            counts = self._process_arrow(split, iter(rows), task.process_batch, collector, coordinator)
        else:
            # A per-message task takes its messages as column lists straight from the consumer (no Arrow);
            # Arrow batches given by a caller are taken apart once per run of one SSP.
            chunks = rows.rows() if isinstance(rows, SplitInput) else _arrow_chunks(rows)
            counts = self._process_rows(split, chunks, task.process, collector, coordinator)
        messages, processed, dropped, ignored_count, read_s = counts
        result.messages, result.processed, result.dropped, result.ignored = messages, processed, dropped, ignored_count
        self.metrics.timer("task", "read-ms").update(read_s * 1000.0)
        self.metrics.counter("task", "messages-dropped").inc(dropped)
        self.metrics.counter("task", "exceptions-ignored").inc(ignored_count)
        self.metrics.counter("task", "messages-dead-lettered").inc(self._dead_lettered)
        self._dead_lettered = 0
        # Windows count late messages in the task's registry, which is fresh every batch.
        result.late = self.metrics.counter("control", "late-messages").count
        result.late_routed = self.metrics.counter("control", "late-messages-routed").count
        self._boundary_callbacks(split, cp, collector, coordinator, result)
        result.shutdown = coordinator.shutdown_requested
        return result

    def _adjunct_indexes(self, split: TaskSplit) -> set[int]:
        """Indexes of the split's SSPs that feed adjunct stores (none without an adjunct manager)."""
        if self.adjunct is None:
            return set()
        return {i for i, s in enumerate(split.ssps) if self._adjunct_config.is_adjunct(SystemStreamPartition.parse(s))}

    def _process_arrow(self, split: TaskSplit, batches: Iterator[pa.RecordBatch], process_batch: Any,
                       collector: _Collector, coordinator: _Coordinator) -> tuple[int, int, int, int, float]:
        """A batch task's messages as Arrow (:meth:`_deliver_batches`); returns (messages, processed, dropped,
        ignored, read seconds)."""
        adjunct = self.adjunct
        adjunct_idx = self._adjunct_indexes(split)
        ssps = [SystemStreamPartition.parse(s) for s in split.ssps]
        key_serdes = self._serdes_for(ssps, "key")
        msg_serdes = self._serdes_for(ssps, "msg")
        messages = processed = ignored_count = 0
        reads = _TimedReads(batches)
        for batch in reads:
            for ssp_idx, run in _ssp_runs(batch):
                ssp = ssps[ssp_idx]
                messages += run.num_rows
                kinds = run.column("type").to_pylist()
                if ssp_idx in adjunct_idx:
                    # A run of one SSP at a time, in stream order (the task's main messages after it see it
                    # applied): per message, that path costs what a RocksDB put does.
                    offsets, raw_keys, raw_values, tss = (run.column(name).to_pylist() for name in (
                        "offset", "key", "value", "timestamp"))
                    adjunct.on_rows(ssp, offsets, raw_keys, raw_values, tss, kinds)
                    continue
                if not isinstance(key_serdes[ssp_idx], BytesSerde) or not isinstance(msg_serdes[ssp_idx], BytesSerde):
                    self._refuse_serde(ssp)
                done, skipped = self._deliver_batches(ssp, run, kinds, process_batch, collector, coordinator)
                processed += done
                ignored_count += skipped
        if adjunct_idx:
            adjunct.read_through({ssps[i]: split.ends[i] for i in adjunct_idx})
        return messages, processed, 0, ignored_count, reads.seconds

    def _process_rows(self, split: TaskSplit, chunks: Iterator[tuple[int, MessageRows]], process: Any,
                      collector: _Collector, coordinator: _Coordinator) -> tuple[int, int, int, int, float]:
        """A per-message task's messages, one envelope each, control messages in place among them (to TaskControl);
        returns (messages, processed, dropped, ignored, read seconds)."""
        adjunct = self.adjunct
        adjunct_idx = self._adjunct_indexes(split)
        control = self.control
        ssps = [SystemStreamPartition.parse(s) for s in split.ssps]
        key_serdes = [None if isinstance(s, BytesSerde) else s for s in self._serdes_for(ssps, "key")]
        msg_serdes = [None if isinstance(s, BytesSerde) else s for s in self._serdes_for(ssps, "msg")]
        user = int(MessageType.USER)
        envelope_cls = IncomingMessageEnvelope
        messages = processed = dropped = ignored_count = 0
        on_control = control.on_envelope if control is not None else None
        reads = _TimedReads(chunks)
        for ssp_idx, (offsets, raw_keys, raw_values, tss, kinds) in reads:
            ssp = ssps[ssp_idx]
            n = len(offsets)
            messages += n
            if ssp_idx in adjunct_idx:
                # A run of one SSP at a time, in stream order (the task's main messages after it see it
                # applied): per message, that path costs what a RocksDB put does.
                adjunct.on_rows(ssp, offsets, raw_keys, raw_values, tss, kinds)
                continue
            sizes = _sizes(raw_keys, raw_values)
            kser = key_serdes[ssp_idx]
            mser = msg_serdes[ssp_idx]
            if kser is None and mser is None and not any(kinds):  # USER is 0: user messages only
                # The common case: user messages only, bytes in and out of the task's own serdes.
                if control is not None:
                    # Watermark bookkeeping only (lateness is decided by event-time operators, so a task or
                    # stage without one delivers every message whatever its event time): once per run.
                    control.on_user_run(ssp, _max_timestamp(tss))
                for offset, key, value, ts, size in zip(offsets, raw_keys, raw_values, tss, sizes, strict=True):
                    try:
                        process(envelope_cls(ssp, offset, key, value, ts, size), collector, coordinator)
                    except Exception as exc:
                        outcome = self._on_message_error(exc, ssp, offset, key, value, ts, collector)
                        processed -= 1
                        if outcome == "ignored":
                            ignored_count += 1
                        elif outcome == "dropped":
                            dropped += 1
                processed += n
                continue
            for offset, raw_key, raw_value, ts, kind, size in zip(offsets, raw_keys, raw_values, tss, kinds, sizes,
                                                                  strict=True):
                if kind != user:
                    if on_control is not None:
                        on_control(envelope_cls(ssp, offset, raw_key, raw_value, ts, 0, MessageType(kind)))
                    continue
                if kser is None and mser is None:
                    key, value = raw_key, raw_value
                else:
                    try:
                        key = kser.from_bytes(raw_key) if kser is not None and raw_key is not None else raw_key
                        value = (mser.from_bytes(raw_value) if mser is not None and raw_value is not None
                                 else raw_value)
                    except Exception as exc:
                        # A serde that raised anything is still the data's fault, unless sparza says what
                        # it is (a config or system error: a schema registry that refuses or does not answer).
                        if not isinstance(exc, SparzaError | ConnectionError | TimeoutError):
                            exc = SerdeError(f"{type(exc).__name__}: {exc}")
                        if self._on_message_error(exc, ssp, offset, raw_key, raw_value, ts, collector,
                                                  deserializing=True) == "dropped":
                            dropped += 1
                        continue
                envelope = envelope_cls(ssp, offset, key, value, ts, size)
                if on_control is not None:
                    on_control(envelope)
                try:
                    process(envelope, collector, coordinator)
                except Exception as exc:
                    outcome = self._on_message_error(exc, ssp, offset, raw_key, raw_value, ts, collector)
                    if outcome == "ignored":
                        ignored_count += 1
                    elif outcome == "dropped":
                        dropped += 1
                    continue
                processed += 1
        if adjunct_idx:
            adjunct.read_through({ssps[i]: split.ends[i] for i in adjunct_idx})
        return messages, processed, dropped, ignored_count, reads.seconds

    def _on_message_error(self, exc: Exception, ssp: SystemStreamPartition, offset: str, key: Any, value: Any,
                          ts: int | None, collector: _Collector, *, deserializing: bool = False) -> str:
        """A message's handling raised ``exc``: ``"ignored"`` (a task exception task.ignored.exceptions
        names), ``"dropped"`` (a data error Samza's task.drop.*.errors skips) or ``"dead-lettered"``
        (routed to task.dead.letter.stream); anything else raises :class:`ProcessingError`, naming what
        kind of error it is (see :mod:`sparza.errors`): config and system errors are never ignorable."""
        if isinstance(exc, StorageUnavailableError | ConnectionError | TimeoutError):
            raise exc  # a retry may cure it: Spark retries the task (exact: outputs are idempotent per batch)
        kind = classify(exc)
        ignored = self.job.ignored_exceptions
        if kind is ErrorKind.TASK and ignored and ("*" in ignored or _exception_names(exc) & ignored):
            return "ignored"
        if kind is ErrorKind.DATA:
            policy = self._data_errors
            if policy.dead_letter is not None:
                raw_key = key if key is None or isinstance(key, bytes) else None
                raw_value = value if value is None or isinstance(value, bytes) else None
                collector.send(OutgoingMessageEnvelope(
                    policy.dead_letter, dead_letter_value(exc, task=self.name, ssp=str(ssp), offset=offset,
                                                          key=raw_key, value=raw_value, timestamp=ts),
                    key=raw_key if raw_key is not None else self.name.encode("utf-8"), timestamp=ts))
                self._dead_lettered += 1
                return "dead-lettered"
            if policy.drops(deserializing):
                return "dropped"
        label = "deserialization error" if deserializing else kind.value
        raise ProcessingError(self.name, str(ssp), offset, label, f"{type(exc).__name__}: {exc}", key=key,
                              column=getattr(exc, "column", None)) from exc

    def _deliver_batches(self, ssp: SystemStreamPartition, run: pa.RecordBatch, kinds: list[int], process_batch: Any,
                         collector: _Collector, coordinator: _Coordinator) -> tuple[int, int]:
        """A run of one SSP to a BatchStreamTask: its user messages between control messages as MessageBatches,
        its control messages to TaskControl, in order. Returns (processed, ignored) message counts."""
        control = self.control
        ignored = self.job.ignored_exceptions
        processed = skipped = 0
        begin = 0
        n = len(kinds)
        for i in range(n + 1):
            if i < n and kinds[i] == MessageType.USER:
                continue
            if i > begin:
                rows = run.slice(begin, i - begin).select(["offset", "key", "value", "timestamp"])
                if control is not None:
                    control.on_user_run(ssp, pc.max(rows.column("timestamp")).as_py())
                try:
                    process_batch(MessageBatch(ssp, rows), collector, coordinator)
                    processed += rows.num_rows
                except Exception as exc:
                    if classify(exc) is ErrorKind.TASK and ignored and (
                            "*" in ignored or _exception_names(exc) & ignored):
                        skipped += rows.num_rows
                    else:
                        offsets = rows.column("offset")
                        raise ProcessingError(self.name, str(ssp), f"{offsets[0].as_py()} to {offsets[-1].as_py()}",
                                              classify(exc).value, f"{type(exc).__name__}: {exc}",
                                              column=getattr(exc, "column", None)) from exc
            if i < n:
                if control is not None:
                    row = run.slice(i, 1).to_pylist()[0]
                    control.on_envelope(IncomingMessageEnvelope(ssp, row["offset"], row["key"], row["value"],
                                                                row["timestamp"], 0, MessageType(kinds[i])))
                begin = i + 1
        return processed, skipped

    def _refuse_serde(self, ssp: SystemStreamPartition) -> None:
        from sparza.errors import ConfigError

        for serde_key in (STREAM_KEY_SERDE, STREAM_MSG_SERDE):  # the stream's, else its system's, else bytes
            value = serde_key.get(self.job.config, system=ssp.system, stream=ssp.stream)
            if value.strip().lower() not in ("bytes", "byte"):
                key = serde_key.where(self.job.config, system=ssp.system, stream=ssp.stream)
                raise ConfigError(key, value, "bytes (or unset)", message=(
                    f"{key} is {value!r} but task.class {self.job.task_class} processes Arrow batches "
                    f"(process_batch), which carry the raw bytes: unset it and decode the column in the task"))
        raise ConfigError("task.class", str(self.job.task_class), "a StreamTask for inputs with a serde")

    def _serdes_for(self, ssps: list[SystemStreamPartition], which: str) -> list[Serde]:
        if ssps == self.ssps:
            return self._key_serdes if which == "key" else self._msg_serdes
        return [_serde(self.job.config, s, which) for s in ssps]

    def _boundary_callbacks(self, split: TaskSplit, cp: TaskCheckpoint | None, collector: _Collector,
                            coordinator: _Coordinator, result: BatchResult) -> None:
        """End-of-stream, watermark, window and outgoing control messages, at the batch boundary."""
        task = self.task
        control = self.control
        own = [s for s in split.ssps if not self._adjunct_config.is_adjunct(SystemStreamPartition.parse(s))]
        exhausted = [s for s, end in zip(split.ssps, split.ends, strict=True)
                     if s in own and s in split.bounded_ends and end == split.bounded_ends[s]]
        if control is not None:
            for s in exhausted:
                control.on_ssp_exhausted(SystemStreamPartition.parse(s))
            ended = control.all_ended()
        else:
            ended = bool(own) and len(exhausted) == len(own)
        already = cp.ended if cp else False
        if control is not None:
            watermark = control.advance(split.planned_at)
            if watermark is not None and isinstance(task, WatermarkListenerTask):
                self._task_call("on_watermark", task.on_watermark, watermark, collector, coordinator)
        window_ms = self.job.window_ms
        # The window timer starts with the task's first batch (as Samza's starts with the container).
        last_window = (cp.window_at_ms if cp else 0) or split.planned_at
        self._window_at = last_window
        if window_ms > 0 and isinstance(task, WindowableTask) and split.planned_at - last_window >= window_ms:
            self._task_call("window", task.window, collector, coordinator)
            self._window_at = split.planned_at
        if ended and not already and isinstance(task, EndOfStreamListenerTask):
            self._task_call("on_end_of_stream", task.on_end_of_stream, collector, coordinator)
        result.ended = ended or already
        drained = self._drain(split, own, exhausted, collector, coordinator) if not result.ended else None
        result.drained = result.ended or drained is not None
        if control is not None:
            outputs = control.streams_written()
            if outputs:
                counts = {stream: self._partition_count(stream) for stream in outputs}
                for envelope in control.outgoing(split.planned_at, counts, drained=drained):
                    collector.send(envelope)

    def _drain(self, split: TaskSplit, own: list[str], exhausted: list[str], collector: _Collector,
               coordinator: _Coordinator) -> str | None:
        """The drain this batch runs under, once the task completed it (None: no drain, or not drained yet).

        The task completes it in the first batch in which each of its source SSPs reached the end offset
        observed at the request (the split's ``unreached`` is empty of it), each intermediate SSP got the drain
        of every upstream producer, or the SSP ended: then ``on_drain`` runs, once per drain."""
        drain = split.drain
        drains = self.drains
        if drain is None or drains is None:
            return None
        run_id = str(drain["id"])
        if drains.completed == run_id:
            return run_id
        control = self.control
        unreached = set(drain.get("unreached") or ())
        for key in own:
            ssp = SystemStreamPartition.parse(key)
            if key in exhausted or (control is not None and control.is_ended(ssp)):
                continue
            if control is not None and control.settings.is_intermediate(ssp.system_stream):
                if not drains.is_drained(ssp, run_id):
                    return None
            elif key in unreached:
                return None
        task = self.task
        if isinstance(task, DrainListenerTask):
            self._task_call("on_drain", task.on_drain, collector, coordinator)
        drains.completed = run_id
        self.metrics.counter("task", "drains").inc()
        return run_id

    def _close_task(self) -> None:
        """``ClosableTask.close`` once the task's inputs have all ended and that state is committed.

        A task that never ends (unbounded inputs) is not closed: its Python worker may be reused or
        killed by Spark at any time, so close is not guaranteed there (as documented in ``sparza.task``).
        """
        task = self.task
        if isinstance(task, ClosableTask):
            try:
                task.close()
            except Exception:
                _log.warning("close() of task %s failed", self.name, exc_info=True)
                self.metrics.counter("task", "close-errors").inc()

    def _partition_count(self, stream: SystemStream) -> int:
        producer_admin = get_system_factory(self.job.config, stream.system).get_admin(stream.system, self.job.config)
        if isinstance(producer_admin, SupportsPartitionCount):
            return int(producer_admin.partition_count(stream.stream))
        meta = producer_admin.get_system_stream_metadata({stream.stream})[stream.stream]
        return int(meta.partition_count)

    def _commit(self, batch: ProcessedBatch) -> VersionedCheckpoint:
        """Commit the batch with :class:`~sparza.engine.commit.TaskCommit` (it runs the numbered steps); returns the
        task checkpoint written, with its version tag."""
        split, result, generation = batch.split, batch.result, batch.generation

        # The systems this batch wrote through, else those of the batch before (an idle batch keeps them).
        flushed = tuple(sorted(self._producers))
        outputs = flushed or (batch.committed.outputs if batch.committed else ())

        def checkpoint(stores: dict[str, str], adjunct: dict[str, Any] | None) -> TaskCheckpoint:
            return TaskCheckpoint(
                task=self.name, batch=split.batch, generation=generation, offsets=split.end_offsets(), stores=stores,
                control=self.control.snapshot() if self.control is not None else None, ended=result.ended,
                spark_batch_id=batch.spark_batch_id, window_at_ms=self._window_at, adjunct=adjunct,
                location=self.location, drain=self.drains.snapshot() if self.drains is not None else None,
                outputs=outputs)

        def committed() -> None:
            # From here the batch is committed: an in-memory task that fails cleanup stays consistent with it.
            self.committed_batch = split.batch

        commit = TaskCommit(
            task=self.name, batch=split.batch, checkpoints=self.checkpoints, metrics=self.metrics, stores=self.stores,
            adjunct=self.adjunct, producers=self._producers, transaction=Transaction(self.app_id, batch.output_batch),
            committed=batch.committed, etag=batch.etag, generation=generation, checkpoint=checkpoint,
            listeners=self.engine.commit_listeners(),
            intent=Intent(batch=batch.output_batch, planned_at_ms=split.planned_at, starts=split.start_offsets(),
                          ends=split.end_offsets(), bounded_ends=dict(split.bounded_ends),
                          adjunct_reads=self.adjunct.reads() if self.adjunct is not None else {}, drain=split.drain,
                          systems=flushed))
        commit.run(committed)
        assert commit.written is not None and commit.etag is not None
        return VersionedCheckpoint(commit.written, commit.etag)


@dataclass
class ProcessedBatch:
    """A batch :meth:`TaskInstance.process` ran and :meth:`TaskInstance.commit` commits: its split, the checkpoint
    it started from (and that checkpoint's version tag), its result so far and its output version."""

    split: TaskSplit
    committed: TaskCheckpoint | None
    etag: str | None
    result: BatchResult
    spark_batch_id: int | None
    generation: int
    output_batch: int


def get_instance(engine: EngineJob, split: TaskSplit, *, resident: bool = False) -> TaskInstance:
    """The cached instance of ``split.task`` in this worker process (created on first use): the micro-batch mode's
    way to keep a task's objects between batches that Spark may run in any Python worker.

    ``resident``: the task stays in this process between batches, so its stores stay open after a commit instead
    of being closed for another worker process to open.
    """
    ssps = [SystemStreamPartition.parse(s) for s in split.ssps]
    instance: TaskInstance = WORKER.instance(engine, split.task, lambda: TaskInstance(engine, split.task),
                                             lambda instance: instance.ssps == ssps)
    instance.stores.resident = resident
    return instance


def release_instance(config: Config, task: str) -> None:
    """Close the stores of ``task``'s cached instance (kept committed on disk, reused by the next open)."""
    WORKER.release(config, task)
