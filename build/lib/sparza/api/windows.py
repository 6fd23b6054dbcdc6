"""Event-time windows of the high-level API: tumbling, sliding (hopping) and session windows with a fold.

A window groups messages by ``key_fn(message)`` and by time range ``[start, end)``; each message
is folded into the accumulator (``fold(message, acc) -> acc``, starting from ``init``). A window
fires on time when the task watermark reaches its end, and emits a :class:`WindowPane`. Keys and
accumulators are stored as JSON in the window's task store, so both must be JSON-able (tuples come
back as lists).

Every window kind also takes triggers and an allowed lateness (:mod:`sparza.api.triggers`):
``early=every(n)`` fires running results before the end, ``allowed_lateness_ms`` keeps a window after
its on-time firing so that late messages update it (``late=every(...)`` says how often; default: on
each one), and messages later than that are dropped and counted as late.

Session windows (:meth:`Windows.session`) have no fixed size: a message at ``t`` opens the window
``[t, t + gap)``, and windows of one key that overlap merge, so a session ends ``gap`` after its last
message and a message that bridges two sessions merges them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from sparza.api.triggers import PaneKind, Trigger, TriggerError, bounded_ms, check_trigger, duration_ms
from sparza.errors import SparzaError

__all__ = ["SessionSpec", "WindowError", "WindowPane", "WindowSpec", "Windows"]


class WindowError(SparzaError, ValueError):
    """A window was declared with bad sizes, or a message had no event time to window it by."""


@dataclass(frozen=True, slots=True)
class WindowPane:
    """One firing of a window: its key, its range ``[start, end)`` in epoch ms and the folded value.

    ``pane`` says which firing it is (:class:`~sparza.api.triggers.PaneKind`: ``early``, ``on_time``,
    ``late``, or ``retract`` for a merged-away session, whose value is None) and ``index`` counts the
    panes of this key and window from 0, so a consumer can keep the newest (panes are updates: each
    carries the whole value so far)."""

    key: Any
    start: int
    end: int
    value: Any
    pane: str = PaneKind.ON_TIME
    index: int = 0

    @property
    def is_retraction(self) -> bool:
        """True for a retraction: the session ``(key, start)`` no longer exists."""
        return self.pane == PaneKind.RETRACT


def _ms(value: Any, what: str, minimum: int) -> int:
    try:
        return bounded_ms(value, what, minimum=minimum)
    except TriggerError as exc:
        raise WindowError(str(exc)) from None


def _triggers(early: Any, late: Any, allowed_lateness_ms: Any, what: str) -> tuple[Trigger | None, Trigger | None,
                                                                                    int]:
    try:
        early_trigger = check_trigger(early, f"{what}: early")
        late_trigger = check_trigger(late, f"{what}: late")
    except TriggerError as exc:
        raise WindowError(str(exc)) from None
    lateness = _ms(allowed_lateness_ms, f"{what}: allowed_lateness_ms", 0)
    if late_trigger is not None and lateness == 0:
        raise WindowError(f"{what}: late={late_trigger} never fires without allowed lateness (late messages are "
                          f"dropped); give allowed_lateness_ms > 0, or drop late=")
    return early_trigger, late_trigger, lateness


@dataclass(frozen=True, slots=True)
class _Triggered:
    """What both spec kinds share: the event time of a message (``timestamp_fn``, default the message's
    timestamp), the triggers and the allowed lateness (keyword-only fields, after each kind's own), and
    Samza's trigger setters (each returns a new spec)."""

    timestamp_fn: Callable[[Any], int] | None = field(default=None, kw_only=True)
    early: Trigger | None = field(default=None, kw_only=True)
    late: Trigger | None = field(default=None, kw_only=True)
    allowed_lateness_ms: int = field(default=0, kw_only=True)

    def setEarlyTrigger(self, trigger: Trigger) -> Any:
        """This window with early firings ``trigger`` (Samza's ``Window.setEarlyTrigger``)."""
        return self.with_triggers(early=trigger)

    def setLateTrigger(self, trigger: Trigger) -> Any:
        """This window with late firings ``trigger``; it needs an allowed lateness (``with_triggers``)."""
        return self.with_triggers(late=trigger)

    def with_triggers(self, *, early: Any = ..., late: Any = ..., allowed_lateness_ms: Any = ...) -> Any:
        """A copy with some of ``early``, ``late`` and ``allowed_lateness_ms`` replaced."""
        early_value = self.early if early is ... else early
        late_value = self.late if late is ... else late
        lateness = self.allowed_lateness_ms if allowed_lateness_ms is ... else allowed_lateness_ms
        e, lt, ms = _triggers(early_value, late_value, lateness, type(self).__name__)
        return replace(self, early=e, late=lt, allowed_lateness_ms=ms)

    @property
    def triggered(self) -> bool:
        """True when the window may fire more than once (a trigger or an allowed lateness)."""
        return self.early is not None or self.late is not None or self.allowed_lateness_ms > 0

    def initial(self) -> Any:
        """A fresh accumulator: ``init()`` when callable, else a deep copy of ``init``."""
        current: Any = self
        return current.init() if callable(current.init) else copy.deepcopy(current.init)


@dataclass(frozen=True, slots=True)
class WindowSpec(_Triggered):
    """A tumbling or sliding window definition; build it with :class:`Windows`."""

    size_ms: int
    slide_ms: int
    key_fn: Callable[[Any], Any]
    init: Any
    fold: Callable[[Any, Any], Any]

    @property
    def kind(self) -> str:
        """``tumbling`` when windows do not overlap, else ``sliding``."""
        return "tumbling" if self.slide_ms == self.size_ms else "sliding"

    def starts(self, timestamp: int) -> list[int]:
        """Start times of the windows containing ``timestamp``, oldest first."""
        last = timestamp - (timestamp % self.slide_ms)  # Python's % keeps this right for negative times
        out: list[int] = []
        start = last
        while start + self.size_ms > timestamp:
            out.append(start)
            start -= self.slide_ms
        return out[::-1]


@dataclass(frozen=True, slots=True)
class SessionSpec(_Triggered):
    """A session window definition (:meth:`Windows.session`): sessions of one key end ``gap_ms`` after their
    last message. ``merge(acc_a, acc_b)`` combines the accumulators of two sessions a message bridges (a
    earlier than b); without it each session keeps its messages and folds them in event-time order when it
    fires, so any fold works."""

    gap_ms: int
    key_fn: Callable[[Any], Any]
    init: Any
    fold: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any] | None = None

    @property
    def kind(self) -> str:
        """``session``."""
        return "session"


AnyWindowSpec = WindowSpec | SessionSpec
"""What ``MessageStream.window`` takes."""


class Windows:
    """Factories for window definitions (Samza's ``Windows``). Sizes and gaps are ms or ``timedelta``."""

    @staticmethod
    def tumbling(size_ms: int | timedelta, key_fn: Callable[[Any], Any], init: Any, fold: Callable[[Any, Any], Any],
                 timestamp_fn: Callable[[Any], int] | None = None, *, early: Trigger | None = None,
                 late: Trigger | None = None, allowed_lateness_ms: int | timedelta = 0) -> WindowSpec:
        """Back-to-back windows of ``size_ms``; each message is in exactly one."""
        size = _ms(size_ms, "window size", 1)
        e, lt, ms = _triggers(early, late, allowed_lateness_ms, "Windows.tumbling")
        return WindowSpec(size, size, key_fn, init, fold, timestamp_fn=timestamp_fn, early=e, late=lt,
                          allowed_lateness_ms=ms)

    @staticmethod
    def sliding(size_ms: int | timedelta, slide_ms: int | timedelta, key_fn: Callable[[Any], Any], init: Any,
                fold: Callable[[Any, Any], Any], timestamp_fn: Callable[[Any], int] | None = None, *,
                early: Trigger | None = None, late: Trigger | None = None,
                allowed_lateness_ms: int | timedelta = 0) -> WindowSpec:
        """Windows of ``size_ms`` starting every ``slide_ms``; a message is in ``size/slide`` of them."""
        size, slide = _ms(size_ms, "window size", 1), _ms(slide_ms, "window slide", 1)
        if slide > size:
            raise WindowError(f"slide ({slide} ms) larger than size ({size} ms) would skip messages")
        e, lt, ms = _triggers(early, late, allowed_lateness_ms, "Windows.sliding")
        return WindowSpec(size, slide, key_fn, init, fold, timestamp_fn=timestamp_fn, early=e, late=lt,
                          allowed_lateness_ms=ms)

    @staticmethod
    def session(gap_ms: int | timedelta, key_fn: Callable[[Any], Any], init: Any, fold: Callable[[Any, Any], Any],
                merge: Callable[[Any, Any], Any] | None = None, timestamp_fn: Callable[[Any], int] | None = None, *,
                early: Trigger | None = None, late: Trigger | None = None,
                allowed_lateness_ms: int | timedelta = 0) -> SessionSpec:
        """Sessions per key: a session lasts until ``gap_ms`` pass (in event time) without a message of its
        key; sessions bridged by a message merge. A pane's range is ``[first message, last message + gap)``;
        it fires when the watermark reaches its end."""
        try:
            gap = duration_ms(gap_ms, "Windows.session: gap")
        except TriggerError as exc:
            raise WindowError(str(exc)) from None
        if gap <= 0:
            raise WindowError(f"Windows.session: gap must be > 0 ms, got {gap_ms!r}; give the event-time pause "
                              f"after which a key's session ends (e.g. timedelta(minutes=30))")
        e, lt, ms = _triggers(early, late, allowed_lateness_ms, "Windows.session")
        return SessionSpec(gap, key_fn, init, fold, merge, timestamp_fn=timestamp_fn, early=e, late=lt,
                           allowed_lateness_ms=ms)

    # --- Samza's spellings -------------------------------------------------------------------------
    @staticmethod
    def keyedTumblingWindow(keyFn: Callable[[Any], Any], interval: int | timedelta,
                            initialValue: Any, aggregator: Callable[[Any, Any], Any],
                            keySerde: Any = None, windowValueSerde: Any = None) -> WindowSpec:
        """Samza's ``Windows.keyedTumblingWindow``: ``tumbling(interval, keyFn, initialValue, aggregator)``.
        The serdes are accepted and unused: window state is stored as JSON."""
        return Windows.tumbling(interval, keyFn, initialValue, aggregator)

    @staticmethod
    def tumblingWindow(interval: int | timedelta, initialValue: Any,
                       aggregator: Callable[[Any, Any], Any], windowValueSerde: Any = None) -> WindowSpec:
        """Samza's unkeyed ``Windows.tumblingWindow``: one window per interval (key None)."""
        return Windows.tumbling(interval, lambda _m: None, initialValue, aggregator)

    @staticmethod
    def keyedSessionWindow(keyFn: Callable[[Any], Any], sessionGap: int | timedelta,
                           initialValue: Any, aggregator: Callable[[Any, Any], Any],
                           keySerde: Any = None, windowValueSerde: Any = None) -> SessionSpec:
        """Samza's ``Windows.keyedSessionWindow``: ``session(sessionGap, keyFn, initialValue, aggregator)``
        (event-time sessions here; Samza's close after a gap of processing time)."""
        return Windows.session(sessionGap, keyFn, initialValue, aggregator)
