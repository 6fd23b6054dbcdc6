"""The keyed count with an Avro record in its store, in two versions: the example of state schema evolution.

Version 1 (``visits-v1.yaml``) keeps ``{"count": n}`` per key in the store ``visits`` (Avro schema ``Visits``
with one field). Version 2 (``visits-v2.yaml``) adds a field with a default to the schema, ``last_seen`` (the
event time of the key's latest message, 0 for values version 1 wrote), and sets it on every update. Started on
version 1's state, version 2 reads the old values through its schema (sparza converts each one once, when the
store opens) and counts on: see docs/state.md, "State schema evolution".
"""

from __future__ import annotations

from typing import Any

from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream

__all__ = ["VisitsTask"]

OUTPUT = SystemStream("delta", "counts")


class VisitsTask:
    """StreamTask + InitableTask: the store ``visits`` maps key (string) → an Avro ``Visits`` record."""

    def init(self, context: Any) -> None:
        """Take the task's ``visits`` store and the version of the job (``visits.version``, 1 by default)."""
        self.store = context.get_store("visits")
        self.version = int(context.config.get("visits.version", "1"))

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        """Count one message (version 2: and remember its event time); send the key's record."""
        key = envelope.key.decode() if isinstance(envelope.key, bytes) else str(envelope.key)
        record = self.store.get(key) or {"count": 0}
        record = {**record, "count": record["count"] + 1}
        if self.version >= 2:
            record["last_seen"] = max(record.get("last_seen", 0), envelope.timestamp or 0)
        self.store.put(key, record)
        collector.send(OutgoingMessageEnvelope(OUTPUT, {"key": key, **record}, key=key))
