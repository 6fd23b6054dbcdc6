"""The Arrow rows a stream consumer reads (:class:`~sparza.systems.SupportsArrowRead`): their columns, the
synthetic end-of-stream row of a bounded read, and the one loop that turns such rows into envelopes.

The delta and kafka consumers yield batches of :data:`READ_SCHEMA`; their ``read`` is :func:`read_envelopes`
over their own ``read_arrow``, so both hand the task the same envelope for the same row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStreamPartition

__all__ = ["READ_SCHEMA", "end_of_stream_batch", "read_envelopes"]

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
