"""The keyed count with heavy state, for benchmarks of where state lives (``bench/affinity.py``).

Like ``examples.keyed_count.task.KeyedCountTask`` (same input, same ``{"key", "count"}`` output, so the same
oracle checks it), but each key's store value carries ``heavy_count.value.bytes`` (default 1024) bytes of
incompressible padding drawn from the key, so a task's store grows by about that much per distinct key: a
task with 100,000 keys holds ~100 MB, and moving it costs what moving real state costs. Store ``counts``:
key serde ``string``, value serde ``bytes`` (8-byte big-endian count, then the padding).
"""

from __future__ import annotations

import random
from typing import Any

from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream

__all__ = ["HeavyCountTask"]


class HeavyCountTask:
    """StreamTask + InitableTask: ``counts`` maps key → count and the key's padding."""

    def init(self, context: Any) -> None:
        """Take the ``counts`` store, the output stream and the padding size from the config."""
        self.store = context.get_store("counts")
        self.output = SystemStream.parse(context.config.get("keyed_count.output", "delta.counts"))
        self.pad = int(context.config.get("heavy_count.value.bytes", "1024"))

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        """Count one message (its key's first message draws the padding) and send the running count."""
        key = envelope.key.decode() if isinstance(envelope.key, bytes) else str(envelope.key)
        stored = self.store.get(key)
        if stored is None:
            count, padding = 1, random.Random(key).randbytes(self.pad)
        else:
            count, padding = int.from_bytes(stored[:8], "big") + 1, stored[8:]
        self.store.put(key, count.to_bytes(8, "big") + padding)
        collector.send(OutgoingMessageEnvelope(self.output, {"key": key, "count": count}, key=key))
