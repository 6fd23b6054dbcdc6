"""Applications of the join, session, trigger and drain tests, importable by dotted path (``app.class``; one
low-level task, ``task.class``).

Everything is configured by ``app.test.*`` keys so one class covers each generated shape:

- ``app.test.partitions``: partitions of the ``partition_by`` streams;
- ``app.test.early`` / ``app.test.late``: ``count:N`` or ``ms:N`` (empty: none);
- ``app.test.lateness.ms``: the operator's allowed lateness.
"""

from __future__ import annotations

from typing import Any

from sparza.api import StreamApplication, Trigger, WindowPane, Windows, every


def _trigger(text: str) -> Trigger | None:
    if not text:
        return None
    what, _, value = text.partition(":")
    return every(int(value)) if what == "count" else every(ms=int(value))


def _settings(app: StreamApplication) -> dict[str, Any]:
    config = app.config
    return {"early": _trigger(str(config.get_str("app.test.early", "") or "")),
            "late": _trigger(str(config.get_str("app.test.late", "") or "")),
            "allowed_lateness_ms": int(config.get_str("app.test.lateness.ms", "0"))}


def _partitions(app: StreamApplication) -> int:
    return int(app.config.get_str("app.test.partitions", "2"))


def pane_record(pane: WindowPane) -> dict[str, Any]:
    """A pane as a JSON object (a retraction's count and sum are null)."""
    value = pane.value or [None, None]
    return {"key": pane.key, "start": pane.start, "end": pane.end, "count": value[0], "sum": value[1],
            "pane": str(pane.pane), "index": pane.index}


def _fold(message: dict[str, Any], acc: list[int]) -> list[int]:
    return [acc[0] + 1, acc[1] + int(message["n"])]


def _merge(a: list[int], b: list[int]) -> list[int]:
    return [a[0] + b[0], a[1] + b[1]]


class OrdersPayments:
    """``mem.orders`` ⋈ ``mem.payments`` on ``order`` within ``app.test.within.ms``: both sides repartitioned by
    order (``app.test.repartition``, default true) or joined where they are; kind ``app.test.join.kind``, what a
    drain does with the buffers ``app.test.on.drain``. Each result is ``{"order", "l": order id or None, "r":
    payment id or None}`` in ``mem.joined``."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        config = app.config
        within = int(config.get_str("app.test.within.ms", "1000"))
        kind = str(config.get_str("app.test.join.kind", "inner"))
        lateness = int(config.get_str("app.test.lateness.ms", "0"))
        orders = app.input("mem.orders", serde="json")
        payments = app.input("mem.payments", serde="json")
        if str(config.get_str("app.test.repartition", "true")) == "true":
            orders = orders.partition_by(lambda m: m["order"], "orders-by-order", _partitions(app))
            payments = payments.partition_by(lambda m: m["order"], "payments-by-order", _partitions(app))
        out = app.output("mem.joined", serde="json")
        (orders.join(payments, lambda o: o["order"], lambda p: p["order"],
                     lambda o, p: {"order": (o or p)["order"], "l": o and o["id"], "r": p and p["id"]},
                     within=within, kind=kind, name="orders-payments", allowed_lateness_ms=lateness,
                     on_drain=str(config.get_str("app.test.on.drain", "emit")))
         .send_to(out))


class SamzaJoin:
    """The same inner join written as a Samza user would: a ``JoinFunction`` object and a TTL."""

    class ByOrder:
        """Samza's JoinFunction: the result and both keys."""

        def apply(self, message: Any, other: Any) -> Any:
            return {"order": message["order"], "l": message["id"], "r": other["id"]}

        def getFirstKey(self, message: Any) -> Any:
            return message["order"]

        def getSecondKey(self, message: Any) -> Any:
            return message["order"]

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        from datetime import timedelta

        orders = app.input("mem.orders", serde="json")
        payments = app.input("mem.payments", serde="json")
        orders.join(payments, self.ByOrder(), "string", "json", "json", timedelta(seconds=1), "samza-join").send_to(
            app.output("mem.joined", serde="json"))


class EditSessions:
    """Sessions of edits per user (``app.test.gap.ms``), count and sum of ``n``, with the triggers of
    ``app.test.*``; ``app.test.merge`` true: accumulators merge (else each session keeps its messages)."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        config = app.config
        gap = int(config.get_str("app.test.gap.ms", "1000"))
        merge = _merge if str(config.get_str("app.test.merge", "false")) == "true" else None
        edits = app.input("mem.edits", serde="json")
        (edits.partition_by(lambda m: m["user"], "by-user", _partitions(app))
         .window(Windows.session(gap, lambda m: m["user"], [0, 0], _fold, merge, **_settings(app)), name="sessions")
         .map(pane_record)
         .send_to(app.output("mem.sessions", serde="json")))


class TriggeredCounts:
    """Count and sum of ``n`` per key in tumbling (or, with ``app.test.slide.ms``, sliding) windows of
    ``app.test.size.ms`` with the triggers of ``app.test.*``."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        config = app.config
        size = int(config.get_str("app.test.size.ms", "1000"))
        slide = int(config.get_str("app.test.slide.ms", str(size)))
        spec = (Windows.tumbling(size, lambda m: m["key"], [0, 0], _fold, **_settings(app)) if slide == size
                else Windows.sliding(size, slide, lambda m: m["key"], [0, 0], _fold, **_settings(app)))
        events = app.input("mem.events", serde="json")
        (events.partition_by(lambda m: m["key"], "by-key", _partitions(app))
         .window(spec, name="counts")
         .map(pane_record)
         .send_to(app.output("mem.counts", serde="json")))


class JoinThenWindow:
    """A left join whose results (and unmatched orders) are counted in tumbling windows in the same stage: the
    window must see the join's unmatched messages before its watermark passes them (the join's holdback)."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        config = app.config
        within = int(config.get_str("app.test.within.ms", "1000"))
        size = int(config.get_str("app.test.size.ms", "1000"))
        orders = app.input("mem.orders", serde="json").partition_by(lambda m: m["order"], "o", _partitions(app))
        payments = app.input("mem.payments", serde="json").partition_by(lambda m: m["order"], "p", _partitions(app))
        (orders.join(payments, lambda o: o["order"], lambda p: p["order"],
                     lambda o, p: {"key": "paid" if p else "unpaid", "n": 1}, within=within, kind="left")
         .window(Windows.tumbling(size, lambda m: m["key"], [0, 0], _fold), name="paid")
         .map(pane_record)
         .send_to(app.output("mem.paid", serde="json")))


class DrainingCount:
    """A low-level task (``task.class``): counts messages per key in store ``counts``; ``on_drain`` numbers the
    drains it saw (kept in the store) and emits every count with that number to ``mem.totals``."""

    def init(self, context: Any) -> None:
        """Take the store and the task name."""
        self.store = context.get_store("counts")
        self.name = context.task_name

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        """Count the message under its key."""
        key = envelope.key.decode() if isinstance(envelope.key, bytes) else str(envelope.key)
        self.store.put(key, (self.store.get(key) or 0) + 1)

    def on_drain(self, collector: Any, coordinator: Any) -> None:
        """Emit every count, numbered by drain."""
        from sparza.streams import OutgoingMessageEnvelope, SystemStream

        drains = (self.store.get("#drains") or 0) + 1
        self.store.put("#drains", drains)
        for key, count in self.store.all():
            if key != "#drains":
                collector.send(OutgoingMessageEnvelope(SystemStream("mem", "totals"), {
                    "task": self.name, "drain": drains, "key": key, "count": count}, key=key))
