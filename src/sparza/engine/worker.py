"""What a Python worker keeps between the micro-batches Spark runs in it, and reading a task's input.

Spark reuses Python workers across batches, so a worker keeps what is expensive to rebuild: per job an
:class:`~sparza.engine.job.EngineJob` (its parsed config, admins, checkpoint store, producers and consumers) and
the task instances (with their in-memory task and stores). :class:`WorkerCaches` is their one owner. It keeps the
objects of the few most recently used job configs only, so a long-lived worker that served many jobs (tests, a
shared cluster) does not grow without bound. A container (:mod:`sparza.engine.container`) keeps its own jobs and
tasks instead: it knows when they arrive and leave.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from sparza.config import Config
from sparza.engine.job import EngineJob, JobClients
from sparza.engine.split import SOURCE_ARROW_SCHEMA, TaskSplit
from sparza.metrics import MetricsRegistry
from sparza.streams import SystemStreamPartition
from sparza.systems import MessageRows, SupportsArrowRead, SupportsRowRead
from sparza.systems.rows import arrow_rows, envelope_rows

__all__ = ["WORKER", "SplitInput", "WorkerCaches", "config_key", "read_split", "read_split_rows"]


def config_key(config: Config) -> str:
    """A stable identity of a job config in this process (its sorted items)."""
    return repr(sorted(config.items()))


class _JobObjects:
    """What the worker keeps for one job config."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.engine: EngineJob | None = None
        self.clients = JobClients(config)
        self.instances: dict[str, Any] = {}

    def close(self) -> None:
        self.clients.close()


class WorkerCaches:
    """The per-process owner of cached jobs and task instances (see the module docstring)."""

    def __init__(self, max_jobs: int = 8) -> None:
        self.max_jobs = max_jobs
        self._jobs: OrderedDict[str, _JobObjects] = OrderedDict()

    def _job(self, config: Config) -> _JobObjects:
        key = config_key(config)
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = _JobObjects(config)
            while len(self._jobs) > self.max_jobs:
                _, evicted = self._jobs.popitem(last=False)
                evicted.close()
        else:
            self._jobs.move_to_end(key)
        return job

    def engine_job(self, config: Config, task_count: int) -> EngineJob:
        """The job of ``config`` in this worker (built on first use, with ``task_count`` tasks)."""
        objects = self._job(config)
        if objects.engine is None or objects.engine.task_count != task_count:
            objects.engine = EngineJob(config, task_count=task_count, clients=objects.clients)
        return objects.engine

    def forget(self, config: Config) -> None:
        """Drop (and stop) everything kept for ``config``: what a restarted worker process would have lost."""
        job = self._jobs.pop(config_key(config), None)
        if job is not None:
            job.close()

    def instance(self, engine: EngineJob, task: str, build: Callable[[], Any], fits: Callable[[Any], bool]) -> Any:
        """The cached instance of ``task``, or ``build()`` when there is none or it no longer ``fits``."""
        job = self._job(engine.config)
        instance = job.instances.get(task)
        if instance is None or not fits(instance) or instance.engine is not engine:
            instance = job.instances[task] = build()
        return instance

    def release(self, config: Config, task: str) -> None:
        """Close the open stores of ``task``'s cached instance (they stay committed on disk)."""
        job = self._jobs.get(config_key(config))
        instance = job.instances.get(task) if job is not None else None
        if instance is not None:
            instance.stores.close_committed()

    def metrics(self, config: Config) -> MetricsRegistry:
        """The registry of the job's long-lived objects in this worker (producers, consumers, store backups)."""
        return self._job(config).clients.metrics


WORKER = WorkerCaches()
"""This process's caches."""


def _envelopes_to_arrow(envelopes: Iterator[Any], rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """For systems without ``read_arrow``: envelopes (bytes key/message) to record batches."""
    buf: dict[str, list[Any]] = {n: [] for n in ("offset", "key", "value", "timestamp", "type", "producer")}
    for env in envelopes:
        buf["offset"].append(env.offset)
        buf["key"].append(env.key)
        buf["value"].append(env.message)
        buf["timestamp"].append(env.timestamp)
        buf["type"].append(int(env.type))
        buf["producer"].append(None)
        if len(buf["offset"]) >= rows:
            yield pa.RecordBatch.from_pydict(buf)
            buf = {n: [] for n in buf}
    if buf["offset"]:
        yield pa.RecordBatch.from_pydict(buf)


def read_split(clients: JobClients, split: TaskSplit) -> Iterator[pa.RecordBatch]:
    """Every message of a task's batch: each SSP's messages in ``[start, end)``, in the split's SSP order.

    Runs in the Python worker that runs the task (see :mod:`sparza.engine.executor`), so messages go
    from storage to the task as Arrow with no detour through the JVM.
    """
    for i, (name, start, end) in enumerate(zip(split.ssps, split.starts, split.ends, strict=True)):
        if start == end:
            continue
        ssp = SystemStreamPartition.parse(name)
        consumer = clients.consumer(ssp.system)
        if isinstance(consumer, SupportsArrowRead):
            batches = consumer.read_arrow(ssp, start, end, include_control=True, bounded=False)
        else:
            batches = _envelopes_to_arrow(consumer.read(ssp, start, end))
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            yield pa.RecordBatch.from_arrays([
                pa.repeat(pa.scalar(split.index, pa.int32()), n),
                pa.repeat(pa.scalar(i, pa.int32()), n),
                batch.column("offset").cast(pa.string()),
                batch.column("key").cast(pa.binary()),
                batch.column("value").cast(pa.binary()),
                batch.column("timestamp").cast(pa.int64()),
                batch.column("type").cast(pa.int8()),
                batch.column("producer").cast(pa.string()),
            ], schema=SOURCE_ARROW_SCHEMA)




def read_split_rows(clients: JobClients, split: TaskSplit) -> Iterator[tuple[int, MessageRows]]:
    """The messages :func:`read_split` reads, as ``(SSP index, column lists)`` runs of one SSP each, in the same
    order: what a per-message task's envelopes are built from. A consumer that reads column lists itself
    (:class:`~sparza.systems.SupportsRowRead`: Kafka, whose messages are Python objects) builds no Arrow at all;
    an Arrow reader's batches are taken apart once here, without the SSP-index column and casts of the batch
    path."""
    for i, (name, start, end) in enumerate(zip(split.ssps, split.starts, split.ends, strict=True)):
        if start == end:
            continue
        ssp = SystemStreamPartition.parse(name)
        consumer = clients.consumer(ssp.system)
        chunks: Iterator[MessageRows]
        if isinstance(consumer, SupportsRowRead):
            chunks = consumer.read_rows(ssp, start, end, include_control=True, bounded=False)
        elif isinstance(consumer, SupportsArrowRead):
            chunks = (arrow_rows(batch) for batch in consumer.read_arrow(ssp, start, end, include_control=True,
                                                                          bounded=False) if batch.num_rows)
        else:
            chunks = envelope_rows(consumer.read(ssp, start, end))
        for chunk in chunks:
            if chunk.offsets:
                yield i, chunk


class SplitInput:
    """A task's batch input, read lazily (storage is read as the task asks for it) in the shape its task takes:
    iterated, Arrow record batches (:func:`read_split`: a batch task's ``process_batch``); :meth:`rows`, column lists
    per SSP (:func:`read_split_rows`: a per-message task's envelopes, no Arrow built or taken apart)."""

    __slots__ = ("clients", "split")

    def __init__(self, clients: JobClients, split: TaskSplit) -> None:
        self.clients = clients
        self.split = split

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return read_split(self.clients, self.split)

    def rows(self) -> Iterator[tuple[int, MessageRows]]:
        """The messages as ``(SSP index, column lists)``."""
        return read_split_rows(self.clients, self.split)
