"""Task classes the runtime tests run on Spark executors (imported there by dotted path)."""

from __future__ import annotations

from typing import Any

from sparza.streams import OutgoingMessageEnvelope, SystemStream

COUNTS = SystemStream("delta", "counts")


class FailingOnKeyTask:
    """Counts like the example but raises ValueError on key ``bad``."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        key = envelope.key.decode()
        if key == "bad":
            raise ValueError("key 'bad' is not allowed")
        count = (self.store.get(key) or 0) + 1
        self.store.put(key, count)
        collector.send(OutgoingMessageEnvelope(COUNTS, {"key": key, "count": count}, key=key))


class EndOfStreamTask:
    """Counts in the store and writes each key's final count once, at end-of-stream; ``close`` appends a
    line to ``<test.close.dir>/<task name>`` so a test can see it ran once per task."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")
        self.close_dir = context.config.get_str("test.close.dir", None)
        self.task_name = context.task_name

    def close(self) -> None:
        if self.close_dir:
            with open(f"{self.close_dir}/{self.task_name}", "a", encoding="utf-8") as fh:
                fh.write("closed\n")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        key = envelope.key.decode()
        self.store.put(key, (self.store.get(key) or 0) + 1)

    def on_end_of_stream(self, collector: Any, coordinator: Any) -> None:
        for key, count in self.store.all():
            collector.send(OutgoingMessageEnvelope(COUNTS, {"key": key, "count": count}, key=key))


class WindowingTask:
    """WindowableTask: counts in the store per message, sends nothing from ``process``; every
    ``window()`` sends each key's current count (so the last window holds the final counts)."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        key = envelope.key.decode()
        self.store.put(key, (self.store.get(key) or 0) + 1)

    def window(self, collector: Any, coordinator: Any) -> None:
        for key, count in self.store.all():
            collector.send(OutgoingMessageEnvelope(COUNTS, {"key": key, "count": count}, key=key))


class UnreachableLookupTask:
    """``init`` cannot reach a service it needs: a ``ConnectionError`` a new attempt might cure, every time."""

    def init(self, context: Any) -> None:
        raise ConnectionError("cannot reach the lookup service at lookup.invalid:443")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        raise AssertionError("never delivered: init failed")


class HangingTask:
    """Counts like the example, but its first message of key ``hang`` keeps ``process`` busy for ``test.hang.s``
    seconds (a call that never returns in time: a stuck client, a lock): the task commits nothing meanwhile."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")
        self.hang_s = float(context.config.get("test.hang.s", "60"))

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        import time

        key = envelope.key.decode()
        count = (self.store.get(key) or 0) + 1
        if key == "hang" and count == 1:
            time.sleep(self.hang_s)
        self.store.put(key, count)
        collector.send(OutgoingMessageEnvelope(COUNTS, {"key": key, "count": count}, key=key))
