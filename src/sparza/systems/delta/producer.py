"""``DeltaSystemProducer``: buffers messages per source, stream and partition; ``flush`` commits them.

One flush writes one Parquet file per (stream, partition) it has rows for and commits all of a
stream's files in one Delta commit, so a flush is atomic per stream and its rows keep their send
order per partition. With ``transaction=(app_id, version)`` the commit carries a Delta app
transaction and is skipped when the table already records ``version`` (or newer) for ``app_id``:
a replayed flush commits nothing twice. delta-rs resolves concurrent appends by retrying the
commit against the winner (``systems.<s>.delta.commit.retries``).

Streams with ``delta.table.*`` config are typed result tables instead: their messages become rows of
real columns, appended or merged by key (:mod:`sparza.systems.delta.tables`, ``docs/tables.md``).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any
from zlib import crc32

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.serde import Serde, is_utf8, partition_key_bytes, plain_json_encoder
from sparza.streams import MessageType, OutgoingMessageEnvelope
from sparza.systems import Transaction
from sparza.systems.delta.admin import DeltaSystemAdmin, open_table
from sparza.systems.delta.partitioner import partition_for
from sparza.systems.delta.schema import FILE_SCHEMA, PARTITION_COLUMN, TABLE_SCHEMA
from sparza.systems.delta.settings import StreamLocation
from sparza.systems.delta.storage import storage_errors
from sparza.systems.delta.tables import TableError, TypedTable, table_spec_from_config

__all__ = ["DeltaSystemProducer"]


class _PartitionBuffer:
    """Rows buffered for one partition, in send order: Arrow chunks plus a tail of single sends in column lists (of
    bytes and ints: a list of per-message tuples would be traversed by every garbage collection while it grows); a
    message sent without a timestamp gets one when sealed. Message types are kept for control messages only (their
    row and type): every other row is a user message, 0, with no list growing per message."""

    __slots__ = ("chunk_rows", "chunks", "controls", "keys", "timestamps", "values")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int | None] = []
        self.controls: list[tuple[int, int]] = []  # (row among the single sends, message type) of non-user rows
        self.chunks: list[pa.Table] = []
        self.chunk_rows = 0

    def __len__(self) -> int:
        return self.chunk_rows + len(self.keys)

    def seal(self) -> None:
        """Turn the single sends so far into an Arrow chunk (keeps order with later batches); a message sent without
        a timestamp gets the time now (the producer's choice, as librdkafka stamps a record when it takes it)."""
        n = len(self.keys)
        if n:
            stamps = pa.array(self.timestamps, pa.int64())
            if stamps.null_count:
                stamps = pc.fill_null(stamps, int(time.time() * 1000))
            if self.controls:
                kinds = [0] * n
                for row, kind in self.controls:
                    kinds[row] = kind
                types = pa.array(kinds, pa.int8())
            else:
                types = pa.repeat(pa.scalar(0, pa.int8()), n)
            self.chunks.append(pa.Table.from_arrays(
                [pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()), stamps, types],
                names=["key", "value", "timestamp", "type"]))
            self.chunk_rows += n
            self.keys, self.values, self.timestamps, self.controls = [], [], [], []

    def add_chunk(self, rows: pa.Table) -> None:
        """Append Arrow rows (columns key, value, timestamp, type)."""
        self.seal()
        self.chunks.append(rows)
        self.chunk_rows += rows.num_rows

    def table(self, producer: str) -> pa.Table:
        """Everything buffered, with the ``producer`` column, in :data:`FILE_SCHEMA`."""
        self.seal()
        data = pa.concat_tables(self.chunks) if len(self.chunks) > 1 else self.chunks[0]
        n = data.num_rows
        return pa.Table.from_arrays(
            [data.column("key"), data.column("value"), data.column("timestamp"), data.column("type"),
             pa.repeat(pa.scalar(producer, pa.string()), n)], schema=FILE_SCHEMA)


@dataclass
class _StreamInfo:
    """What a producer caches per stream: where it is, its partition count, serdes, open table."""

    location: StreamLocation
    partitions: int
    key_serde: Serde
    msg_serde: Serde
    table: Any = None
    round_robin: int = 0
    typed: TypedTable | None = None   # set when the stream is a typed table (docs/tables.md)

    def __post_init__(self) -> None:
        self.key_to_bytes = self.key_serde.to_bytes
        self.msg_to_bytes = self.msg_serde.to_bytes
        self.key_utf8 = is_utf8(self.key_serde)
        self.msg_utf8 = is_utf8(self.msg_serde)
        self.msg_json = plain_json_encoder(self.msg_serde)
        self.buffers: dict[str, dict[int, _PartitionBuffer]] = {}  # source -> partition -> rows (hot-path cache)


_USER = MessageType.USER
_BYTES_LIKE = (bytes, bytearray, memoryview)  # bytes: its subclasses (numpy.bytes_)


class DeltaSystemProducer:
    """Writes messages to the streams of a ``delta`` system (see the module docstring)."""

    def __init__(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> None:
        self.system_name = system_name
        self.admin = DeltaSystemAdmin(system_name, config)
        self.settings = self.admin.settings
        self.metrics = metrics
        self._sources: set[str] = set()
        self._buffers: dict[str, dict[str, dict[int, _PartitionBuffer]]] = {}
        self._streams: dict[str, _StreamInfo] = {}
        self._delta_schema: Any = None
        self._typed: dict[str, TypedTable] = {}

    # --- SystemProducer lifecycle ------------------------------------------------------------
    def register(self, source: str) -> None:
        """Declare ``source`` (a task name); it is written into the ``producer`` column."""
        self._sources.add(source)
        self._buffers.setdefault(source, {})

    def start(self) -> None:
        """Nothing to open ahead of time: streams are opened on first send."""

    def begin(self, source: str, transaction: Transaction) -> None:
        """Nothing to prepare: Delta commits carry the transaction given to :meth:`flush`."""

    def abandon(self, source: str) -> None:
        """Forget what ``source`` sent since its last flush (nothing of it was committed)."""
        for stream in self._buffers.pop(source, {}):
            info = self._streams.get(stream)
            if info is not None:
                info.buffers.pop(source, None)
        self._buffers[source] = {}
        for typed in self._typed.values():
            typed.abandon(source)

    def stop(self) -> None:
        """Drop unflushed messages and open tables."""
        self._buffers.clear()
        self._streams.clear()
        self._typed.clear()

    # --- sending -----------------------------------------------------------------------------
    def _stream(self, stream: str) -> _StreamInfo:
        info = self._streams.get(stream)
        if info is None:
            spec = table_spec_from_config(self.settings, stream)
            if spec is not None:
                location = self.settings.location(stream)
                key_serde, msg_serde = self.settings.key_serde(stream), self.settings.msg_serde(stream)
                typed = self._typed[stream] = TypedTable(
                    spec, location, msg_serde, key_serde, commit_retries=self.settings.commit_retries,
                    config=self.settings.config, system=self.system_name, log_retention=self.settings.log_retention)
                info = _StreamInfo(location, 0, key_serde, msg_serde, typed=typed)
            else:
                info = _StreamInfo(self.settings.location(stream), self.admin.partition_count(stream),
                                   self.settings.key_serde(stream), self.settings.msg_serde(stream))
            self._streams[stream] = info
        return info

    def _check_partition(self, stream: str, info: _StreamInfo, partition: int) -> None:
        """``partition`` is beyond the count this producer knew: the stream may have grown since (``sparza stream
        grow``), so the table's count is read again; raises ``ValueError`` when it is out of range still. Keys
        without a partition keep going by the known count until then, as a Kafka producer's do until its metadata
        refresh."""
        if partition >= 0:
            info.partitions = self.admin.partition_count(stream, fresh=True)
        if not 0 <= partition < info.partitions:
            raise ValueError(f"partition {partition} out of range for stream {stream!r} "
                             f"with {info.partitions} partitions")

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Buffer one message for ``envelope.system_stream``'s stream.

        Partition: ``envelope.partition`` when set, else :func:`partition_for` of the partition key
        (else the key), else round-robin. Non-bytes keys and values go through the stream's serdes.
        """
        stream = envelope.system_stream.stream
        info = self._streams.get(stream) or self._stream(stream)
        if info.typed is not None:
            info.typed.send(source, envelope)
            return
        # Hot path (once per message): bytes pass straight through without a call, a str of a UTF-8 serde is
        # encoded in place.
        key = envelope.key
        if key is not None and key.__class__ is not bytes:
            key = (key.encode() if key.__class__ is str and info.key_utf8
                   else bytes(key) if isinstance(key, _BYTES_LIKE) else info.key_to_bytes(key))
        value = envelope.message
        if value is not None and value.__class__ is not bytes:
            json_encode = info.msg_json
            if json_encode is not None and value.__class__ is dict:
                # A JSON serde's usual message, encoded here (see plain_json_encoder); the serde decides the rest.
                try:
                    encoded = json_encode(value)
                except Exception:
                    encoded = None
                value = encoded if encoded is not None and encoded.find(b"null") < 0 else info.msg_to_bytes(value)
            else:
                value = (value.encode() if value.__class__ is str and info.msg_utf8
                         else bytes(value) if isinstance(value, _BYTES_LIKE) else info.msg_to_bytes(value))
        partition = envelope.partition
        if partition is not None:
            if not 0 <= partition < info.partitions:
                self._check_partition(stream, info, partition)
        elif envelope.partition_key is not None:
            partition = partition_for(partition_key_bytes(envelope.partition_key, info.key_serde), info.partitions)
        elif key is not None:
            partition = crc32(key) % info.partitions   # == partition_for(key, n), inlined
        else:
            partition = info.round_robin % info.partitions
            info.round_robin += 1
        partitions = info.buffers.get(source)
        if partitions is None:
            partitions = info.buffers[source] = self._buffers.setdefault(source, {}).setdefault(stream, {})
        buffer = partitions.get(partition)
        if buffer is None:
            buffer = partitions[partition] = _PartitionBuffer()
        buffer.keys.append(key)
        buffer.values.append(value)
        ts = envelope.timestamp
        buffer.timestamps.append(ts if ts is None or ts.__class__ is int else int(ts))
        kind = envelope.type
        if kind is not _USER:  # a control message (rare): its row and type (an int: IntEnums convert to Arrow slowly)
            buffer.controls.append((len(buffer.keys) - 1, int(kind)))

    def send_batch(self, source: str, stream: str, partition: int, rows: pa.Table | pa.RecordBatch) -> None:
        """Buffer Arrow rows for one partition without per-row Python: columns ``key``, ``value``
        (binary), ``timestamp`` (int64) and optionally ``type`` (int8, default user messages)."""
        info = self._stream(stream)
        if info.typed is not None:
            raise TableError(f"send_batch writes stream rows (key/value); {stream!r} is a typed table: send() "
                             f"its rows as dicts")
        if not 0 <= partition < info.partitions:
            self._check_partition(stream, info, partition)
        table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
        n = table.num_rows
        kind = (table.column("type").cast(pa.int8()) if "type" in table.column_names
                else pa.repeat(pa.scalar(0, pa.int8()), n))
        chunk = pa.Table.from_arrays([table.column("key").cast(pa.binary()), table.column("value").cast(pa.binary()),
                                      table.column("timestamp").cast(pa.int64()), kind],
                                     names=["key", "value", "timestamp", "type"])
        by_stream = self._buffers.setdefault(source, {}).setdefault(stream, {})
        by_stream.setdefault(partition, _PartitionBuffer()).add_chunk(chunk)

    def send_rows(self, source: str, stream: str, rows: pa.Table | pa.RecordBatch) -> None:
        """Buffer Arrow rows (columns ``key``, ``value``, optional ``timestamp`` and ``partition``), each for
        the partition :meth:`send` would pick for its key (crc32 of the key bytes) unless its ``partition``
        is set; timestamps left null are now. Row order is kept within each partition."""
        info = self._stream(stream)
        if info.typed is not None:
            raise TableError(f"send_rows writes stream rows (key/value); {stream!r} is a typed table: send() "
                             f"its rows as dicts")
        table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
        n = table.num_rows
        if n == 0:
            return
        names = table.column_names
        keys = (table.column("key").cast(pa.binary()) if "key" in names else pa.nulls(n, pa.binary()))
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        given = table.column("partition").cast(pa.int32()).combine_chunks() if "partition" in names else None
        if given is not None and given.null_count == 0:
            parts = given
        else:
            need_key = pc.is_null(keys) if given is None else pc.and_(pc.is_null(keys), pc.is_null(given))
            if pc.any(need_key).as_py():
                raise ValueError(f"send_rows to {stream!r}: a row has neither a key nor a partition")
            encoded = pc.dictionary_encode(keys)
            by_key = pa.array([crc32(k) % info.partitions if k is not None else 0
                               for k in encoded.dictionary.to_pylist()], pa.int32()).take(encoded.indices)
            parts = by_key if given is None else pc.if_else(pc.is_null(given), by_key, given)
        bounds = pc.min_max(parts)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low >= 0 and high >= info.partitions:
            self._check_partition(stream, info, high)
        if low < 0 or high >= info.partitions:
            raise ValueError(f"partition out of range for stream {stream!r} with {info.partitions} partitions: "
                             f"{low}..{high}")
        now = int(time.time() * 1000)
        stamps = (pc.fill_null(table.column("timestamp").cast(pa.int64()), now).combine_chunks()
                  if "timestamp" in names else pa.repeat(pa.scalar(now, pa.int64()), n))
        values = table.column("value").cast(pa.binary()).combine_chunks()
        chunk = pa.Table.from_arrays([keys, values, stamps, pa.repeat(pa.scalar(0, pa.int8()), n)],
                                     names=["key", "value", "timestamp", "type"])
        by_stream = self._buffers.setdefault(source, {}).setdefault(stream, {})
        targets = pc.unique(parts).to_pylist()
        for partition in targets:
            part = chunk if len(targets) == 1 else chunk.filter(pc.equal(parts, partition))
            by_stream.setdefault(partition, _PartitionBuffer()).add_chunk(part)

    def pending(self, source: str) -> int:
        """How many messages ``source`` sent that are not flushed yet."""
        return (sum(len(b) for parts in self._buffers.get(source, {}).values() for b in parts.values())
                + sum(t.pending(source) for t in self._typed.values()))

    # --- flushing ----------------------------------------------------------------------------
    def flush(self, source: str, *, transaction: Transaction | None = None) -> None:
        """Write and commit everything ``source`` sent, one Delta commit per stream.

        ``transaction=(app_id, version)``: commit through a Delta app transaction, and commit nothing
        for a stream whose table already records ``version`` or newer for ``app_id`` (a replay).
        Raises if a commit fails; the buffer is kept, so the caller may flush again.
        """
        by_stream = self._buffers.get(source, {})
        for stream in list(by_stream):
            partitions = by_stream[stream]
            if any(len(b) for b in partitions.values()):
                self._commit(source, stream, partitions, transaction)
            del by_stream[stream]
            info = self._streams.get(stream)
            if info is not None:
                info.buffers.pop(source, None)  # send's cached reference to the dict just dropped
        for typed in self._typed.values():
            if typed.pending(source):
                before = dict(typed.stats)
                typed.flush(source, transaction)
                self._count("messages-written", typed.stats["rows"] - before["rows"])
                self._count("commits", typed.stats["commits"] - before["commits"])
                self._count("flushes-skipped-replay", typed.stats["skipped"] - before["skipped"])
                self._count("commit-conflicts", typed.stats["conflicts"] - before["conflicts"])

    def _table(self, info: _StreamInfo) -> Any:
        if info.table is None:
            info.table = open_table(info.location)
        else:
            with storage_errors(info.location.uri):
                info.table.update_incremental()
        return info.table

    def _commit(self, source: str, stream: str, partitions: dict[int, _PartitionBuffer],
                transaction: Transaction | None) -> None:
        from deltalake import Schema
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import AddAction, CommitProperties, Transaction

        started = time.perf_counter()
        info = self._stream(stream)
        table = self._table(info)
        if transaction is not None:
            app_id, version = transaction
            done = table.transaction_version(app_id)
            if done is not None and done >= version:
                self._count("flushes-skipped-replay", 1)
                return
        now = int(time.time() * 1000)
        actions = []
        rows = 0
        for partition in sorted(partitions):
            buffer = partitions[partition]
            if not len(buffer):
                continue
            data = buffer.table(source)
            rows += data.num_rows
            sink = io.BytesIO()
            pq.write_table(data, sink, compression="snappy")
            payload = sink.getvalue()
            directory = f"{PARTITION_COLUMN}={partition}"
            path = f"{directory}/{uuid.uuid4().hex}.parquet"
            with storage_errors(info.location.uri):
                info.location.write_bytes(path, payload)
            ts = data.column("timestamp")
            stats = {"numRecords": data.num_rows, "minValues": {"timestamp": pa.compute.min(ts).as_py()},
                     "maxValues": {"timestamp": pa.compute.max(ts).as_py()}}
            actions.append(AddAction(path, len(payload), {PARTITION_COLUMN: str(partition)}, now, True,
                                     json.dumps(stats)))
        if self._delta_schema is None:
            self._delta_schema = Schema.from_arrow(TABLE_SCHEMA)
        properties = CommitProperties(
            max_commit_retries=self.settings.commit_retries,
            app_transactions=[Transaction(transaction[0], transaction[1])] if transaction else None,
            custom_metadata={"sparza.producer": source})
        for attempt in range(self.settings.commit_retries + 1):
            try:
                with storage_errors(info.location.uri):
                    table.create_write_transaction(actions, "append", self._delta_schema,
                                                   partition_by=[PARTITION_COLUMN], commit_properties=properties)
                break
            except CommitFailedError:
                # delta-rs refuses a commit when a concurrent winner carries the same app id: if that
                # winner already committed this version, ours is a duplicate and is dropped.
                table.update_incremental()
                done = table.transaction_version(transaction[0]) if transaction is not None else None
                if transaction is not None and done is not None and done >= transaction[1]:
                    self._delete_files(info, actions)
                    self._count("flushes-skipped-replay", 1)
                    return
                # delta-rs also refuses an append when a concurrent commit removed files ("a concurrent
                # transaction deleted data this operation read": a truncation of the stream), although
                # new files conflict with no removal of others: commit the same files again against the
                # table as it now is. Out of retries, the written files are deleted so none is left orphaned.
                self._count("commit-conflicts", 1)
                if attempt == self.settings.commit_retries:
                    self._delete_files(info, actions)
                    raise
        self._count("messages-written", rows)
        self._count("commits", 1)
        if self.metrics is not None:
            self.metrics.timer(self.system_name, "flush-ms").update((time.perf_counter() - started) * 1000.0)

    @staticmethod
    def _delete_files(info: _StreamInfo, actions: list[Any]) -> None:
        """Delete the data files of a commit that did not land (no snapshot references them)."""
        fs = info.location.filesystem()
        for action in actions:
            with contextlib.suppress(FileNotFoundError, OSError):
                fs.delete_file(action.path)

    def _count(self, name: str, n: int) -> None:
        if self.metrics is not None:
            self.metrics.counter(self.system_name, name).inc(n)
