"""The function ``df.mapInArrow`` runs per Spark partition: run the task whose rows it holds.

Spark partition i of a batch holds the marker row ``read()`` produced for task split i (narrow
plan, no shuffle); the function reads the task's messages in the same Spark task and runs it. It
returns one small row per task: commit info and metrics for the driver.

Deterministic task failures (a poison message, a task exception) come back as a ``failed`` row,
so the driver stops the job with the SSP and offset instead of Spark retrying the same failure.
Anything else (storage, a crash) raises: Spark retries the task, and the retry is exact because
outputs are idempotent per (job, task, batch) and the checkpoint is written last.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from sparza.config import Config
from sparza.runtime.commit import BatchStatus
from sparza.runtime.errors import ProcessingError
from sparza.runtime.instance import BatchResult, get_instance
from sparza.runtime.jobconfig import JobConfig
from sparza.runtime.split import split_from_marker
from sparza.runtime.worker import read_split

__all__ = ["RESULT_ARROW_SCHEMA", "RESULT_SCHEMA", "make_task_runner", "result_from_row"]

RESULT_SCHEMA = ("task string, seq bigint, status string, messages bigint, processed bigint, dropped bigint, "
                 "ignored bigint, late bigint, late_routed bigint, ended boolean, shutdown boolean, process_ms double, "
                 "commit_ms double, "
                 "error string, metrics string, offsets string")
"""What each task returns to the driver (one row per task per batch)."""

RESULT_ARROW_SCHEMA = pa.schema([
    ("task", pa.string()), ("seq", pa.int64()), ("status", pa.string()), ("messages", pa.int64()),
    ("processed", pa.int64()), ("dropped", pa.int64()), ("ignored", pa.int64()), ("late", pa.int64()),
    ("late_routed", pa.int64()), ("ended", pa.bool_()),
    ("shutdown", pa.bool_()), ("process_ms", pa.float64()), ("commit_ms", pa.float64()), ("error", pa.string()),
    ("metrics", pa.string()), ("offsets", pa.string()),
])


def _to_batch(result: BatchResult) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{
        "task": result.task, "seq": result.seq, "status": result.status.value, "messages": result.messages,
        "processed": result.processed, "dropped": result.dropped, "ignored": result.ignored,
        "late": result.late, "late_routed": result.late_routed,
        "ended": result.ended, "shutdown": result.shutdown, "process_ms": result.process_ms,
        "commit_ms": result.commit_ms, "error": result.error, "metrics": json.dumps(result.metrics, default=str),
        "offsets": json.dumps(result.offsets),
    }], schema=RESULT_ARROW_SCHEMA)


def result_from_row(row: Any) -> BatchResult:
    """A driver-side :class:`BatchResult` from a collected result row."""
    return BatchResult(task=row["task"], seq=int(row["seq"]), status=BatchStatus(row["status"]),
                       messages=int(row["messages"]),
                       processed=int(row["processed"]), dropped=int(row["dropped"]), ignored=int(row["ignored"]),
                       late=int(row["late"]), late_routed=int(row["late_routed"]),
                       ended=bool(row["ended"]), shutdown=bool(row["shutdown"]),
                       process_ms=float(row["process_ms"]), commit_ms=float(row["commit_ms"]), error=row["error"],
                       metrics=json.loads(row["metrics"] or "{}"), offsets=json.loads(row["offsets"] or "{}"))


def make_task_runner(config_values: dict[str, str], spark_batch_id: int, generation: int,
                     task_count: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one batch (a picklable closure over plain values)."""

    def run_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        split, rest = split_from_marker(batches)
        if split is None:
            return
        for _ in rest:  # the source yields only the marker
            pass
        config = Config(config_values)
        rows = read_split(config, split)
        job = JobConfig.from_config(config)
        instance = get_instance(job, split, task_count)
        try:
            result = instance.run_batch(split, rows, spark_batch_id=spark_batch_id, generation=generation)
        except ProcessingError as exc:
            result = BatchResult(split.task, split.seq, BatchStatus.FAILED, error=str(exc))
        yield _to_batch(result)

    return run_tasks
