"""The task runtime on Spark: Samza's task model executed by Spark Structured Streaming.

A job is one streaming query per processor: :class:`SparzaDataSource` plans each batch on the
driver and runs every task on executors, in the source's ``read`` (the task reads its own input);
``foreachBatch`` collects one result row per task. Tasks restore their stores, process, flush
producers idempotently, back up their stores and write their task checkpoint. See ``docs/runtime.md``.
"""

from __future__ import annotations

from sparza.engine.checkpoint import (
    AzureCheckpointStore,
    CheckpointStore,
    Intent,
    LocalCheckpointStore,
    TaskCheckpoint,
    VersionedCheckpoint,
    checkpoint_store_from_config,
)
from sparza.engine.errors import (
    CheckpointConflictError,
    CheckpointFencedError,
    JobFailedError,
    ProcessingError,
    RuntimeStateError,
)
from sparza.engine.jobconfig import InputSpec, JobConfig
from sparza.engine.model import TaskModel, build_task_models, task_name
from sparza.engine.planner import BatchPlanner
from sparza.runtime.driver.report import EXIT_CODES, RunOutcome
from sparza.runtime.driver.runner import JobRunner, build_spark_session
from sparza.runtime.driver.source import SparzaDataSource

__all__ = [
    "EXIT_CODES",
    "AzureCheckpointStore",
    "BatchPlanner",
    "CheckpointConflictError",
    "CheckpointFencedError",
    "CheckpointStore",
    "InputSpec",
    "Intent",
    "JobConfig",
    "JobFailedError",
    "JobRunner",
    "LocalCheckpointStore",
    "ProcessingError",
    "RunOutcome",
    "RuntimeStateError",
    "SparzaDataSource",
    "TaskCheckpoint",
    "TaskModel",
    "VersionedCheckpoint",
    "build_spark_session",
    "build_task_models",
    "checkpoint_store_from_config",
    "task_name",
]
