"""Reading one partition's offset range ``[start, end)`` as Arrow batches, commit by commit.

Only the commits from ``start.version`` on are read; files that lie entirely before ``start`` or
after ``end`` are skipped by their row counts without being opened. Offsets are computed with Arrow
kernels, not per row in Python.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparza.streams import MessageType
from sparza.systems.delta.exceptions import OffsetRemovedError
from sparza.systems.delta.log import DeltaLog
from sparza.systems.delta.offsets import DeltaOffset
from sparza.systems.delta.retention import oldest_offset, read_horizon
from sparza.systems.delta.schema import READ_SCHEMA

__all__ = ["DEFAULT_BATCH_ROWS", "end_of_stream_batch", "read_partition"]

DEFAULT_BATCH_ROWS = 65_536
"""Rows per yielded batch: small commits are merged up to this many rows, big files split."""


def _with_offsets(table: pa.Table, version: int, first_index: int, partition: int) -> pa.Table:
    n = table.num_rows
    indexes = pa.array(np.arange(first_index, first_index + n, dtype=np.int64)).cast(pa.string())
    offsets = pc.binary_join_element_wise(pa.scalar(f"{version}:"), indexes, "")
    parts = pa.array(np.full(n, partition, dtype=np.int32))
    return pa.Table.from_arrays([offsets, parts, *table.columns], schema=READ_SCHEMA)


def _check_start(log: DeltaLog, partition: int, start: DeltaOffset) -> None:
    """Raise :class:`OffsetRemovedError` when ``start`` lies before what retention kept."""
    horizon = read_horizon(log)
    removed = start.version < horizon
    if not removed and log.commit(start.version) is None:
        present = log.present_versions()
        removed = bool(present) and start.version < present[-1]
    if removed:
        oldest = oldest_offset(log, partition)
        raise OffsetRemovedError(log.location.stream, partition, str(start), None if oldest is None else str(oldest))


def read_partition(log: DeltaLog, partition: int, start: DeltaOffset, end: DeltaOffset | None = None, *,
                   include_control: bool = True, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Rows of ``partition`` with offsets in ``[start, end)`` (``end`` None: up to the newest), in order.

    Raises :class:`OffsetRemovedError` when ``start`` was removed by retention.
    """
    _check_start(log, partition, start)
    last_version = None
    if end is not None:
        if end <= start:
            return
        last_version = end.version if end.index > 0 else end.version - 1
    pending: list[pa.Table] = []
    pending_rows = 0
    for commit in log.commits(start.version, last_version):
        index = 0
        for entry in commit.files_for(partition):
            lo, hi = index, index + entry.rows
            index = hi
            want_lo = max(lo, start.index) if commit.version == start.version else lo
            want_hi = min(hi, end.index) if end is not None and commit.version == end.version else hi
            if want_lo >= want_hi:
                continue
            try:
                table = log.read_file(entry)
            except FileNotFoundError:
                # The file was deleted (truncation racing this read, or an outside vacuum).
                oldest = oldest_offset(log, partition)
                raise OffsetRemovedError(log.location.stream, partition, f"{commit.version}:{want_lo}",
                                         None if oldest is None else str(oldest)) from None
            if want_lo > lo or want_hi < hi:
                table = table.slice(want_lo - lo, want_hi - want_lo)
            table = _with_offsets(table, commit.version, want_lo, partition)
            if not include_control:
                table = table.filter(pc.equal(table.column("type"), MessageType.USER.value))
            if table.num_rows:
                pending.append(table)
                pending_rows += table.num_rows
            if pending_rows >= batch_rows:
                yield from pa.concat_tables(pending).combine_chunks().to_batches(max_chunksize=batch_rows)
                pending, pending_rows = [], 0
    if pending:
        yield from pa.concat_tables(pending).combine_chunks().to_batches(max_chunksize=batch_rows)


def end_of_stream_batch(partition: int, at: DeltaOffset, timestamp_ms: int) -> pa.RecordBatch:
    """One synthetic end-of-stream row at ``at`` (a bounded read reached its end); producer is empty."""
    return pa.RecordBatch.from_arrays(
        [pa.array([str(at)]), pa.array([partition], pa.int32()), pa.array([None], pa.binary()),
         pa.array([None], pa.binary()), pa.array([timestamp_ms], pa.int64()),
         pa.array([MessageType.END_OF_STREAM.value], pa.int8()), pa.array([""])],
        schema=READ_SCHEMA)
