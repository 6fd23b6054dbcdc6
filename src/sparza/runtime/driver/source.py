"""The Spark streaming source of a job: ``spark.readStream.format("sparza")``.

The reader lives on the driver (in Spark's Python source runner): ``latestOffset`` plans each batch
(:class:`~sparza.engine.planner.BatchPlanner`), ``partitions`` gives one :class:`~sparza.engine.split.TaskSplit`
per task, and ``read`` runs on
executors: it runs the task's batch (:func:`sparza.runtime.driver.batchtask.run_split`: the task reads its
SSPs' messages itself, so they never pass through JVM rows, processes and commits them) and yields
the task's result row. ``foreachBatch`` collects those rows. Options: ``config`` (the job config as
JSON, without its secrets), ``tasks``, ``stop_file``, ``generation`` (the fencing generation of every
checkpoint write of this query) and ``task_count`` (tasks of the whole job, for control messages).

**The task checkpoints are the only record of positions.** Each start plans from them (with their open
intents: a task that flushed outputs for a batch it did not commit replays that exact range, see
:mod:`sparza.engine.planner`), whatever Spark's offset log says: Spark's ``start`` offsets are ignored, the
reader plans from the plan it ran last. A batch Spark replays from its offset log after a restart (logged,
not committed) was not planned by this reader: it is planned from the task checkpoints instead of run as
logged, so a log that fell behind the checkpoints (a rewind, a reset, a run in the container mode, tasks
that ran elsewhere) never disagrees with them. Spark's offset log is then only Spark's bookkeeping.

On Spark Connect the client drives the batches itself (:mod:`sparza.runtime.driver.clientloop`) with the same
reader, and each batch is a batch read of this source (:class:`SparzaBatchReader`) whose option
``splits`` holds the batch's task splits; its ``read`` runs each task as the stream reader's does.

The ``config`` option holds no secret: :mod:`sparza.runtime.secrets` ships those as a Spark file, and the
reader merges them back when it first needs the config.

Notes: the reader must stay picklable (Spark ships it); every split is independent; Arrow types
must match :data:`~sparza.engine.results.RESULT_SCHEMA` exactly (PySpark refuses near-misses).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from sparza.config import Config
from sparza.engine.split import TaskSplit

if TYPE_CHECKING:  # executors unpickle this reader to run read(): they never plan
    from sparza.engine.planner import BatchPlan

__all__ = ["SparzaBatchReader", "SparzaDataSource", "SparzaStreamReader"]


class SparzaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Plans batches on the driver and reads each task's input on executors (see the module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.shipped_config = Config(json.loads(options["config"]))
        self.task_filter: list[str] | None = json.loads(options.get("tasks", "null"))
        self.stop_file: str | None = options.get("stop_file") or None
        self.generation = int(options.get("generation", "0"))
        self.task_count = int(options["task_count"]) if options.get("task_count") else None
        self._planner: Any = None
        self._inputs: Any = None
        self._positions: Any = None
        self._monitor: Any = None
        self._config: Config | None = None
        self._position: BatchPlan | None = None
        """The plan the tasks are at as this reader sees it: from the task checkpoints, then each batch's end."""
        self._planned: tuple[str, BatchPlan, BatchPlan] | None = None
        """The batch handed out last: (its end offset as Spark sends it back, its start plan, its end plan)."""

    @property
    def config(self) -> Config:
        """The job config with its secrets merged back (:func:`~sparza.runtime.secrets.resolve_secrets`)."""
        if self._config is None:
            from sparza.runtime.secrets import resolve_secrets

            self._config = resolve_secrets(self.shipped_config)
        return self._config

    # The planner opens admins (Delta logs, Azure clients): build it lazily, never pickle it. Spark ships
    # the reader to executors with read(): never pickle the merged secrets either.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        state["_inputs"] = None
        state["_positions"] = None
        state["_monitor"] = None
        state["_config"] = None
        state["_position"] = None
        state["_planned"] = None
        return state

    def planner(self) -> Any:
        """The batch planner for this processor's tasks."""
        if self._planner is None:
            from sparza.engine.inputs import InputSystems
            from sparza.engine.jobconfig import JobConfig
            from sparza.engine.planner import BatchPlanner

            job = JobConfig.from_config(self.config)
            inputs = InputSystems(job)
            tasks = inputs.task_models()
            if self.task_filter is not None:
                tasks = [t for t in tasks if t.name in set(self.task_filter)]
            self._inputs = inputs

            def positions() -> Any:  # what the planner read last is what the partition check looks at
                self._positions = inputs.positions()
                return self._positions

            self._planner = BatchPlanner(job, tasks, inputs.ops, positions)
        return self._planner

    def _check_partitions(self) -> None:
        """An input whose partition count changed since the planner grouped the tasks stops the query: for good under
        ``job.partition.expansion: fail``; under ``group``/``new-tasks`` the runner starts the query again, whose new
        planner regroups (:mod:`sparza.engine.partitions`). The micro-batch mode plans all tasks in one plan, so
        the query ends between batches."""
        from sparza.engine.errors import RuntimeStateError
        from sparza.engine.partitions import RegroupNeeded, changes_between, check_running, expansion_policy

        inputs = self._inputs
        job = inputs.job
        broadcast = (frozenset(s.stream for s in job.inputs if s.broadcast)
                     - frozenset(s.stream for s in job.inputs if not s.broadcast))
        changes = changes_between(inputs.partition_counts, self._positions or {}, broadcast)
        try:
            check_running(job.job_key, expansion_policy(job.config), changes)
        except RegroupNeeded as exc:
            raise RuntimeStateError(f"{exc}; in job.execution.mode batches the streaming query stops for it and "
                                    "starts again") from exc

    def checkpoint_plan(self) -> BatchPlan:
        """The start plan from the task checkpoints as they are now: their offsets, ``samza.reset.offset``, and a
        replay of each open intent's exact range."""
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.jobconfig import JobConfig

        job = JobConfig.from_config(self.config)
        return self.planner().initial(checkpoint_store_from_config(self.config, job.job_key).read_all())  # type: ignore[no-any-return]

    def initialOffset(self) -> dict:
        """The start plan (Spark asks when its offset log is empty): from the task checkpoints."""
        self._position = self.checkpoint_plan()
        return self._position.to_json()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The next batch's plan, or ``start`` when there is nothing new or a stop was requested; under the job's
        drain request if there is one (read every ``job.drain-monitor.poll.interval.ms``).

        Planned from where this reader's last batch ended (the task checkpoints at the first call), never from
        ``start``: after a restart Spark's ``start`` is its offset log's, which is only its bookkeeping."""
        if self.stop_file and os.path.exists(self.stop_file):
            return start
        if self._position is None:
            self._position = self.checkpoint_plan()
        before = self._position
        after = self._next(before)
        if after is before:
            return start
        body: dict = after.to_json()
        self._planned = (_offset_key(body), before, after)
        return body

    def _next(self, before: BatchPlan) -> BatchPlan:
        planner = self.planner()
        planner.drain = self.drain_monitor().poll()
        planned = planner.next(before, int(time.time() * 1000))
        self._check_partitions()  # on the metadata that plan read: a grown input ends the query before it runs
        return planned  # type: ignore[no-any-return]

    def drain_monitor(self) -> Any:
        """The job's :class:`~sparza.runtime.driver.drainmonitor.DrainMonitor` (built on first use)."""
        if self._monitor is None:
            from sparza.runtime.driver.drainmonitor import DrainMonitor

            self._monitor = DrainMonitor(self.config)
        return self._monitor

    def prepareForTriggerAvailableNow(self) -> None:
        """``--once``: plan only up to what exists now."""
        self.planner().freeze_targets()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One split per task, in task order (:meth:`~sparza.engine.planner.BatchPlanner.splits`), each the value of
        an ``InputPartition``: the batch :meth:`latestOffset` planned up to ``end``.

        Any other ``end`` is a batch Spark replays from its offset log (it logged the batch in an earlier run,
        which ended before committing it): that batch is planned from the task checkpoints now (tasks that
        committed it read on, open intents replay their exact range, the others read from their checkpoint),
        and has no split at all when no task has anything to do."""
        key = _offset_key(end)
        if self._planned is None or self._planned[0] != key:
            before = self.checkpoint_plan()
            self._planned = (key, before, self._next(before))
        _, before, after = self._planned
        self._position = after
        if after is before:
            return []
        return [InputPartition(split) for split in self.planner().splits(before, after)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs on an executor: the task's batch, and its result row (``partition`` is a TaskSplit).

        The task reads its messages itself (:func:`~sparza.engine.worker.read_split`, in this Spark task):
        passing them through Spark would convert every message to a JVM row and back to Arrow, which
        cost more than the task's own processing.
        """
        from sparza.runtime.driver.batchtask import run_split

        split = partition.value
        assert isinstance(split, TaskSplit)
        task_count = self.task_count
        if task_count is None:  # a reader built without the option: count the job's tasks here
            from sparza.engine.inputs import InputSystems
            from sparza.engine.jobconfig import JobConfig

            task_count = self.task_count = len(InputSystems(JobConfig.from_config(self.config)).task_models())
        yield run_split(self.config, split, spark_batch_id=None, generation=self.generation,
                        task_count=task_count)

    def commit(self, end: dict) -> None:
        """Nothing to do: task checkpoints were written by the tasks themselves."""

    def batch_options(self, splits: list[Any]) -> dict[str, str]:
        """The options of a :class:`SparzaBatchReader` that runs ``splits`` as this reader's ``read`` would."""
        options = {"config": json.dumps(dict(self.shipped_config.items())), "generation": str(self.generation),
                   SparzaBatchReader.SPLITS_OPTION: json.dumps([_split(s).to_json().decode() for s in splits])}
        if self.task_count is not None:
            options["task_count"] = str(self.task_count)
        return options


class SparzaBatchReader(DataSourceReader):  # type: ignore[misc]
    """One planned batch as a batch read (Spark Connect's client loop): option ``splits`` is a JSON list of
    :class:`TaskSplit` documents, the others are the stream reader's (:meth:`SparzaStreamReader.batch_options`);
    partition i runs split i's task and yields its result row, as the stream reader's ``read`` does."""

    SPLITS_OPTION = "splits"

    def __init__(self, options: dict[str, str]) -> None:
        self.splits = [TaskSplit.from_json(s.encode()) for s in json.loads(options[self.SPLITS_OPTION])]
        self.stream = SparzaStreamReader(options)

    def partitions(self) -> list[InputPartition]:
        """The batch's splits, in task order (each the value of an ``InputPartition``)."""
        return [InputPartition(split) for split in self.splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs on an executor: the task's batch, and its result row."""
        return self.stream.read(partition)


class SparzaDataSource(DataSource):  # type: ignore[misc]
    """``format("sparza")``: a stream with options ``config`` (JSON of the job config without its secrets),
    ``tasks``, ``stop_file``, ``generation`` and ``task_count``; or one planned batch with the same options
    and ``splits`` (:class:`SparzaBatchReader`)."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "sparza"

    def schema(self) -> str:
        """:data:`~sparza.engine.results.RESULT_SCHEMA`: one result row per task and batch."""
        from sparza.engine.results import RESULT_SCHEMA

        return RESULT_SCHEMA

    def streamReader(self, schema: Any) -> SparzaStreamReader:
        """The reader (one per query)."""
        return SparzaStreamReader(dict(self.options))

    def reader(self, schema: Any) -> SparzaBatchReader:
        """The reader of one planned batch."""
        return SparzaBatchReader(dict(self.options))


def _offset_key(offset: dict) -> str:
    """An offset as a comparable string (Spark sends back the JSON it was given, keys in any order)."""
    return json.dumps(offset, sort_keys=True)


def _split(partition: Any) -> TaskSplit:
    """The task split an ``InputPartition`` of this source carries (or the split itself)."""
    value = partition.value if isinstance(partition, InputPartition) else partition
    assert isinstance(value, TaskSplit)
    return value
