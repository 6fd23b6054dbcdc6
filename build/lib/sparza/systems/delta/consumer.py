"""``DeltaSystemConsumer``: reads SSP offset ranges as Arrow batches or as envelopes.

Constructed from ``(system_name, config)`` only, so it can be built on a Spark executor from a
pickled :class:`~sparza.config.Config`; it opens nothing until the first read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.streams import IncomingMessageEnvelope, SystemStreamPartition
from sparza.systems.delta.log import DeltaLog
from sparza.systems.delta.offsets import DeltaOffset
from sparza.systems.delta.reader import DEFAULT_BATCH_ROWS, read_partition
from sparza.systems.delta.settings import DeltaSystemSettings
from sparza.systems.rows import end_of_stream_batch, read_envelopes

__all__ = ["DeltaSystemConsumer"]


class DeltaSystemConsumer:
    """Reads the partitions of a delta system's streams in offset order.

    ``start`` None means the oldest readable offset. A *bounded* read (``bounded=True``, or the
    stream's ``bounded`` config when ``bounded`` is None) with no ``end`` stops at the upcoming
    offset seen when the read began and then yields one synthetic end-of-stream row (producer
    ``""``, offset = that bound) when ``include_control`` is on.
    """

    def __init__(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> None:
        self.system_name = system_name
        self.settings = DeltaSystemSettings(system_name, config)
        self.metrics = metrics
        self._logs: dict[str, DeltaLog] = {}

    def __getstate__(self) -> dict[str, object]:
        # Open table handles hold native filesystems: a pickled consumer (to an executor) reopens them.
        return {"system_name": self.system_name, "settings": DeltaSystemSettings(self.system_name,
                                                                                 self.settings.config),
                "metrics": self.metrics, "_logs": {}}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    # --- SystemConsumer lifecycle ------------------------------------------------------------
    def start(self) -> None:
        """Nothing to open ahead of time: tables are opened on first read."""

    def stop(self) -> None:
        """Drop the per-stream handles (the process-wide commit cache stays)."""
        self._logs.clear()

    # --- reading ---------------------------------------------------------------------------
    def log(self, stream: str) -> DeltaLog:
        """The Delta log reader of ``stream`` (one per stream per consumer)."""
        log = self._logs.get(stream)
        if log is None:
            log = DeltaLog(self.settings.location(stream))
            self._logs[stream] = log
        return log

    def read_arrow(self, ssp: SystemStreamPartition, start: str | DeltaOffset | None,
                   end: str | DeltaOffset | None = None, include_control: bool = True, *,
                   bounded: bool | None = None, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Rows of ``ssp`` in ``[start, end)`` as Arrow batches of :data:`READ_SCHEMA`, in offset order.

        Columns: ``offset`` (string), ``partition`` (int32), ``key``/``value`` (binary), ``timestamp``
        (int64, event ms), ``type`` (int8 :class:`MessageType`), ``producer`` (string).
        """
        log = self.log(ssp.stream)
        if start is None:
            from sparza.systems.delta.retention import first_readable_version, oldest_offset

            begin = oldest_offset(log, ssp.partition) or DeltaOffset(first_readable_version(log), 0)
        else:
            begin = DeltaOffset.parse(start)
        stop = None if end is None else DeltaOffset.parse(end)
        is_bounded = self.settings.is_bounded(ssp.stream) if bounded is None else bounded
        emit_eos = False
        if is_bounded and stop is None:
            latest = log.latest_version()
            stop = DeltaOffset(0 if latest is None else latest + 1, 0)
            emit_eos = include_control
        rows = 0
        started = time.perf_counter()
        for batch in read_partition(log, ssp.partition, begin, stop, include_control=include_control,
                                    batch_rows=batch_rows):
            rows += batch.num_rows
            yield batch
        if emit_eos and stop is not None:
            yield end_of_stream_batch(ssp.partition, str(stop), int(time.time() * 1000))
        if self.metrics is not None:
            group = self.system_name
            self.metrics.counter(group, "messages-read").inc(rows)
            self.metrics.timer(group, "read-ms").update((time.perf_counter() - started) * 1000.0)

    def read(self, ssp: SystemStreamPartition, start: str | DeltaOffset | None,
             end: str | DeltaOffset | None = None, include_control: bool = True, *,
             bounded: bool | None = None) -> Iterator[IncomingMessageEnvelope]:
        """The same rows as :meth:`read_arrow`, as envelopes (key and message as bytes)."""
        return read_envelopes(ssp, self.read_arrow(ssp, start, end, include_control, bounded=bounded))
