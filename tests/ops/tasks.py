"""The job of the day-two tests: a keyed count that writes each new count to a stream and to an upsert table,
and (version 2) also counts into a second store."""

from __future__ import annotations

from typing import Any

from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream


class CountToStreamAndTable:
    """Counts per key in store ``counts``; sends ``{"key", "count"}`` to ``ops_test.stream`` and, when set, to
    ``ops_test.table``; with ``ops_test.seen.store`` also counts into that store and adds its value as
    ``seen`` (v2 of the job: a store added by an upgrade). With ``ops_test.record.version`` the store holds Avro
    records: ``{"count"}`` in version 1, ``{"count", "since"}`` in version 2 (``since``: the version that first saw
    the key; its schema default, 1, for keys of version 1), and the output carries ``since``."""

    def init(self, context: Any) -> None:
        cfg = context.config
        self.store = context.get_store("counts")
        version = cfg.get("ops_test.record.version", "")
        self.version = int(version) if version else None
        self.stream = SystemStream.parse(cfg.get("ops_test.stream"))
        table = cfg.get("ops_test.table", "")
        self.table = SystemStream.parse(table) if table else None
        seen = cfg.get("ops_test.seen.store", "")
        self.seen = context.get_store(seen) if seen else None

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        key = envelope.key.decode() if isinstance(envelope.key, bytes) else str(envelope.key)
        out: dict[str, Any] = {"key": key}
        if self.version is None:
            count = (self.store.get(key) or 0) + 1
            self.store.put(key, count)
        else:
            old = self.store.get(key)
            record: dict[str, Any] = {"count": (old["count"] if old else 0) + 1}
            if self.version >= 2:
                record["since"] = old["since"] if old else self.version
                out["since"] = record["since"]
            self.store.put(key, record)
            count = record["count"]
        out["count"] = count
        if self.seen is not None:
            seen = (self.seen.get(key) or 0) + 1
            self.seen.put(key, seen)
            out["seen"] = seen
        collector.send(OutgoingMessageEnvelope(self.stream, out, key=key))
        if self.table is not None:
            collector.send(OutgoingMessageEnvelope(self.table, {"key": key, "count": count}, key=key))
