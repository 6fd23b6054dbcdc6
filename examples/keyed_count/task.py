"""The keyed-count task: counts messages per key in a RocksDB store and emits the running count.

For every input message with key ``k`` the task increments ``counts[k]`` and sends
``{"key": k, "count": n}`` to ``delta.counts`` (or the ``system.stream`` named by the job's
``keyed_count.output`` key, e.g. ``kafka.counts``) keyed by ``k``. The last count per key in the output
therefore equals the number of input messages with that key — exactly, across restarts.
"""

from __future__ import annotations

from typing import Any

from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream

__all__ = ["KeyedCountTask"]

OUTPUT = SystemStream("delta", "counts")


class KeyedCountTask:
    """StreamTask + InitableTask: the store ``counts`` maps key (string) → count (json int)."""

    output: SystemStream = OUTPUT

    def init(self, context: Any) -> None:
        """Take the task's ``counts`` store (restored by the runtime before this call)."""
        self.store = context.get_store("counts")
        self.output = SystemStream.parse(context.config.get("keyed_count.output", str(OUTPUT)))

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        """Count one message and send the running count of its key."""
        key = envelope.key.decode() if isinstance(envelope.key, bytes) else str(envelope.key)
        count = (self.store.get(key) or 0) + 1
        self.store.put(key, count)
        collector.send(OutgoingMessageEnvelope(self.output, {"key": key, "count": count}, key=key))
