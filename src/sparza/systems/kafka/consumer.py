"""``KafkaSystemConsumer``: reads exactly ``[start, end)`` of a topic partition, as Arrow or envelopes.

A read assigns the partition at ``start`` (no consumer-group subscription: the planner owns the
offsets) and stops at the first record at or past ``end``, or when the broker reports the end of
the partition at or past ``end``. The second case matters because offsets are not dense: when the
last offsets before ``end`` are transaction markers, aborted records (skipped under
``read_committed``) or compacted away, no record at ``end - 1`` ever arrives. A range that cannot
be read within ``kafka.read.timeout.ms``, or whose offsets were deleted by retention, fails the
read with an error naming the partition and offsets: nothing is skipped silently.

Control messages (watermark, end-of-stream) travel in-band as records with a ``sparza.type``
header (the :class:`~sparza.streams.MessageType` byte) and a ``sparza.producer`` header (the task
that wrote them); records without them are user messages, so topics written by any Kafka producer
read as plain data.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStreamPartition
from sparza.systems import MessageRows
from sparza.systems.kafka.admin import KafkaError, KafkaSystemAdmin, open_client
from sparza.systems.kafka.settings import (
    CONTROL_PRODUCER_HEADER,
    CONTROL_TYPE_HEADER,
    TIMESTAMP_HEADER,
    KafkaSystemSettings,
)
from sparza.systems.rows import read_envelopes, rows_to_arrow

__all__ = ["KafkaSystemConsumer", "OffsetOutOfRangeError"]

_BATCH = 5000

log = logging.getLogger(__name__)


class OffsetOutOfRangeError(KafkaError):
    """A planned offset is no longer (or not yet) in the partition, e.g. deleted by retention."""


class KafkaSystemConsumer:
    """Reads the partitions of a kafka system's topics in offset order (see the module docstring).

    Built from ``(system_name, config)`` only, so it can be made on a Spark executor from a pickled
    config; it connects on the first read and keeps one librdkafka consumer for all its reads.
    """

    def __init__(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> None:
        self.system_name = system_name
        self.settings = KafkaSystemSettings(system_name, config)
        self.metrics = metrics
        self._consumer: Any = None
        self._admin: KafkaSystemAdmin | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"system_name": self.system_name, "settings": self.settings, "metrics": self.metrics,
                "_consumer": None, "_admin": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # --- SystemConsumer lifecycle ------------------------------------------------------------
    def start(self) -> None:
        """Nothing to open ahead of time: the connection is made on the first read."""

    def stop(self) -> None:
        """Close the librdkafka consumer."""
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    @property
    def admin(self) -> KafkaSystemAdmin:
        """The admin used for offsets of open-ended reads."""
        if self._admin is None:
            self._admin = KafkaSystemAdmin(self.system_name, self.settings.config)
        return self._admin

    def _client(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = open_client("consumer", Consumer, self.settings.consumer_conf(), self.system_name)
        return self._consumer

    # --- reading ---------------------------------------------------------------------------
    def _records(self, ssp: SystemStreamPartition, begin: int, stop: int,
                 include_control: bool) -> Iterator[tuple[MessageRows, list[str | None]]]:
        """The records with offsets in ``[begin, stop)``, in order, as column lists and their producers (built as
        the records are checked, in one pass: this loop runs once per message)."""
        from confluent_kafka import KafkaError as RdKafkaError
        from confluent_kafka import TopicPartition

        consumer = self._client()
        topic, partition = self.settings.topic(ssp.stream), ssp.partition
        consumer.assign([TopicPartition(topic, partition, begin)])
        if self.settings.commit_monitoring_offsets and begin > 0:
            # Monitoring only: everything before a batch's start was committed by the task, so the group
            # trails the task checkpoint by at most one batch. Never read back; a failed commit is
            # logged, not raised (the task checkpoint holds the real position).
            try:
                consumer.commit(offsets=[TopicPartition(topic, partition, begin)], asynchronous=True)
            except Exception as exc:
                log.warning("committing monitoring offset %d of %s to group %r failed: %s", begin, ssp,
                            self.settings.monitoring_group, exc)
        timeout = self.settings.read_timeout_s
        position = begin
        last_progress = time.monotonic()
        last_error = ""
        try:
            while position < stop:
                # consume() with a timeout waits for a full batch; take what is there, else block in
                # poll() only until the next record or event arrives.
                messages = consumer.consume(num_messages=_BATCH, timeout=0)
                if not messages:
                    one = consumer.poll(0.5)
                    messages = [one] if one is not None else []
                before = position
                rows = MessageRows([], [], [], [], [])
                producers: list[str | None] = []
                offsets, keys, values, stamps, types = rows
                done = False
                for msg in messages:
                    error = msg.error()
                    if error is not None:
                        if error.code() == RdKafkaError._PARTITION_EOF:
                            if msg.topic() == topic and msg.partition() == partition and msg.offset() >= stop:
                                done = True  # the broker's end is past our range: nothing more lies in it
                            continue
                        if error.code() in (RdKafkaError._AUTO_OFFSET_RESET, RdKafkaError.OFFSET_OUT_OF_RANGE):
                            raise self._out_of_range(ssp, position, begin, stop, error.str())
                        if error.retriable() or not error.fatal():
                            last_error = error.str()
                            continue  # librdkafka retries transient broker errors itself; the timeout bounds it
                        raise KafkaError(f"reading {ssp} at offset {position}: {error.str()}")
                    offset = msg.offset()
                    if msg.topic() != topic or msg.partition() != partition or offset < position:
                        continue  # a prefetched record of an earlier assignment
                    if offset >= stop:
                        done = True
                        break
                    position = offset + 1
                    headers = msg.headers()
                    if headers is None:  # the common case: a plain record
                        offsets.append(str(offset))
                        keys.append(msg.key())
                        values.append(msg.value())
                        ts_type, ts = msg.timestamp()
                        stamps.append(ts if ts_type else 0)
                        types.append(0)
                        producers.append(None)
                        continue
                    kind, producer, event_ms = _control_headers(headers)
                    if kind and not include_control:
                        continue
                    offsets.append(str(offset))
                    keys.append(msg.key())
                    values.append(msg.value())
                    if event_ms is None:
                        ts_type, ts = msg.timestamp()
                        event_ms = ts if ts_type else 0
                    stamps.append(event_ms)
                    types.append(kind)
                    producers.append(producer)
                if position > before:
                    last_progress = time.monotonic()  # progress, even when every record was a skipped control one
                if offsets:
                    yield rows, producers
                if done:
                    return
                if time.monotonic() - last_progress > timeout:
                    raise KafkaError(
                        f"reading {ssp}: offsets [{position}, {stop}) did not arrive within {timeout:.0f}s "
                        f"(range planned [{begin}, {stop})); last error: {last_error or 'none'}; is the broker "
                        f"reachable? (systems.{self.system_name}.kafka.read.timeout.ms)")
        finally:
            consumer.unassign()

    def _out_of_range(self, ssp: SystemStreamPartition, position: int, begin: int, stop: int,
                      cause: str) -> OffsetOutOfRangeError:
        """The error of a read whose offsets are not in the partition: the gap, when retention deleted them."""
        tp = (self.settings.topic(ssp.stream), ssp.partition)
        try:
            oldest, end = self.admin.watermarks([tp])[tp]
        except KafkaError:
            oldest, end = -1, -1
        if position < oldest:
            what = (f"offsets [{position}, {oldest}) of {ssp} were deleted before they were read (the topic's "
                    "retention.ms or retention.bytes, or a DeleteRecords)")
        else:
            what = f"offset {position} of {ssp} is not in the partition (its offsets now: [{oldest}, {end}))"
        return OffsetOutOfRangeError(f"{what}, while reading [{begin}, {stop}): {cause}; the task starts again from "
                                     f"its checkpoint (systems.{self.system_name}.consumer.auto.offset.reset: smallest "
                                     "skips deleted offsets there)")

    def _range(self, ssp: SystemStreamPartition, start: str | None, end: str | None) -> tuple[int, int]:
        """``[begin, stop)`` of a read: ``start`` None is the oldest offset, ``end`` None the partition's end now."""
        if start is None or end is None:
            tp = (self.settings.topic(ssp.stream), ssp.partition)
            lo, hi = self.admin.watermarks([tp])[tp]
            return (lo if start is None else int(start)), (hi if end is None else int(end))
        return int(start), int(end)

    def _read(self, ssp: SystemStreamPartition, start: str | None, end: str | None, include_control: bool,
              bounded: bool | None) -> Iterator[tuple[MessageRows, list[str | None]]]:
        """The rows of a read with their producers column; a bounded read ends with the end-of-stream row."""
        is_bounded = self.settings.is_bounded(ssp.stream) if bounded is None else bounded
        begin, stop = self._range(ssp, start, end)
        rows = 0
        started = time.perf_counter()
        if begin < stop:
            for read in self._records(ssp, begin, stop, include_control):
                rows += len(read[0].offsets)
                yield read
        if is_bounded and end is None and include_control:
            yield (MessageRows([str(stop)], [None], [None], [int(time.time() * 1000)],
                               [int(MessageType.END_OF_STREAM)]), [""])
        if self.metrics is not None:
            self.metrics.counter(self.system_name, "messages-read").inc(rows)
            self.metrics.timer(self.system_name, "read-ms").update((time.perf_counter() - started) * 1000.0)

    def read_arrow(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                   include_control: bool = True, *, bounded: bool | None = None) -> Iterator[pa.RecordBatch]:
        """Records of ``ssp`` in ``[start, end)`` as Arrow batches of
        :data:`~sparza.systems.rows.READ_SCHEMA`, in offset order.

        ``start`` None: the oldest offset. ``end`` None: the partition's end now; for a bounded read
        (``bounded`` or the stream's ``bounded`` config) that end is followed by one synthetic
        end-of-stream row (producer ``""``, offset = the end) when ``include_control`` is on.
        """
        for rows, producers in self._read(ssp, start, end, include_control, bounded):
            yield rows_to_arrow(rows, ssp.partition, producers)

    def read_rows(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                  include_control: bool = True, *, bounded: bool | None = None) -> Iterator[MessageRows]:
        """The records :meth:`read_arrow` reads as Python column lists, with no Arrow built: a per-message
        task's envelopes come straight from librdkafka's messages."""
        for rows, _producers in self._read(ssp, start, end, include_control, bounded):
            yield rows

    def read(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
             include_control: bool = True, *, bounded: bool | None = None) -> Iterator[IncomingMessageEnvelope]:
        """The same records as :meth:`read_arrow`, as envelopes (key and message as bytes)."""
        return read_envelopes(ssp, self.read_arrow(ssp, start, end, include_control, bounded=bounded))


def _control_headers(headers: list[tuple[str, bytes | None]]) -> tuple[int, str | None, int | None]:
    """A record's ``sparza.*`` headers: its message type, the producer of a control record, its event time."""
    kind = 0
    producer = None
    event_ms = None
    for name, raw in headers:
        if name == CONTROL_TYPE_HEADER and raw:
            kind = int(raw)
        elif name == CONTROL_PRODUCER_HEADER and raw is not None:
            producer = raw.decode("utf-8")
        elif name == TIMESTAMP_HEADER and raw:
            event_ms = int(raw)
    return kind, producer, event_ms
