"""What a task reports to the driver for each batch: the contract between the two sides of the runtime.

A batch's :class:`BatchResult` travels as one Arrow row (:data:`RESULT_ARROW_SCHEMA`; the micro-batch mode's
source yields it, ``foreachBatch`` collects it) or as JSON over the container channel
(:mod:`sparza.runtime.channel`). Both forms are defined here, next to the result itself.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = ["RESULT_ARROW_SCHEMA", "RESULT_SCHEMA", "BatchResult", "BatchStatus", "result_from_row", "to_arrow"]


class BatchStatus(enum.Enum):
    """How a task's batch ended, as reported to the driver."""

    COMMITTED = "committed"
    SKIPPED = "skipped"  # a replay of a batch the task checkpoint already holds
    FAILED = "failed"  # a deterministic failure (poison message, task exception): the job stops


@dataclass
class BatchResult:
    """What a task reports to the driver for one batch."""

    task: str
    batch: int
    status: BatchStatus
    messages: int = 0
    processed: int = 0
    dropped: int = 0
    ignored: int = 0
    late: int = 0  # messages event-time operators found late (their windows had fired): dropped or routed
    late_routed: int = 0  # of those, routed to task.late.messages.stream
    ended: bool = False
    drained: bool = False  # the task completed the drain its batch ran under (see sparza.engine.drain)
    shutdown: bool = False
    process_ms: float = 0.0
    commit_ms: float = 0.0
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # the task's registry: MetricsRegistry.changes()
    offsets: dict[str, str] = field(default_factory=dict)
    system_metrics: dict[str, Any] = field(default_factory=dict)  # the worker's producers, consumers, backups


RESULT_SCHEMA = ("task string, batch bigint, status string, messages bigint, processed bigint, dropped bigint, "
                 "ignored bigint, late bigint, late_routed bigint, ended boolean, drained boolean, shutdown boolean, "
                 "process_ms double, "
                 "commit_ms double, "
                 "error string, metrics string, offsets string, system_metrics string")
"""What each task returns to the driver (one row per task per batch)."""

RESULT_ARROW_SCHEMA = pa.schema([
    ("task", pa.string()), ("batch", pa.int64()), ("status", pa.string()), ("messages", pa.int64()),
    ("processed", pa.int64()), ("dropped", pa.int64()), ("ignored", pa.int64()), ("late", pa.int64()),
    ("late_routed", pa.int64()), ("ended", pa.bool_()), ("drained", pa.bool_()),
    ("shutdown", pa.bool_()), ("process_ms", pa.float64()), ("commit_ms", pa.float64()), ("error", pa.string()),
    ("metrics", pa.string()), ("offsets", pa.string()), ("system_metrics", pa.string()),
])


def to_arrow(result: BatchResult) -> pa.RecordBatch:
    """A result as its one-row record batch (:data:`RESULT_ARROW_SCHEMA`)."""
    return pa.RecordBatch.from_pylist([{
        "task": result.task, "batch": result.batch, "status": result.status.value, "messages": result.messages,
        "processed": result.processed, "dropped": result.dropped, "ignored": result.ignored,
        "late": result.late, "late_routed": result.late_routed,
        "ended": result.ended, "drained": result.drained, "shutdown": result.shutdown, "process_ms": result.process_ms,
        "commit_ms": result.commit_ms, "error": result.error, "metrics": json.dumps(result.metrics, default=str),
        "offsets": json.dumps(result.offsets), "system_metrics": json.dumps(result.system_metrics, default=str),
    }], schema=RESULT_ARROW_SCHEMA)


def result_from_row(row: Any) -> BatchResult:
    """A driver-side :class:`BatchResult` from a collected result row."""
    return BatchResult(task=row["task"], batch=int(row["batch"]), status=BatchStatus(row["status"]),
                       messages=int(row["messages"]),
                       processed=int(row["processed"]), dropped=int(row["dropped"]), ignored=int(row["ignored"]),
                       late=int(row["late"]), late_routed=int(row["late_routed"]),
                       ended=bool(row["ended"]), drained=bool(row["drained"]), shutdown=bool(row["shutdown"]),
                       process_ms=float(row["process_ms"]), commit_ms=float(row["commit_ms"]), error=row["error"],
                       metrics=json.loads(row["metrics"] or "{}"), offsets=json.loads(row["offsets"] or "{}"),
                       system_metrics=json.loads(row["system_metrics"] or "{}"))


