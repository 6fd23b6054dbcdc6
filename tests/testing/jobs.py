"""Jobs the TestRunner tests run by dotted path: a low-level task with every optional capability and a
one-stage event-time window application."""

from __future__ import annotations

from typing import Any, ClassVar

from sparza.api import StreamApplication, Windows
from sparza.api.examples import pane_to_json
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream

OUT = SystemStream("mem", "out")

KEYED_COUNT: dict[str, str] = {
    "systems.delta.samza.offset.default": "oldest",
    "systems.delta.streams.counts.samza.key.serde": "string",
    "systems.delta.streams.counts.samza.msg.serde": "json",
    "stores.counts.factory": "rocksdb",
    "stores.counts.key.serde": "string",
    "stores.counts.msg.serde": "json",
    "stores.counts.backup.factories": "blobstore",
    "task.max.batch.messages": "4",
}
"""The example keyed count's config under TestRunner: RocksDB store backed up, 4 messages a batch."""


class SumTask:
    """Sums ``int`` values per key in the memory store ``sums``; ``window`` emits every sum, end-of-stream
    emits a marker, ``close`` records the task name (class-level, read by the tests)."""

    closed: ClassVar[list[str]] = []

    def init(self, context: Any) -> None:
        """Take the store and the task name."""
        self.store = context.get_store("sums")
        self.name = context.task_name

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        """Add the value to its key's sum."""
        self.store.put(envelope.key, (self.store.get(envelope.key) or 0) + int(envelope.message))

    def window(self, collector: Any, coordinator: Any) -> None:
        """Emit every sum (``task.window.ms``)."""
        for key, total in self.store.all():
            collector.send(OutgoingMessageEnvelope(OUT, {"window": key, "sum": total}, key=key))

    def on_end_of_stream(self, collector: Any, coordinator: Any) -> None:
        """Emit a marker once every input ended."""
        collector.send(OutgoingMessageEnvelope(OUT, {"ended": self.name}, key="end"))

    def close(self) -> None:
        """Record that the runtime closed this task."""
        SumTask.closed.append(self.name)


class EventTimeCount:
    """Per key, a 1-second tumbling event-time window: count and sum of ``n`` (one stage, no repartition)."""

    def describe(self, app: StreamApplication) -> None:
        """``mem.events`` (json) → window → ``mem.windows`` (json)."""
        events = app.input("mem.events", serde="json")
        out = app.output("mem.windows", serde="json")
        (events.window(Windows.tumbling(1000, lambda m: m["key"], [0, 0],
                                        lambda m, acc: [acc[0] + 1, acc[1] + int(m["n"])]), name="counts")
         .map(pane_to_json)
         .send_to(out))


def task_defined_in_a_function() -> type:
    """A task class the runtime cannot import by dotted path."""

    class Local:
        def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
            """Nothing."""

    return Local


class BatchShapes:
    """A BatchStreamTask (+ WatermarkListenerTask) that writes, per batch it gets, one message with the batch's
    size and first offset, and one per watermark; ``app.test.fail.value`` makes a batch holding that value
    raise ``KeyError``."""

    def init(self, context: Any) -> None:
        """Read the failing value, if any."""
        fail = context.config.get_str("app.test.fail.value", None)
        self.fail = None if fail is None else fail.encode()

    def process_batch(self, batch: Any, collector: Any, coordinator: Any) -> None:
        """Record the batch's shape."""
        if self.fail is not None and self.fail in batch.values.to_pylist():
            raise KeyError(f"value {self.fail!r}")
        collector.send(OutgoingMessageEnvelope(OUT, {"rows": batch.num_rows, "first": batch.offsets[0].as_py(),
                                                     "ssp": str(batch.ssp)}, key="batch"))

    def on_watermark(self, watermark_ms: int, collector: Any, coordinator: Any) -> None:
        """Record the watermark."""
        collector.send(OutgoingMessageEnvelope(OUT, {"watermark": watermark_ms}, key="wm"))
