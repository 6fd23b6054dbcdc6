"""The Arrow rows a stream consumer reads (:class:`~sparza.systems.SupportsArrowRead`): their columns, the
synthetic end-of-stream row of a bounded read, the one loop that turns such rows into envelopes, and the same rows
as Python column lists (:class:`~sparza.systems.MessageRows`, what a per-message task's envelopes are built from).

The delta and kafka consumers yield batches of :data:`READ_SCHEMA`; their ``read`` is :func:`read_envelopes`
over their own ``read_arrow``, so both hand the task the same envelope for the same row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStreamPartition
from sparza.systems import MessageRows

__all__ = ["READ_SCHEMA", "arrow_rows", "end_of_stream_batch", "envelope_rows", "read_envelopes", "rows_to_arrow"]

READ_SCHEMA = pa.schema([
    pa.field("offset", pa.string()), pa.field("partition", pa.int32()), pa.field("key", pa.binary()),
    pa.field("value", pa.binary()), pa.field("timestamp", pa.int64()), pa.field("type", pa.int8()),
    pa.field("producer", pa.string())])
"""Columns of a read batch: ``offset``, ``partition``, ``key``/``value`` (binary), ``timestamp`` (event ms),
``type`` (the :class:`~sparza.streams.MessageType` byte) and ``producer`` (the task that wrote a control row)."""


def end_of_stream_batch(partition: int, offset: str, timestamp_ms: int) -> pa.RecordBatch:
    """One synthetic end-of-stream row at ``offset`` (a bounded read reached its end); its producer is empty."""
    return pa.RecordBatch.from_arrays(
        [pa.array([offset]), pa.array([partition], pa.int32()), pa.array([None], pa.binary()),
         pa.array([None], pa.binary()), pa.array([timestamp_ms], pa.int64()),
         pa.array([int(MessageType.END_OF_STREAM)], pa.int8()), pa.array([""])], schema=READ_SCHEMA)


def read_envelopes(ssp: SystemStreamPartition, batches: Iterable[pa.RecordBatch]) -> Iterator[IncomingMessageEnvelope]:
    """The rows of ``batches`` (of :data:`READ_SCHEMA`) as envelopes of ``ssp``, key and message as bytes."""
    for batch in batches:
        cols = batch.to_pydict()
        for offset, key, value, ts, kind in zip(cols["offset"], cols["key"], cols["value"], cols["timestamp"],
                                                cols["type"], strict=True):
            yield IncomingMessageEnvelope(ssp, offset, key, value, ts,
                                          (len(key) if key else 0) + (len(value) if value else 0),
                                          MessageType(kind))


_ROW_TYPES = (("offset", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("timestamp", pa.int64()),
              ("type", pa.int8()))


def arrow_rows(batch: pa.RecordBatch) -> MessageRows:
    """A read batch's rows as Python column lists (columns of another type than :data:`READ_SCHEMA`'s are cast)."""
    columns = []
    for name, kind in _ROW_TYPES:
        column = batch.column(name)
        columns.append((column if column.type == kind else column.cast(kind)).to_pylist())
    return MessageRows(*columns)


def rows_to_arrow(rows: MessageRows, partition: int, producers: list[str | None]) -> pa.RecordBatch:
    """Column lists as one batch of :data:`READ_SCHEMA` (``producers``: the writer of each control row)."""
    n = len(rows.offsets)
    return pa.RecordBatch.from_arrays(
        [pa.array(rows.offsets, pa.string()), pa.repeat(pa.scalar(partition, pa.int32()), n),
         pa.array(rows.keys, pa.binary()), pa.array(rows.values, pa.binary()), pa.array(rows.timestamps, pa.int64()),
         pa.array(rows.types, pa.int8()), pa.array(producers, pa.string())], schema=READ_SCHEMA)


def envelope_rows(envelopes: Iterable[IncomingMessageEnvelope], rows: int = 10_000) -> Iterator[MessageRows]:
    """Envelopes (key and message as bytes) as column lists of up to ``rows`` rows: for consumers with ``read``
    only."""
    chunk = MessageRows([], [], [], [], [])
    for env in envelopes:
        chunk.offsets.append(env.offset)
        chunk.keys.append(env.key)
        chunk.values.append(env.message)
        chunk.timestamps.append(env.timestamp)
        chunk.types.append(int(env.type))
        if len(chunk.offsets) >= rows:
            yield chunk
            chunk = MessageRows([], [], [], [], [])
    if chunk.offsets:
        yield chunk
