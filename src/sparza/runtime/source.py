"""The Spark streaming source of a job: ``spark.readStream.format("sparza")``.

The reader lives on the driver (in Spark's Python source runner): ``initialOffset`` starts from
the task checkpoints, ``latestOffset`` plans each batch (:class:`~sparza.runtime.planner.BatchPlanner`),
``partitions`` gives one :class:`TaskSplit` per task, and ``read`` runs on executors and yields
one *marker* row per task describing the task's batch (seq, planned_at, start and end offsets,
which SSPs ended). The task then reads its SSPs' messages itself with :func:`read_split`, in the
same Spark task, so messages never pass through JVM rows.

Notes: the reader must stay picklable (Spark ships it); every split is independent; Arrow types
must match :data:`SOURCE_SCHEMA` exactly (PySpark refuses near-misses).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from sparza.config import Config
from sparza.streams import MessageType, SystemStreamPartition
from sparza.systems import SupportsArrowRead

__all__ = [
    "MARKER_SSP",
    "SOURCE_ARROW_SCHEMA",
    "SOURCE_SCHEMA",
    "SparzaDataSource",
    "SparzaStreamReader",
    "TaskSplit",
    "marker_batch",
    "read_split",
]

SOURCE_SCHEMA = ("task int, ssp int, offset string, key binary, value binary, timestamp bigint, type tinyint, "
                 "producer string")
"""Rows the source yields: ``task`` is the split index, ``ssp`` the index into the task's SSP list."""

SOURCE_ARROW_SCHEMA = pa.schema([
    ("task", pa.int32()), ("ssp", pa.int32()), ("offset", pa.string()), ("key", pa.binary()),
    ("value", pa.binary()), ("timestamp", pa.int64()), ("type", pa.int8()), ("producer", pa.string()),
])

MARKER_SSP = -1
"""``ssp`` value of the marker row that opens every task's rows (its ``value`` is the TaskSplit JSON)."""


@dataclass
class TaskSplit(InputPartition):  # type: ignore[misc]
    """What one task reads in one batch: ``starts``/``ends`` per SSP (same order as ``ssps``)."""

    index: int
    task: str
    seq: int
    planned_at: int
    ssps: list[str]
    starts: list[str]
    ends: list[str]
    ended: bool
    bounded_ends: dict[str, str] = field(default_factory=dict)

    def start_offsets(self) -> dict[str, str]:
        """``{ssp: start offset}`` of this batch."""
        return dict(zip(self.ssps, self.starts, strict=True))

    def end_offsets(self) -> dict[str, str]:
        """``{ssp: end offset}`` of this batch: where the task's checkpoint will be after it."""
        return dict(zip(self.ssps, self.ends, strict=True))

    def to_json(self) -> bytes:
        """The marker row's payload."""
        return json.dumps({"index": self.index, "task": self.task, "seq": self.seq, "planned_at": self.planned_at,
                           "ssps": self.ssps, "starts": self.starts, "ends": self.ends, "ended": self.ended,
                           "bounded_ends": self.bounded_ends}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TaskSplit:
        """Parse a marker row's payload."""
        body = json.loads(data)
        return cls(**body)


_CONSUMERS: dict[tuple[int, str], Any] = {}


def _consumer(config: Config, system: str) -> Any:
    """A consumer per (config, system), cached in the worker process (consumers cache Delta logs)."""
    key = (hash(config), system)
    consumer = _CONSUMERS.get(key)
    if consumer is None:
        from sparza.systems import get_system_factory

        consumer = get_system_factory(config, system).get_consumer(system, config)
        consumer.start()
        _CONSUMERS[key] = consumer
    return consumer


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


def marker_batch(split: TaskSplit) -> pa.RecordBatch:
    """The one row the source yields per task and batch: the split as JSON in ``value``."""
    return pa.RecordBatch.from_arrays(
        [pa.array([split.index], pa.int32()), pa.array([MARKER_SSP], pa.int32()), pa.array([""]),
         pa.array([None], pa.binary()), pa.array([split.to_json()], pa.binary()),
         pa.array([split.planned_at], pa.int64()), pa.array([int(MessageType.USER)], pa.int8()),
         pa.array([None], pa.string())], schema=SOURCE_ARROW_SCHEMA)


def read_split(config: Config, split: TaskSplit) -> Iterator[pa.RecordBatch]:
    """Every message of a task's batch: each SSP's messages in ``[start, end)``, in the split's SSP order.

    Runs in the Python worker that runs the task (see :mod:`sparza.runtime.executor`), so messages go
    from storage to the task as Arrow with no detour through the JVM.
    """
    for i, (name, start, end) in enumerate(zip(split.ssps, split.starts, split.ends, strict=True)):
        if start == end:
            continue
        ssp = SystemStreamPartition.parse(name)
        consumer = _consumer(config, ssp.system)
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


class SparzaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Plans batches on the driver and reads each task's input on executors (see the module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.config = Config(json.loads(options["config"]))
        self.task_filter: list[str] | None = json.loads(options.get("tasks", "null"))
        self.stop_file: str | None = options.get("stop_file") or None
        self._planner: Any = None

    # The planner opens admins (Delta logs, Azure clients): build it lazily, never pickle it.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    def planner(self) -> Any:
        """The batch planner for this processor's tasks."""
        if self._planner is None:
            from sparza.runtime.inputs import InputSystems
            from sparza.runtime.jobconfig import JobConfig
            from sparza.runtime.planner import BatchPlanner

            job = JobConfig.from_config(self.config)
            inputs = InputSystems(job)
            tasks = inputs.task_models()
            if self.task_filter is not None:
                tasks = [t for t in tasks if t.name in set(self.task_filter)]
            self._planner = BatchPlanner(job, tasks, inputs.ops, inputs.positions)
        return self._planner

    def initialOffset(self) -> dict:
        """The start plan: from the task checkpoints (so tasks can move between processors)."""
        from sparza.runtime.checkpoint import checkpoint_store_from_config
        from sparza.runtime.jobconfig import JobConfig

        job = JobConfig.from_config(self.config)
        checkpoints = checkpoint_store_from_config(self.config, job.job_key).read_all()
        return self.planner().initial(checkpoints).to_json()  # type: ignore[no-any-return]

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The next batch's plan (``start`` when there is nothing new, or a stop was requested)."""
        if self.stop_file and os.path.exists(self.stop_file):
            return start
        from sparza.runtime.planner import BatchPlan

        planned = self.planner().next(BatchPlan.from_json(start), int(time.time() * 1000))
        return planned.to_json()  # type: ignore[no-any-return]

    def prepareForTriggerAvailableNow(self) -> None:
        """``--once``: plan only up to what exists now."""
        self.planner().freeze_targets()

    def partitions(self, start: dict, end: dict) -> list[TaskSplit]:
        """One split per task, in task order."""
        from sparza.runtime.planner import BatchPlan

        planner = self.planner()
        before, after = BatchPlan.from_json(start), BatchPlan.from_json(end)
        splits = []
        for i, task in enumerate(planner.tasks):
            was = before.task(task.name).offsets
            now = after.tasks[task.name]
            names = task.ssp_keys()
            bounded = {str(s): planner.bounded_end(s) for s in task.ssps if planner.bounded_end(s) is not None}
            if now.bounded_ends is not None:  # a replayed intent decides end-of-stream as its first attempt did
                bounded = {k: v for k, v in now.bounded_ends.items() if k in bounded}
            splits.append(TaskSplit(
                index=i, task=task.name, seq=after.seq,
                planned_at=now.planned_at_ms if now.planned_at_ms is not None else after.planned_at_ms, ssps=names,
                starts=[was.get(n, now.offsets[n]) for n in names],
                ends=[now.offsets[n] for n in names], ended=now.ended, bounded_ends=bounded))
        return splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs on an executor: the task's marker row (``partition`` is a TaskSplit).

        The task reads its messages itself (:func:`read_split`, in the same Spark task): passing
        them through Spark would convert every message to a JVM row and back to Arrow, which cost
        more than the task's own processing.
        """
        assert isinstance(partition, TaskSplit)
        yield marker_batch(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: task checkpoints were written by the tasks themselves."""


class SparzaDataSource(DataSource):  # type: ignore[misc]
    """``format("sparza")`` with options ``config`` (JSON of the job config), ``tasks`` and ``stop_file``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "sparza"

    def schema(self) -> str:
        """:data:`SOURCE_SCHEMA`."""
        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> SparzaStreamReader:
        """The reader (one per query)."""
        return SparzaStreamReader(dict(self.options))
