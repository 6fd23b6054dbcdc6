"""The task bench/storage_requests.py runs: a keyed count that can also be asked only to read a key."""

from __future__ import annotations

from typing import Any

from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream

OUT = SystemStream("mem", "counts")


class CountOrRead:
    """Counts messages per key in the RocksDB store ``counts`` and sends the count; a message whose value is
    ``"read"`` only reads its key's count and sends nothing (a commit of such messages changes nothing but its
    offsets)."""

    def init(self, context: Any) -> None:
        """Take the store."""
        self.store = context.get_store("counts")

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        """Count (or only read) the message's key."""
        key = envelope.key.decode() if isinstance(envelope.key, bytes) else str(envelope.key)
        count = self.store.get(key) or 0
        if envelope.message == "read":
            return
        count += 1
        self.store.put(key, count)
        collector.send(OutgoingMessageEnvelope(OUT, {"key": key, "count": count}, key=key))
