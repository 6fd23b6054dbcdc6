"""What a task reports for each batch: :class:`BatchResult`, defined once, with its one wire form.

A result travels from where the task ran to the driver in one encoding, msgpack through msgspec
(:func:`encode_result` / :func:`decode_result`): inside a container message over the channel
(:mod:`sparza.engine.messages`), or as the one binary column of the micro-batch source's rows
(:data:`RESULT_SCHEMA`). No other form is kept by hand.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec
import pyarrow as pa

__all__ = ["RESULT_ARROW_SCHEMA", "RESULT_SCHEMA", "BatchResult", "BatchStatus", "decode_result", "encode_result",
           "result_from_row", "to_arrow"]


class BatchStatus(enum.Enum):
    """How a task's batch ended, as reported to the driver."""

    COMMITTED = "committed"
    SKIPPED = "skipped"  # a replay of a batch the task checkpoint already holds
    FAILED = "failed"  # a deterministic failure (poison message, task exception): the job stops


class BatchResult(msgspec.Struct, kw_only=False):
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
    metrics: dict[str, Any] = msgspec.field(default_factory=dict)  # the task's registry: MetricsRegistry.changes()
    offsets: dict[str, str] = msgspec.field(default_factory=dict)
    system_metrics: dict[str, Any] = msgspec.field(default_factory=dict)  # the job's producers, consumers, backups
    failed_step: str | None = None
    """A failed commit: the step it failed in (:class:`~sparza.engine.commit.CommitStep` value of the last step done,
    or ``before-intent``), so the status line and the trace say where."""


_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder(BatchResult).decode


def encode_result(result: BatchResult) -> bytes:
    """The result's one wire form (msgpack)."""
    return _ENCODE(result)


def decode_result(data: bytes) -> BatchResult:
    """Inverse of :func:`encode_result`."""
    return _DECODE(data)


RESULT_SCHEMA = "result binary"
"""The micro-batch source's rows: one per task and batch, the :func:`encode_result` form."""

RESULT_ARROW_SCHEMA = pa.schema([("result", pa.binary())])


def to_arrow(result: BatchResult) -> pa.RecordBatch:
    """A result as its one-row record batch (:data:`RESULT_ARROW_SCHEMA`)."""
    return pa.RecordBatch.from_arrays([pa.array([encode_result(result)], pa.binary())], schema=RESULT_ARROW_SCHEMA)


def result_from_row(row: Any) -> BatchResult:
    """A driver-side :class:`BatchResult` from a collected result row."""
    return decode_result(bytes(row["result"]))
