"""Reading one partition's offset range ``[start, end)`` as Arrow batches, commit by commit.

Only the commits from ``start.version`` on are read; files that lie entirely before ``start`` or
after ``end`` are skipped by their row counts without being opened. Offsets are computed with Arrow
kernels, not per row in Python.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparza.streams import MessageType
from sparza.systems.delta.errors import OffsetRemovedError
from sparza.systems.delta.log import DeltaLog, FileEntry, io_pool
from sparza.systems.delta.offsets import DeltaOffset
from sparza.systems.delta.retention import oldest_offset, read_horizon
from sparza.systems.delta.schema import READ_SCHEMA

__all__ = ["DEFAULT_BATCH_ROWS", "read_partition"]

DEFAULT_BATCH_ROWS = 65_536
"""Rows per yielded batch: small commits are merged up to this many rows, big files split."""

_MERGE_BELOW_ROWS = 8_192
"""Pieces averaging fewer rows than this are merged into contiguous batches."""


def _with_offsets(pieces: list[tuple[pa.Table, int, int]], partition: int) -> pa.Table:
    """Concatenate file pieces ``(rows, version, first index)`` and prepend ``offset`` and ``partition``.

    Offsets are built with Arrow kernels per piece, never per row in Python.
    """
    n = sum(t.num_rows for t, _, _ in pieces)
    # "<version>:" is one scalar per piece; only the indexes are formatted per row (in C++).
    chunks = [pc.binary_join_element_wise(pa.scalar(f"{version}:"),
                                          pa.array(np.arange(first, first + t.num_rows, dtype=np.int64))
                                          .cast(pa.string()), "")
              for t, version, first in pieces]
    offsets: pa.Array | pa.ChunkedArray = chunks[0] if len(chunks) == 1 else pa.chunked_array(chunks)
    data = pieces[0][0] if len(pieces) == 1 else pa.concat_tables([t for t, _, _ in pieces])
    if data.num_columns and data.column(0).num_chunks > 1 and n < _MERGE_BELOW_ROWS * len(pieces):
        # Many small pieces become one contiguous batch (cheap to copy, costly to hand over one by one);
        # big pieces stay as they are: copying their values would cost more than it saves.
        data = data.combine_chunks()
        offsets = offsets.combine_chunks() if isinstance(offsets, pa.ChunkedArray) else offsets
    parts = pa.chunked_array([pa.array(np.full(t.num_rows, partition, dtype=np.int32)) for t, _, _ in pieces]) \
        if isinstance(offsets, pa.ChunkedArray) else pa.array(np.full(n, partition, dtype=np.int32))
    return pa.Table.from_arrays([offsets, parts, *data.columns], schema=READ_SCHEMA)


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


def _pieces(log: DeltaLog, partition: int, start: DeltaOffset, end: DeltaOffset | None,
            last_version: int | None) -> Iterator[tuple[int, FileEntry, int, int, int]]:
    """(version, file, first index of the file, wanted lo, wanted hi) for every file with wanted rows."""
    for commit in log.commits(start.version, last_version):
        index = 0
        for entry in commit.files_for(partition):
            lo, hi = index, index + entry.rows
            index = hi
            want_lo = max(lo, start.index) if commit.version == start.version else lo
            want_hi = min(hi, end.index) if end is not None and commit.version == end.version else hi
            if want_lo < want_hi:
                yield commit.version, entry, lo, want_lo, want_hi


def _prefetched(log: DeltaLog, pieces: Iterator[tuple[int, FileEntry, int, int, int]],
                ahead: int) -> Iterator[tuple[tuple[int, FileEntry, int, int, int], Future[pa.Table]]]:
    """The pieces with their file reads started up to ``ahead`` files early, in order."""
    pending: deque[tuple[tuple[int, FileEntry, int, int, int], Future[pa.Table]]] = deque()
    pool = io_pool()
    try:
        for piece in pieces:
            pending.append((piece, pool.submit(log.read_file, piece[1])))
            if len(pending) > ahead:
                yield pending.popleft()
        while pending:
            yield pending.popleft()
    finally:
        for _, future in pending:
            future.cancel()


def read_partition(log: DeltaLog, partition: int, start: DeltaOffset, end: DeltaOffset | None = None, *,
                   include_control: bool = True, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Rows of ``partition`` with offsets in ``[start, end)`` (``end`` None: up to the newest), in order.

    On object stores files are read ahead in a thread pool; batches are yielded in
    offset order. Raises :class:`OffsetRemovedError` when ``start`` was removed by retention.
    """
    _check_start(log, partition, start)
    last_version = None
    if end is not None:
        if end <= start:
            return
        last_version = end.version if end.index > 0 else end.version - 1
    pending: list[tuple[pa.Table, int, int]] = []
    pending_rows = 0
    for (version, entry, lo, want_lo, want_hi), table in _read(log, _pieces(log, partition, start, end, last_version)):
        if table is None:
            # The file was deleted (truncation racing this read, or an outside vacuum).
            oldest = oldest_offset(log, partition)
            raise OffsetRemovedError(log.location.stream, partition, f"{version}:{want_lo}",
                                     None if oldest is None else str(oldest))
        if want_lo > lo or want_hi < lo + entry.rows:
            table = table.slice(want_lo - lo, want_hi - want_lo)
        if not include_control:
            keep = pc.equal(table.column("type"), MessageType.USER.value)
            if not pc.all(keep).as_py():
                # Control rows keep their offsets: split into runs of user rows around them.
                yield from _flush(pending, partition, batch_rows)
                pending, pending_rows = [], 0
                yield from _users_only(table, version, want_lo, partition)
                continue
        pending.append((table, version, want_lo))
        pending_rows += table.num_rows
        if pending_rows >= batch_rows:
            yield from _flush(pending, partition, batch_rows)
            pending, pending_rows = [], 0
    yield from _flush(pending, partition, batch_rows)


def _flush(pending: list[tuple[pa.Table, int, int]], partition: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
    if pending:
        yield from _with_offsets(pending, partition).to_batches(max_chunksize=batch_rows)


def _users_only(table: pa.Table, version: int, first: int, partition: int) -> Iterator[pa.RecordBatch]:
    """The user rows of one file piece with their own offsets (control rows dropped)."""
    with_offsets = _with_offsets([(table, version, first)], partition)
    kept = with_offsets.filter(pc.equal(with_offsets.column("type"), MessageType.USER.value))
    if kept.num_rows:
        yield from kept.to_batches()


def _read(log: DeltaLog, pieces: Iterator[tuple[int, FileEntry, int, int, int]]
          ) -> Iterator[tuple[tuple[int, FileEntry, int, int, int], pa.Table | None]]:
    """Each piece with its file's rows (None when the file is gone). Local files are read inline;
    on object stores up to 16 reads run ahead in a thread pool to hide request latency."""
    if not log.location.is_remote:
        for piece in pieces:
            try:
                yield piece, log.read_file(piece[1])
            except FileNotFoundError:
                yield piece, None
        return
    for piece, future in _prefetched(log, pieces, 16):
        try:
            yield piece, future.result()
        except FileNotFoundError:
            yield piece, None
