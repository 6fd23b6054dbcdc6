"""Jobs of the partition-expansion tests: a keyed count that says which task counted, and a stateless copy."""

from __future__ import annotations

from typing import Any

from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream


class TaskKeyCount:
    """Counts per key in store ``counts`` and sends ``{"key", "count", "task"}`` to ``partition_test.output``."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")
        self.task = context.task_name
        self.out = SystemStream.parse(context.config.get("partition_test.output"))

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        key = envelope.key.decode() if isinstance(envelope.key, bytes) else str(envelope.key)
        count = (self.store.get(key) or 0) + 1
        self.store.put(key, count)
        collector.send(OutgoingMessageEnvelope(self.out, {"key": key, "count": count, "task": self.task}, key=key))


class TaskCopy:
    """Stateless: sends ``{"value", "task"}`` of every message to ``partition_test.output``."""

    def init(self, context: Any) -> None:
        self.task = context.task_name
        self.out = SystemStream.parse(context.config.get("partition_test.output"))

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        value = envelope.message.decode() if isinstance(envelope.message, bytes) else str(envelope.message)
        collector.send(OutgoingMessageEnvelope(self.out, {"value": value, "task": self.task}, key=value))
