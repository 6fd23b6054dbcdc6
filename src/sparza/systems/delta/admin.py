"""``DeltaSystemAdmin``: create, describe and grow streams, and give per-partition offsets.

A stream's partition count is its table's property ``sparza.partitions``. :meth:`DeltaSystemAdmin.grow_stream`
raises it in a metadata-only commit (Kafka's CreatePartitions for a Delta stream): rows already written keep their
partitions and offsets, and the new partitions start empty. Metadata reads follow the count as the log's commits
set it, so a running job notices within one poll (:mod:`sparza.engine.partitions`)."""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparza.config import Config
from sparza.streams import SystemStreamPartition
from sparza.systems import StreamSpec, SystemStreamMetadata, SystemStreamPartitionMetadata
from sparza.systems.delta.errors import DeltaStreamError, PartitionCountMismatchError, StreamNotFoundError
from sparza.systems.delta.log import DeltaLog
from sparza.systems.delta.offsets import DeltaOffset, offset_key
from sparza.systems.delta.retention import read_horizon
from sparza.systems.delta.schema import PARTITION_COLUMN, PARTITION_COUNT_PROPERTY, TABLE_SCHEMA
from sparza.systems.delta.settings import DeltaSystemSettings, StreamLocation
from sparza.systems.delta.storage import ensure_container, open_table, storage_errors

__all__ = ["DeltaSystemAdmin", "open_table"]


@dataclass
class _PartitionSpan:
    """Where a partition's readable rows start and end, kept up to date incrementally."""

    first_version: int | None = None
    last_version: int | None = None
    last_rows: int = 0


@dataclass
class _StreamIndex:
    """Per-partition spans of one stream, built from the log from the retention horizon on."""

    horizon: int
    scanned_to: int
    spans: dict[int, _PartitionSpan] = field(default_factory=dict)
    identity: str = ""  # the table incarnation it describes (DeltaLog.identity)
    partitions: int | None = None  # the count the newest scanned commit that set the table's metadata gave


class DeltaSystemAdmin:
    """Stream management for a ``delta`` system: create, describe, partition counts and offsets."""

    def __init__(self, system_name: str, config: Config) -> None:
        self.system_name = system_name
        self.settings = DeltaSystemSettings(system_name, config)
        self._partitions: dict[str, int] = {}
        self._indexes: dict[str, _StreamIndex] = {}
        self._logs: dict[str, DeltaLog] = {}

    # --- locations and config ----------------------------------------------------------------
    def stream_location(self, stream: str) -> str:
        """The stream's table URI (``<root>/<stream>`` or its own ``delta.location``)."""
        return self.settings.location_uri(stream)

    def location(self, stream: str) -> StreamLocation:
        """The stream's location with storage options."""
        return self.settings.location(stream)

    def is_bounded(self, stream: str) -> bool:
        """True when ``systems.<s>.streams.<x>.bounded`` is set."""
        return self.settings.is_bounded(stream)

    # --- create / describe -------------------------------------------------------------------
    def create_stream(self, spec: StreamSpec) -> bool:
        """Create the stream's table with ``spec.partitions`` partitions.

        True when created; False when it already exists with the same count; raises
        :class:`PartitionCountMismatchError` when it exists with another count.
        """
        from deltalake import DeltaTable

        if spec.partitions < 1:
            raise ValueError(f"a stream needs at least 1 partition, got {spec.partitions}")
        location = self.settings.location(spec.stream)
        if spec.location:
            location = StreamLocation(spec.stream, spec.location if "://" in spec.location
                                      else os.path.abspath(spec.location), location.storage_options)
        properties = {
            PARTITION_COUNT_PROPERTY: str(spec.partitions),
            "sparza.createdAt": str(int(time.time() * 1000)),
            "sparza.createdBy": f"{_user()}@{socket.gethostname()}",
            "sparza.system": self.system_name,
            "delta.logRetentionDuration": self.settings.log_retention,
            **spec.properties,
        }
        if location.is_remote:
            ensure_container(self.settings.config, self.system_name, location.uri)
        with storage_errors(location.uri):
            exists = DeltaTable.is_deltatable(location.uri, storage_options=location.storage_options)
        if exists:
            return self._check_existing(spec, location)
        if not location.is_remote:
            os.makedirs(location.uri, exist_ok=True)
        try:
            DeltaTable.create(location.uri, TABLE_SCHEMA, mode="error", partition_by=[PARTITION_COLUMN],
                              name=spec.stream, configuration=properties,
                              storage_options=location.storage_options, raise_if_key_not_exists=False)
        except Exception:
            # Another process may have created it first: then it is a no-op or a count mismatch.
            if DeltaTable.is_deltatable(location.uri, storage_options=location.storage_options):
                return self._check_existing(spec, location)
            raise
        self._partitions[spec.stream] = spec.partitions
        return True

    def _check_existing(self, spec: StreamSpec, location: StreamLocation) -> bool:
        existing = self._count_from_table(location)
        if existing != spec.partitions:
            raise PartitionCountMismatchError(spec.stream, existing, spec.partitions)
        return False

    def _count_from_table(self, location: StreamLocation) -> int:
        table = open_table(location)
        text = table.metadata().configuration.get(PARTITION_COUNT_PROPERTY)  # type: ignore[attr-defined]
        if text is None or not text.isdigit():
            raise StreamNotFoundError(location.stream,
                                      f"{location.uri} (a Delta table without {PARTITION_COUNT_PROPERTY})")
        return int(text)

    def partition_of(self, stream: str, key: bytes) -> int:
        """The partition the system's producer writes a message with key bytes ``key`` to
        (:class:`~sparza.systems.SupportsKeyPartitioner`)."""
        from sparza.systems.delta.partitioner import partition_for

        return partition_for(key, self.partition_count(stream))

    def partition_count(self, stream: str, *, fresh: bool = False) -> int:
        """How many partitions ``stream`` has (from its table properties; cached, and raised when a metadata read
        (:meth:`get_system_stream_metadata`) meets the commit of a growth; ``fresh``: read the table again)."""
        count = None if fresh else self._partitions.get(stream)
        if count is None:
            count = self._count_from_table(self.settings.location(stream))
            self._partitions[stream] = count
        return count

    def grow_stream(self, stream: str, partitions: int) -> int:
        """Give ``stream`` ``partitions`` partitions in all (:class:`~sparza.systems.SupportsPartitionGrowth`): one
        metadata commit setting the table's partition count; rows and offsets stay what they were. Returns how many
        it had; raises :class:`~sparza.systems.delta.errors.DeltaStreamError` unless ``partitions`` is more."""
        location = self.settings.location(stream)
        before = self._count_from_table(location)
        if partitions <= before:
            raise DeltaStreamError(f"Delta stream {stream!r} has {before} partitions: it can only get more (asked for "
                                   f"{partitions}; a stream never loses partitions: readers' offsets name them)")
        table: Any = open_table(location)
        with storage_errors(location.uri):
            table.alter.set_table_properties({PARTITION_COUNT_PROPERTY: str(partitions)}, raise_if_not_exists=False)
        self._partitions[stream] = partitions
        return before

    def transaction_version(self, stream: str, app_id: str) -> int | None:
        """The newest app-transaction version the stream's table records for ``app_id`` (None: never).

        What an idempotent writer reads first, to commit only versions above it (delta-rs records
        app transactions but does not skip a repeated one by itself).
        """
        location = self.location(stream)
        table: Any = open_table(location)
        with storage_errors(location.uri):
            version = table.transaction_version(app_id)
        return None if version is None else int(version)

    def properties(self, stream: str) -> dict[str, str]:
        """The stream table's properties (partition count, creation info, Delta settings)."""
        return dict(open_table(self.settings.location(stream)).metadata().configuration)  # type: ignore[attr-defined]

    def delete_messages(self, offsets: Mapping[SystemStreamPartition, str]) -> None:
        """Samza's ``deleteMessages`` (:class:`~sparza.systems.SupportsDeleteMessages`): a Delta stream keeps one
        retention horizon for all its partitions, so a stream is truncated before the oldest version any of its
        partitions still needs, and only when ``offsets`` names every partition (a partition no reader has
        committed on yet keeps the whole stream). Files are deleted only when all their rows precede the horizon
        (:func:`~sparza.systems.delta.maintenance.truncate`)."""
        from sparza.systems.delta.maintenance import truncate

        by_stream: dict[str, dict[int, DeltaOffset]] = {}
        for ssp, offset in offsets.items():
            if ssp.system == self.system_name:
                by_stream.setdefault(ssp.stream, {})[ssp.partition] = DeltaOffset.parse(offset)
        for stream, positions in by_stream.items():
            if set(positions) != set(range(self.partition_count(stream))):
                continue
            horizon = min(offset.version for offset in positions.values())
            if horizon > read_horizon(self._log(stream)):
                truncate(self.location(stream), horizon)

    # --- offsets -----------------------------------------------------------------------------
    def offset_comparator(self, a: str, b: str) -> int:
        """Negative, zero or positive as offset ``a`` is before, equal to or after ``b``."""
        oa, ob = DeltaOffset.parse(a), DeltaOffset.parse(b)
        return -1 if oa < ob else (1 if ob < oa else 0)

    offset_key = staticmethod(offset_key)
    """``(version, index)`` of an offset, sorting as :meth:`offset_comparator` orders
    (:class:`~sparza.systems.SupportsOffsetKey`; a plain function: it runs once per adjunct message)."""

    def _log(self, stream: str) -> DeltaLog:
        log = self._logs.get(stream)
        if log is None:
            log = self._logs[stream] = DeltaLog(self.settings.location(stream))
        return log

    def _slices(self, ssp: SystemStreamPartition, start: str, end: str) -> Iterator[tuple[int, int, int, int]]:
        """Per commit in ``[start, end)`` with rows for ``ssp``: (version, first index, rows in range, rows
        the commit added to the partition). Uses the commits' row counts only; stops at a missing commit."""
        begin, stop = DeltaOffset.parse(start), DeltaOffset.parse(end)
        if not begin < stop:
            return
        for commit in self._log(ssp.stream).commits(begin.version, stop.version):
            rows = commit.rows_by_partition().get(ssp.partition, 0)
            first = begin.index if commit.version == begin.version else 0
            last = stop.index if commit.version == stop.version else rows
            available = max(0, min(rows, last) - first)
            if available:
                yield commit.version, first, available, rows

    def offset_after(self, ssp: SystemStreamPartition, start: str, end: str, n: int) -> str:
        """The offset after the first ``n`` rows of ``ssp`` in ``[start, end)``, or ``end`` when fewer lie there.

        Lets a planner cap a batch at ``n`` messages from commit row counts, without reading data. A
        batch that ends with the last row of a version ends at ``<version + 1>:0``, so it equals
        ``upcoming`` when nothing follows. Control rows count like any other row.
        """
        if n < 1:
            raise ValueError(f"offset_after needs n >= 1, got {n}")
        remaining = n
        for version, first, available, rows in self._slices(ssp, start, end):
            if available >= remaining:
                if first + remaining >= rows:
                    return str(DeltaOffset(version + 1, 0))
                return str(DeltaOffset(version, first + remaining))
            remaining -= available
        return end

    def count_between(self, ssp: SystemStreamPartition, start: str, end: str) -> int:
        """How many rows of ``ssp`` (user and control) lie in ``[start, end)``; 0 when ``start >= end``.

        For lag: counted from commit row counts (Delta ``numRecords``), without reading data files.
        """
        return sum(available for _, _, available, _ in self._slices(ssp, start, end))

    def _index(self, stream: str, log: DeltaLog) -> tuple[_StreamIndex, int]:
        index = self._indexes.get(stream)
        if index is not None and index.identity != log.identity:
            index = None  # the table was deleted and created again: its versions start over
        latest = log.latest_version(index.scanned_to if index is not None else None)
        if latest is None:
            raise StreamNotFoundError(stream, log.location.uri)
        horizon = read_horizon(log)
        if index is None or horizon != index.horizon or index.identity != log.identity:
            present = log.present_versions()
            first = max(present[0] if present else 0, horizon)
            index = _StreamIndex(horizon=horizon, scanned_to=first - 1, identity=log.identity)
            self._indexes[stream] = index
            # Commits before the horizon are not scanned: the count comes from the table's properties again.
            self._partitions.pop(stream, None)
        for commit in log.commits(index.scanned_to + 1, latest):
            if commit.partitions is not None:
                index.partitions = commit.partitions
            for partition, rows in commit.rows_by_partition().items():
                if rows <= 0:
                    continue
                span = index.spans.setdefault(partition, _PartitionSpan())
                if span.first_version is None:
                    span.first_version = commit.version
                span.last_version = commit.version
                span.last_rows = rows
            index.scanned_to = commit.version
        return index, latest

    def get_system_stream_metadata(self, streams: set[str] | list[str]) -> dict[str, SystemStreamMetadata]:
        """Per stream and partition: ``oldest`` and ``newest`` readable offsets (None when empty) and
        ``upcoming`` (``<latest version + 1>:0``), the offset the next row written will get."""
        out: dict[str, SystemStreamMetadata] = {}
        for stream in streams:
            log = DeltaLog(self.settings.location(stream))
            index, latest = self._index(stream, log)
            # A stream never loses partitions (grow_stream): the larger of the table's count and the newest commit's.
            count = max(self.partition_count(stream), index.partitions or 0)
            self._partitions[stream] = count
            upcoming = str(DeltaOffset(latest + 1, 0))
            partitions: dict[int, SystemStreamPartitionMetadata] = {}
            for p in range(count):
                span = index.spans.get(p)
                if span is None or span.first_version is None or span.last_version is None:
                    partitions[p] = SystemStreamPartitionMetadata(None, None, upcoming)
                else:
                    partitions[p] = SystemStreamPartitionMetadata(
                        str(DeltaOffset(span.first_version, 0)),
                        str(DeltaOffset(span.last_version, span.last_rows - 1)), upcoming)
            out[stream] = SystemStreamMetadata(stream, partitions, {PARTITION_COUNT_PROPERTY: str(count),
                                                                    "version": str(latest)})
        return out


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"
