"""The document a batch hands from the driver to each task: :class:`TaskSplit`, carried as a marker row.

The driver's source (:mod:`sparza.runtime.driver.source`) plans the batch and yields, per task, one
*marker* row whose ``value`` is the task's split as JSON; the executor side
(:mod:`sparza.engine.worker`) takes it off the front of the task's rows and reads the messages
itself. This module is the only thing both sides share.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparza.engine.errors import RuntimeStateError
from sparza.streams import MessageType

__all__ = ["MARKER_SSP", "SOURCE_ARROW_SCHEMA", "SOURCE_SCHEMA", "TaskSplit", "marker_batch", "split_from_marker"]

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
class TaskSplit:
    """What one task reads in one batch: ``starts``/``ends`` per SSP (same order as ``ssps``)."""

    index: int
    task: str
    batch: int
    planned_at: int
    ssps: list[str]
    starts: list[str]
    ends: list[str]
    ended: bool
    bounded_ends: dict[str, str] = field(default_factory=dict)
    reset: list[str] = field(default_factory=list)
    """SSPs that start at ``samza.offset.default`` instead of the task checkpoint (``samza.reset.offset``)."""
    drain: dict[str, Any] | None = None
    """The drain this batch runs under: ``{"id": <drain id>, "unreached": [source SSPs not yet at the end offset
    observed at the drain's request]}``; None: no drain (:mod:`sparza.engine.drain`)."""

    def start_offsets(self) -> dict[str, str]:
        """``{ssp: start offset}`` of this batch."""
        return dict(zip(self.ssps, self.starts, strict=True))

    def end_offsets(self) -> dict[str, str]:
        """``{ssp: end offset}`` of this batch: where the task's checkpoint will be after it."""
        return dict(zip(self.ssps, self.ends, strict=True))

    def to_json(self) -> bytes:
        """The marker row's payload."""
        return json.dumps({"index": self.index, "task": self.task, "batch": self.batch, "planned_at": self.planned_at,
                           "ssps": self.ssps, "starts": self.starts, "ends": self.ends, "ended": self.ended,
                           "bounded_ends": self.bounded_ends, "reset": self.reset, "drain": self.drain},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TaskSplit:
        """Parse a marker row's payload."""
        body = json.loads(data)
        return cls(**body)


def marker_batch(split: TaskSplit) -> pa.RecordBatch:
    """The one row the source yields per task and batch: the split as JSON in ``value``."""
    return pa.RecordBatch.from_arrays(
        [pa.array([split.index], pa.int32()), pa.array([MARKER_SSP], pa.int32()), pa.array([""]),
         pa.array([None], pa.binary()), pa.array([split.to_json()], pa.binary()),
         pa.array([split.planned_at], pa.int64()), pa.array([int(MessageType.USER)], pa.int8()),
         pa.array([None], pa.string())], schema=SOURCE_ARROW_SCHEMA)


def split_from_marker(batches: Iterable[pa.RecordBatch]) -> tuple[TaskSplit | None, Iterator[pa.RecordBatch]]:
    """Take the marker row off the front of a task's rows: its split and the rest of the rows."""
    iterator = iter(batches)
    for first in iterator:
        if first.num_rows == 0:
            continue
        ssp_col = first.column("ssp")
        if ssp_col[0].as_py() != MARKER_SSP:
            raise RuntimeStateError("a task's rows did not start with the batch marker (partitioning changed?)")
        split = TaskSplit.from_json(first.column("value")[0].as_py())
        return split, _chain(first.slice(1), iterator)
    return None, iter(())


def _chain(head: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if head.num_rows:
        yield head
    yield from rest
