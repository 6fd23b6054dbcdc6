"""Example applications, importable by dotted path (``app.class``) on every executor.

Stream names and sizes come from config so tests, benchmarks and demos reuse them. Messages are
JSON objects ``{"key": str, "n": int, ...}`` whose event time is the row's ``timestamp``.

- :class:`RepartitionCount`: input → filter → ``partition_by(key)`` → map → output (2 stages).
- :class:`WindowedCount`: input → ``partition_by(key)`` → tumbling window count/sum → output (2 stages).
- :class:`WindowedCountTable`: as :class:`WindowedCount`, its panes upserted into a typed Delta table
  keyed by ``(key, window_start)`` (docs/tables.md).
- :class:`ThreeStageCount`: input → ``partition_by(key)`` → map → ``partition_by(bucket)`` → tumbling
  window → output (3 stages).
- :class:`PaidOrders`: orders ⋈ payments on the order id within ``app.example.within.ms`` (a stream-stream
  join; ``app.example.join.kind`` inner, left or outer), both sides repartitioned by order (3 stages).
- :class:`KeySessions`: session windows per key (``app.example.gap.ms``) upserted into a typed Delta table
  keyed by ``(key, window_start)``, with the ``pane`` column; a merged-away session's row is deleted.
- :class:`EarlyCounts`: tumbling windows with an early pane every ``app.example.early.messages`` messages
  and an allowed lateness (``app.example.lateness.ms``), each pane as JSON with its ``pane`` and ``index``.
"""

from __future__ import annotations

from typing import Any

from sparza.api.graph import MessageStream, OutputDescriptor, StreamApplication
from sparza.api.triggers import every
from sparza.api.windows import WindowPane, Windows

__all__ = ["EarlyCounts", "KeySessions", "PaidOrders", "RepartitionCount", "ThreeStageCount", "WindowedCount",
           "WindowedCountTable", "pane_to_json"]


def _cfg(app: StreamApplication, key: str, default: str) -> str:
    return str(app.config.get_str(f"app.example.{key}", default))


def _partitions(app: StreamApplication) -> int | None:
    value = app.config.get_int("app.example.partitions", None)
    return None if value is None else int(value)


def _keyed_events(app: StreamApplication) -> MessageStream:
    """``app.example.input`` (JSON, default ``delta.events``) repartitioned by ``key``: most examples' first stage."""
    return (app.input(_cfg(app, "input", "delta.events"), serde="json")
            .partition_by(lambda m: m["key"], "by-key", _partitions(app)))


def _json_output(app: StreamApplication) -> OutputDescriptor:
    """``app.example.output`` (default ``delta.out``) with JSON messages."""
    return app.output(_cfg(app, "output", "delta.out"), serde="json")


def _window_ms(app: StreamApplication) -> int:
    """``app.example.window.ms`` (default 1000)."""
    return int(_cfg(app, "window.ms", "1000"))


def pane_to_json(pane: WindowPane) -> dict[str, Any]:
    """A window pane as a JSON object: ``{key, start, end, count, sum}``."""
    return {"key": pane.key, "start": pane.start, "end": pane.end, "count": pane.value[0], "sum": pane.value[1]}


def _fold(message: dict[str, Any], acc: list[int]) -> list[int]:
    return [acc[0] + 1, acc[1] + int(message.get("n", 0))]


class RepartitionCount:
    """Drops messages with ``n < 0``, repartitions by key, tags each message with its stage-2 key."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph (``app.example.input`` / ``app.example.output``)."""
        events = app.input(_cfg(app, "input", "delta.events"), serde="json")
        (events.filter(lambda m: int(m.get("n", 0)) >= 0)
         .partition_by(lambda m: m["key"], "by-key", _partitions(app))
         .map(lambda m: {**m, "seen": "stage2"})
         .send_to(_json_output(app)))


class WindowedCount:
    """Per key and tumbling window (``app.example.window.ms``, default 1000): count and sum of ``n``."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        (_keyed_events(app)
         .window(Windows.tumbling(_window_ms(app), lambda m: m["key"], [0, 0], _fold), name="counts")
         .map(pane_to_json)
         .send_to(_json_output(app)))


class ThreeStageCount:
    """Repartition by key, then by ``bucket`` (key modulo 3 of its number), then count per bucket and window."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        (_keyed_events(app)
         .map(lambda m: {**m, "bucket": f"b{sum(map(ord, m['key'])) % 3}"})
         .partition_by(lambda m: m["bucket"], "by-bucket", _partitions(app))
         .window(Windows.tumbling(_window_ms(app), lambda m: m["bucket"], [0, 0], _fold), name="buckets")
         .map(pane_to_json)
         .send_to(_json_output(app)))


def _fold_fields(message: dict[str, Any], acc: dict[str, int]) -> dict[str, int]:
    return {"count": acc["count"] + 1, "sum": acc["sum"] + int(message.get("n", 0))}


class WindowedCountTable:
    """Per key and tumbling window: count and sum of ``n``, upserted as rows ``key, window_start, window_end,
    count, sum`` of the typed table ``app.example.output`` (default ``delta.window_stats``).

    The panes go to the table as they are: a pane's dict key and dict value contribute their fields.
    """

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        import pyarrow as pa

        schema = pa.schema([pa.field("key", pa.string(), nullable=False),
                            pa.field("window_start", pa.timestamp("ms", tz="UTC"), nullable=False),
                            pa.field("window_end", pa.timestamp("ms", tz="UTC")),
                            pa.field("count", pa.int64()), pa.field("sum", pa.int64())])
        out = app.output(_cfg(app, "output", "delta.window_stats"), schema=schema, mode="upsert",
                         key=["key", "window_start"])
        (_keyed_events(app)
         .window(Windows.tumbling(_window_ms(app), lambda m: {"key": m["key"]}, {"count": 0, "sum": 0}, _fold_fields),
                 name="stats")
         .send_to(out))


class PaidOrders:
    """Orders (``{"order", "amount"}``, ``app.example.orders``) joined with payments (``{"order", "paid"}``,
    ``app.example.payments``) on ``order`` when their event times are at most ``app.example.within.ms`` apart
    (default 1000): ``{"order", "amount", "paid"}`` to ``app.example.output``; with ``app.example.join.kind``
    ``left`` an order without a payment comes out with ``paid`` None once its bound has passed."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        orders = app.input(_cfg(app, "orders", "delta.orders"), serde="json")
        payments = app.input(_cfg(app, "payments", "delta.payments"), serde="json")
        (orders.partition_by(lambda o: o["order"], "orders", _partitions(app))
         .join(payments.partition_by(lambda p: p["order"], "payments", _partitions(app)),
               lambda o: o["order"], lambda p: p["order"],
               lambda o, p: {"order": (o or p)["order"], "amount": o and o["amount"], "paid": p and p["paid"]},
               within=int(_cfg(app, "within.ms", "1000")), kind=_cfg(app, "join.kind", "inner"), name="paid")
         .send_to(_json_output(app)))


class KeySessions:
    """Sessions per ``key`` (gap ``app.example.gap.ms``, default 1000; allowed lateness
    ``app.example.lateness.ms``, default 0): rows ``key, window_start, window_end, pane, pane_index, count, sum``
    upserted into the typed table ``app.example.output`` (default ``delta.sessions``) by ``(key, window_start)``.
    Every pane replaces the session's row; a session merged into another is retracted, which deletes its row."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        import pyarrow as pa

        schema = pa.schema([pa.field("key", pa.string(), nullable=False),
                            pa.field("window_start", pa.int64(), nullable=False), pa.field("window_end", pa.int64()),
                            pa.field("pane", pa.string()), pa.field("pane_index", pa.int64()),
                            pa.field("count", pa.int64()), pa.field("sum", pa.int64())])
        out = app.output(_cfg(app, "output", "delta.sessions"), schema=schema, mode="upsert",
                         key=["key", "window_start"])
        session = Windows.session(int(_cfg(app, "gap.ms", "1000")), lambda m: {"key": m["key"]},
                                  {"count": 0, "sum": 0}, _fold_fields,
                                  merge=lambda a, b: {"count": a["count"] + b["count"], "sum": a["sum"] + b["sum"]},
                                  allowed_lateness_ms=int(_cfg(app, "lateness.ms", "0")))
        (_keyed_events(app)
         .window(session, name="sessions")
         .send_to(out))


class EarlyCounts:
    """Per key and tumbling window (``app.example.window.ms``, default 1000): count and sum of ``n``, with an
    early pane every ``app.example.early.messages`` messages (default 2) and late panes within
    ``app.example.lateness.ms`` (default 0); each pane goes to ``app.example.output`` as
    ``{key, start, end, count, sum, pane, index}``."""

    def describe(self, app: StreamApplication) -> None:
        """Build the graph."""
        spec = Windows.tumbling(_window_ms(app), lambda m: m["key"], [0, 0], _fold,
                                early=every(int(_cfg(app, "early.messages", "2"))),
                                allowed_lateness_ms=int(_cfg(app, "lateness.ms", "0")))
        (_keyed_events(app)
         .window(spec, name="early")
         .map(lambda pane: {**pane_to_json(pane), "pane": str(pane.pane), "index": pane.index})
         .send_to(_json_output(app)))
