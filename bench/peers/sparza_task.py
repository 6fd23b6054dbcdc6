"""The peer benchmark's keyed count as a sparza task (``examples/keyed_count`` with the key read from the JSON
message, as every other engine of ``bench/peers`` reads it): run by ``sparza run`` on a config that
``bench/peers/run.py`` writes."""

from __future__ import annotations

from typing import Any

from sparza.streams import OutgoingMessageEnvelope, SystemStream

__all__ = ["PeerCountTask"]


class PeerCountTask:
    """Count messages per JSON ``key`` in the RocksDB store ``counts``; send each running count to ``peers.output``."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")
        self.output = SystemStream.parse(context.config.get("peers.output"))

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        key = envelope.message["key"]
        count = (self.store.get(key) or 0) + 1
        self.store.put(key, count)
        collector.send(OutgoingMessageEnvelope(self.output, {"key": key, "count": count}, key=key))
