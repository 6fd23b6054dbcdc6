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


class HangAfterFlush:
    """A commit listener (``task.commit.listeners``): the first task to create the file ``test.hang.marker`` (it
    writes its name there) stops right after its producers flushed, until its process is killed (its Python
    worker's parent, the Spark daemon, goes) or ``test.hang.s`` passed: a kill in the middle of a commit."""

    def __init__(self, config: Any) -> None:
        self.marker = config.get_str("test.hang.marker", None)
        self.hang_s = float(config.get_str("test.hang.s", "300") or "300")

    def on_step(self, task: str, step: Any, batch: int) -> None:
        import os
        import time

        if step.value != "after-flush" or not self.marker:
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{task}\n".encode())
        os.close(fd)
        parent, deadline = os.getppid(), time.monotonic() + self.hang_s
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.1)
        raise RuntimeError(f"HangAfterFlush: task '{task}' was not killed within {self.hang_s:.0f} s")
