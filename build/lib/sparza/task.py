"""The low-level task API, as Samza's: a task processes one message at a time.

A task class may subclass these protocols or simply define the methods; the runtime checks
which optional interfaces a task implements. Lifecycle, per task instance (one per partition):

1. ``init(context)`` once, after the task's stores are restored (``InitableTask``);
2. ``process(envelope, collector, coordinator)`` for every message, in offset order per SSP;
3. ``window(collector, coordinator)`` every ``task.window.ms`` of processing time, checked at
   batch boundaries (``WindowableTask``);
4. ``on_watermark(watermark_ms, collector, coordinator)`` when the task's watermark advances
   (``WatermarkListenerTask``);
5. ``on_end_of_stream(collector, coordinator)`` once, when every input of the task has ended
   (``EndOfStreamListenerTask``);
6. ``on_drain(collector, coordinator)`` once per drain of the job (``sparza run --drain``, ``sparza drain``),
   when the task has processed its inputs up to the offsets observed at the request and every upstream
   task drained, after the watermark callback of that batch (``DrainListenerTask``). A drained task is
   not ended: the job's next run gives it new input again;
7. ``close()`` once, after the commit of the batch in which every input of the task ended
   (``ClosableTask``). Not guaranteed for a task that never ends (Spark may stop or reuse its
   Python worker at any time) nor after a crash.

Messages sent through the collector are durable only after the batch commits; a batch that is
replayed after a failure runs again from the state of the previous commit, so ``process`` must
not have side effects outside stores and the collector.

A :class:`BatchStreamTask` gets the same lifecycle with ``process_batch(batch, collector,
coordinator)`` in place of step 2: each run of consecutive user messages of one SSP comes as one
:class:`MessageBatch` of Arrow columns (raw bytes: no serde is applied), in offset order, and the
collector also takes whole Arrow batches (:meth:`BatchCollector.send_batch`). Per-message Python
costs a few microseconds a message; column-at-a-time code can go far below that. The guarantees are
the same (the batch is the unit that commits or runs again); an exception from ``process_batch``
fails (or, if ``task.ignored.exceptions`` names it, skips and counts) every message of that batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BatchCollector",
    "BatchStreamTask",
    "ClosableTask",
    "DrainListenerTask",
    "EndOfStreamListenerTask",
    "InitableTask",
    "MessageBatch",
    "MessageCollector",
    "StreamTask",
    "TaskContext",
    "TaskCoordinator",
    "WatermarkListenerTask",
    "WindowableTask",
]


class MessageCollector(Protocol):
    """Where a task sends output messages."""

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        """Send one message; it is flushed with the batch's commit."""
        ...


class BatchCollector(MessageCollector, Protocol):
    """The collector a :class:`BatchStreamTask` gets: single messages and whole Arrow batches."""

    def send_batch(self, stream: SystemStream, rows: pa.RecordBatch | pa.Table) -> None:
        """Send many messages at once, in row order: columns ``key`` (binary, may be null), ``value``
        (binary), optionally ``timestamp`` (int64 epoch ms; null or missing: now) and ``partition``
        (int32). Without a partition a row goes where :meth:`send` would send it with that key; a row
        with neither key nor partition is refused."""
        ...


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """Consecutive user messages of one SSP, in offset order, as Arrow columns: ``offset`` (string),
    ``key`` and ``value`` (binary, raw: no serde applied), ``timestamp`` (int64 epoch ms)."""

    ssp: SystemStreamPartition
    rows: pa.RecordBatch

    @property
    def num_rows(self) -> int:
        """How many messages."""
        return int(self.rows.num_rows)

    @property
    def keys(self) -> pa.Array:
        """The ``key`` column."""
        return self.rows.column("key")

    @property
    def values(self) -> pa.Array:
        """The ``value`` column."""
        return self.rows.column("value")

    @property
    def timestamps(self) -> pa.Array:
        """The ``timestamp`` column."""
        return self.rows.column("timestamp")

    @property
    def offsets(self) -> pa.Array:
        """The ``offset`` column."""
        return self.rows.column("offset")

    def envelopes(self) -> Iterator[IncomingMessageEnvelope]:
        """The messages one by one (for code that mixes column work with per-message logic)."""
        columns = [self.rows.column(name).to_pylist() for name in ("offset", "key", "value", "timestamp")]
        for offset, key, value, ts in zip(*columns, strict=True):
            yield IncomingMessageEnvelope(self.ssp, offset, key, value, ts,
                                          (len(key) if key else 0) + (len(value) if value else 0))


class TaskCoordinator(Protocol):
    """Lets a task ask the runtime for a commit or a shutdown."""

    def commit(self) -> None:
        """Ask for a commit at the end of the current batch (every batch commits anyway)."""
        ...

    def shutdown(self) -> None:
        """Ask the job to commit and stop at the end of the current batch."""
        ...


class TaskContext(Protocol):
    """What ``init`` gets: the task's identity, config, metrics and stores."""

    @property
    def task_name(self) -> str:
        """``Partition N``: the task's name (tasks are partitions, as Samza's GroupByPartition)."""
        ...

    @property
    def config(self) -> Config:
        """The job's config."""
        ...

    @property
    def metrics(self) -> MetricsRegistry:
        """The task's metrics registry."""
        ...

    @property
    def input_ssps(self) -> list[SystemStreamPartition]:
        """The SSPs this task consumes (including broadcast ones)."""
        ...

    def get_store(self, name: str) -> Any:
        """The key-value store ``stores.<name>`` of this task (adjunct stores are read-only)."""
        ...


@runtime_checkable
class StreamTask(Protocol):
    """Processes one incoming message at a time."""

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector,
                coordinator: TaskCoordinator) -> None:
        """Handle one message: read/write stores, send output through ``collector``."""
        ...


@runtime_checkable
class BatchStreamTask(Protocol):
    """Processes the messages of a batch as Arrow columns, a run of one SSP at a time (see the module
    docstring). A class may also define ``process``: ``process_batch`` is the one the runtime calls."""

    def process_batch(self, batch: MessageBatch, collector: BatchCollector, coordinator: TaskCoordinator) -> None:
        """Handle ``batch``: read/write stores (``get_all``/``put_all`` keep the per-key overhead down), send
        output through ``collector`` (``send_batch`` for Arrow rows)."""
        ...


@runtime_checkable
class InitableTask(Protocol):
    """A task that sets itself up (opens stores) before the first message."""

    def init(self, context: TaskContext) -> None:
        """Called once per task instance, after its stores are restored."""
        ...


@runtime_checkable
class WindowableTask(Protocol):
    """A task called periodically (``task.window.ms``) to emit aggregates."""

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called at a batch boundary when ``task.window.ms`` has passed since the last call."""
        ...


@runtime_checkable
class ClosableTask(Protocol):
    """A task with resources to release."""

    def close(self) -> None:
        """Called once after the task's inputs have all ended and that state is committed."""
        ...


@runtime_checkable
class EndOfStreamListenerTask(Protocol):
    """A task told when all its inputs have ended (bounded inputs, end-of-stream control messages)."""

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called once, after the last message of the last input; may send final results."""
        ...


@runtime_checkable
class DrainListenerTask(Protocol):
    """A task told when the job drains (Samza's drain): it emits what it holds (open windows, partial
    aggregates) so the job's next version starts clean."""

    def on_drain(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called once per drain, after the last message before it; may send final results (committed with the
        batch, before the task's drain goes downstream)."""
        ...


@runtime_checkable
class WatermarkListenerTask(Protocol):
    """A task told when its event-time watermark advances (min over its input SSPs)."""

    def on_watermark(self, watermark_ms: int, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called with the new watermark; it never goes backwards, across restarts included."""
        ...
