"""The ``inmemory`` system: streams held in this Python process (Samza's InMemorySystem).

``systems.<s>.samza.factory: inmemory`` (or Samza's ``org.apache.samza.system.inmemory.InMemorySystemFactory``)
keeps every stream of the system in a process-wide registry, under the namespace
``systems.<s>.inmemory.namespace`` (default: the system name), so a producer, a consumer and an admin
built from the same config in the same process see the same streams. It exists for
:class:`sparza.testing.TestRunner`, which runs a job's real runtime code in one process without Spark;
a Spark job cannot use it (executors are other processes and would see no streams: the admin says so).

Rows have the columns of every sparza stream (key, value, timestamp, type, producer); the offset of a
row is its position in its partition (``"0"``, ``"1"``, ...). Producers follow the batch contract of
:class:`~sparza.systems.SystemProducer`: a flush with a :class:`~sparza.systems.Transaction` appends a
stream's rows and records ``(app_id, version)`` in one step, and a replayed flush of a recorded version
appends nothing, so the runtime's exactly-once guarantees hold here as on Delta. Keys and values that
are not bytes go through the stream's serdes, and partitions are picked as the delta system picks them
(CRC-32 of the partition key), so a job writes the same partitions here as on Delta.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from sparza.config import STR, Config, define_key
from sparza.errors import SparzaError
from sparza.metrics import MetricsRegistry
from sparza.serde import Serde, partition_key_bytes, serialize
from sparza.streams import IncomingMessageEnvelope, MessageType, OutgoingMessageEnvelope, SystemStreamPartition
from sparza.systems import (
    MessageRows,
    StreamSpec,
    SystemStreamMetadata,
    SystemStreamPartitionMetadata,
    Transaction,
)
from sparza.systems.delta.partitioner import partition_for
from sparza.systems.settings import stream_serde

__all__ = [
    "InMemoryRow",
    "InMemoryStreamError",
    "InMemorySystemAdmin",
    "InMemorySystemConsumer",
    "InMemorySystemFactory",
    "InMemorySystemProducer",
    "clear_stream",
    "drop_namespace",
    "stream_rows",
]

_NAMESPACE = define_key("systems.<system>.inmemory.namespace", None,
                        "inmemory systems: the in-process registry the system's streams live in (default: the system "
                        "name); sparza.testing.TestRunner gives each runner its own.", "sparza.systems", kind=STR)


class InMemoryStreamError(SparzaError, ValueError):
    """An in-memory stream is missing, exists with another partition count, or was addressed out of range."""


@dataclass(frozen=True, slots=True)
class InMemoryRow:
    """One row of an in-memory stream partition (bytes as stored, event time, message type, writer)."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None
    type: int = int(MessageType.USER)
    producer: str | None = None


@dataclass
class _Stream:
    partitions: list[list[InMemoryRow]]
    transactions: dict[str, int] = field(default_factory=dict)  # app id -> last committed version


_LOCK = threading.RLock()
_NAMESPACES: dict[str, dict[str, _Stream]] = {}


def _namespace(system: str, config: Config) -> str:
    return _NAMESPACE.get(config, system=system) or system


def _streams(namespace: str) -> dict[str, _Stream]:
    with _LOCK:
        return _NAMESPACES.setdefault(namespace, {})


def drop_namespace(namespace: str) -> None:
    """Forget every stream of ``namespace`` (a finished test frees its data)."""
    with _LOCK:
        _NAMESPACES.pop(namespace, None)


class InMemoryStreamNotFoundError(InMemoryStreamError, LookupError):
    """The in-memory stream does not exist in this process (a LookupError, as every system's missing stream)."""


def _missing(system: str, stream: str) -> InMemoryStreamError:
    return InMemoryStreamNotFoundError(
        f"in-memory stream '{system}.{stream}' does not exist in this process. The inmemory system keeps its "
        "streams inside one Python process (sparza.testing.TestRunner): create the stream first (TestRunner's "
        "add_input / add_output), or use a delta or kafka system to run the job on Spark")


def _stream(system: str, config: Config, stream: str) -> _Stream:
    found = _streams(_namespace(system, config)).get(stream)
    if found is None:
        raise _missing(system, stream)
    return found


def stream_rows(system: str, config: Config, stream: str) -> dict[int, list[InMemoryRow]]:
    """Every row of ``system.stream`` per partition, in offset order (a copy)."""
    with _LOCK:
        found = _stream(system, config, stream)
        return {p: list(rows) for p, rows in enumerate(found.partitions)}


def clear_stream(system: str, config: Config, stream: str) -> int:
    """Drop every row of ``system.stream``, keeping its partitions: what a broker that lost its data looks like
    to a job (tests of that fault). Returns how many rows were dropped."""
    with _LOCK:
        found = _stream(system, config, stream)
        dropped = sum(len(rows) for rows in found.partitions)
        found.partitions = [[] for _ in found.partitions]
        found.transactions.clear()
        return dropped


class InMemorySystemAdmin:
    """Creates and describes in-memory streams; offsets are positions, so batches can be capped and lag counted."""

    def __init__(self, system_name: str, config: Config) -> None:
        self.system_name = system_name
        self.config = config

    def create_stream(self, spec: StreamSpec) -> bool:
        """Create ``spec.stream``; False when it exists with the same partition count (an error otherwise)."""
        if spec.partitions < 1:
            raise InMemoryStreamError(f"stream '{self.system_name}.{spec.stream}' needs at least 1 partition, "
                                      f"got {spec.partitions}")
        with _LOCK:
            streams = _streams(_namespace(self.system_name, self.config))
            existing = streams.get(spec.stream)
            if existing is not None:
                if len(existing.partitions) != spec.partitions:
                    raise InMemoryStreamError(
                        f"stream '{self.system_name}.{spec.stream}' exists with {len(existing.partitions)} "
                        f"partitions, not {spec.partitions}")
                return False
            streams[spec.stream] = _Stream([[] for _ in range(spec.partitions)])
            return True

    def get_system_stream_metadata(self, streams: set[str]) -> dict[str, SystemStreamMetadata]:
        """Oldest, newest and upcoming offset of every partition of each stream."""
        out: dict[str, SystemStreamMetadata] = {}
        with _LOCK:
            for name in sorted(streams):
                found = _stream(self.system_name, self.config, name)
                out[name] = SystemStreamMetadata(name, {
                    p: SystemStreamPartitionMetadata("0" if rows else None, str(len(rows) - 1) if rows else None,
                                                     str(len(rows)))
                    for p, rows in enumerate(found.partitions)})
        return out

    def partition_count(self, stream: str) -> int:
        """How many partitions ``stream`` has."""
        with _LOCK:
            return len(_stream(self.system_name, self.config, stream).partitions)

    def grow_stream(self, stream: str, partitions: int) -> int:
        """Give ``stream`` ``partitions`` partitions in all (:class:`~sparza.systems.SupportsPartitionGrowth`);
        returns how many it had."""
        with _LOCK:
            found = _stream(self.system_name, self.config, stream)
            before = len(found.partitions)
            if partitions <= before:
                raise InMemoryStreamError(f"stream '{self.system_name}.{stream}' has {before} partitions: it can "
                                          f"only get more (asked for {partitions})")
            found.partitions.extend([] for _ in range(partitions - before))
            return before

    def offset_comparator(self, a: str, b: str) -> int:
        """Offsets are positions: compare them as numbers."""
        return (int(a) > int(b)) - (int(a) < int(b))

    def offset_after(self, ssp: SystemStreamPartition, start: str, end: str, n: int) -> str:
        """``start + n``, capped at ``end``."""
        return str(min(int(start) + n, int(end)))

    def count_between(self, ssp: SystemStreamPartition, start: str, end: str) -> int:
        """``end - start`` (never negative)."""
        return max(0, int(end) - int(start))

    def stream_location(self, stream: str) -> str:
        """Where the stream lives: ``inmemory://<namespace>/<stream>``."""
        return f"inmemory://{_namespace(self.system_name, self.config)}/{stream}"


class InMemorySystemConsumer:
    """Reads offset ranges of in-memory partitions, as envelopes, Arrow batches or column lists."""

    def __init__(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> None:
        self.system_name = system_name
        self.config = config
        self.metrics = metrics

    def start(self) -> None:
        """Nothing to open."""

    def stop(self) -> None:
        """Nothing to release."""

    def _rows(self, ssp: SystemStreamPartition, start: str | None, end: str | None) -> tuple[int, list[InMemoryRow]]:
        with _LOCK:
            found = _stream(self.system_name, self.config, ssp.stream)
            if not 0 <= ssp.partition < len(found.partitions):
                raise InMemoryStreamError(f"{ssp} does not exist: the stream has {len(found.partitions)} partitions")
            rows = found.partitions[ssp.partition]
            first = int(start) if start is not None else 0
            if end is not None and int(end) > len(rows):
                # The range was planned against rows that are gone (the stream lost data): reading fewer rows
                # than planned would let a task commit offsets past messages it never saw.
                raise InMemoryStreamError(f"{ssp} holds {len(rows)} rows, but [{first}, {end}) was asked for: the "
                                          "stream lost data after the batch was planned")
            last = int(end) if end is not None else len(rows)
            return first, rows[first:last]

    def read(self, ssp: SystemStreamPartition, start: str | None,
             end: str | None = None) -> Iterator[IncomingMessageEnvelope]:
        """Rows of ``ssp`` in ``[start, end)`` as envelopes (key and message as stored bytes)."""
        first, rows = self._rows(ssp, start, end)
        for i, row in enumerate(rows):
            yield IncomingMessageEnvelope(ssp, str(first + i), row.key, row.value, row.timestamp,
                                          (len(row.key) if row.key else 0) + (len(row.value) if row.value else 0),
                                          MessageType(row.type))

    def read_rows(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                  include_control: bool = True, *, bounded: bool | None = None) -> Iterator[MessageRows]:
        """The same rows as :meth:`read_arrow`, as one chunk of column lists (no Arrow)."""
        first, rows = self._rows(ssp, start, end)
        picked = [(first + i, r) for i, r in enumerate(rows) if include_control or r.type == MessageType.USER]
        if picked:
            yield MessageRows([str(i) for i, _ in picked], [r.key for _, r in picked], [r.value for _, r in picked],
                              [r.timestamp for _, r in picked], [int(r.type) for _, r in picked])

    def read_arrow(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                   include_control: bool = True, *, bounded: bool | None = None) -> Iterator[pa.RecordBatch]:
        """The same rows as one Arrow batch (columns of :class:`~sparza.systems.SupportsArrowRead`)."""
        first, rows = self._rows(ssp, start, end)
        picked = [(first + i, r) for i, r in enumerate(rows) if include_control or r.type == MessageType.USER]
        if not picked:
            return
        yield pa.RecordBatch.from_arrays([
            pa.array([str(i) for i, _ in picked], pa.string()),
            pa.array([r.key for _, r in picked], pa.binary()),
            pa.array([r.value for _, r in picked], pa.binary()),
            pa.array([r.timestamp for _, r in picked], pa.int64()),
            pa.array([r.type for _, r in picked], pa.int8()),
            pa.array([r.producer for _, r in picked], pa.string()),
        ], names=["offset", "key", "value", "timestamp", "type", "producer"])


class InMemorySystemProducer:
    """Buffers what each source sends and appends it at flush (idempotently per transaction)."""

    def __init__(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> None:
        self.system_name = system_name
        self.config = config
        self.metrics = metrics
        self._buffers: dict[str, dict[str, list[tuple[int, InMemoryRow]]]] = {}
        self._serdes: dict[tuple[str, str], Serde] = {}
        self._round_robin: dict[str, int] = {}

    def register(self, source: str) -> None:
        """Declare ``source``; its name goes into the rows' ``producer`` column."""
        self._buffers.setdefault(source, {})

    def start(self) -> None:
        """Nothing to open."""

    def begin(self, source: str, transaction: Transaction) -> None:
        """Nothing to prepare: the transaction is applied at flush."""

    def _serde(self, stream: str, which: str) -> Serde:
        cached = self._serdes.get((stream, which))
        if cached is None:
            cached = self._serdes[(stream, which)] = stream_serde(self.config, self.system_name, stream, which)
        return cached

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Buffer one message: serialized through the stream's serdes, its partition picked as delta picks it."""
        stream = envelope.system_stream.stream
        with _LOCK:
            partitions = len(_stream(self.system_name, self.config, stream).partitions)
        key = serialize(envelope.key, self._serde(stream, "key"))
        value = serialize(envelope.message, self._serde(stream, "msg"))
        partition = envelope.partition
        if partition is not None:
            if not 0 <= partition < partitions:
                raise InMemoryStreamError(f"partition {partition} is out of range for stream "
                                          f"'{self.system_name}.{stream}', which has {partitions} partitions")
        elif envelope.partition_key is not None:
            partition = partition_for(partition_key_bytes(envelope.partition_key, self._serde(stream, "key")),
                                      partitions)
        elif key is not None:
            partition = partition_for(key, partitions)
        else:
            partition = self._round_robin.get(stream, 0) % partitions
            self._round_robin[stream] = partition + 1
        timestamp = None if envelope.timestamp is None else int(envelope.timestamp)
        row = InMemoryRow(key, value, timestamp, int(envelope.type), source)
        self._buffers.setdefault(source, {}).setdefault(stream, []).append((partition, row))

    def flush(self, source: str, *, transaction: Transaction | None = None) -> None:
        """Append everything ``source`` sent, one atomic step per stream; with a transaction, a stream that
        already recorded this version (a replay) gets nothing."""
        buffered = self._buffers.get(source, {})
        for stream in list(buffered):
            rows = buffered[stream]
            with _LOCK:
                target = _stream(self.system_name, self.config, stream)
                if transaction is not None:
                    app_id, version = transaction
                    done = target.transactions.get(app_id)
                    if done is not None and done >= version:
                        del buffered[stream]
                        continue
                    target.transactions[app_id] = version
                for partition, row in rows:
                    target.partitions[partition].append(row)
            del buffered[stream]

    def abandon(self, source: str) -> None:
        """Forget what ``source`` sent since its last flush."""
        self._buffers[source] = {}

    def stop(self) -> None:
        """Drop unflushed messages."""
        self._buffers.clear()


class InMemorySystemFactory:
    """What ``systems.<s>.samza.factory: inmemory`` resolves to."""

    def get_admin(self, system_name: str, config: Config) -> InMemorySystemAdmin:
        """The system's admin."""
        return InMemorySystemAdmin(system_name, config)

    def get_consumer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> InMemorySystemConsumer:
        """A consumer."""
        return InMemorySystemConsumer(system_name, config, metrics)

    def get_producer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> InMemorySystemProducer:
        """A producer."""
        return InMemorySystemProducer(system_name, config, metrics)

