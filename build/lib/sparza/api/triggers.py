"""Early and late triggers of event-time windows, and the pane kinds a firing carries.

A window fires **on time** once, when the watermark reaches its end. A trigger adds firings:

- ``early=every(n)``: a running result after every ``n`` messages folded into the window since its
  last pane, while it is still open;
- ``early=every(timedelta)`` / ``every(ms=...)``: a running result each time the *event-time*
  watermark crosses ``start + k * interval`` (k = 1, 2, ...) before the window's end, if messages
  arrived since its last pane;
- ``late=every(n)`` / ``late=every(timedelta)``: after the on-time firing, while the window is kept
  for its allowed lateness, an updated result after every ``n`` late messages, or each time the
  watermark crosses ``end + k * interval``. Without ``late=``, a window with allowed lateness fires
  again on every late message (``every(1)``). A window's last pane always includes every message
  that was not dropped: pending late messages fire when the window is dropped at ``end +
  allowed_lateness``, and at end-of-stream.

Durations are measured in event time (the watermark), never by a clock: a replayed batch sees the
same watermarks and so fires the same panes. Firings are **updates** (accumulating): each pane
carries the window's whole value so far and replaces the previous pane of the same key and window.
Session windows may also emit a **retraction** (``pane == "retract"``) for a session that merged
into another and no longer exists (see :mod:`sparza.api.session_state`).

Samza's spellings are accepted: ``Triggers.count(n)``, ``Triggers.timeSinceFirstMessage(d)``
(here measured in event time), ``Triggers.repeat(t)`` and ``Triggers.any(t1, t2)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sparza.errors import SparzaError

__all__ = ["PaneKind", "Trigger", "TriggerError", "Triggers", "bounded_ms", "check_trigger", "duration_ms", "every"]


class TriggerError(SparzaError, ValueError):
    """A trigger or a duration was given a value it cannot take (a count below 1, a negative duration)."""


class PaneKind(StrEnum):
    """What a window firing is: a running result, the result at the watermark, an update after it, or a
    retraction of a session that no longer exists (it merged into another)."""

    EARLY = "early"
    ON_TIME = "on_time"
    LATE = "late"
    RETRACT = "retract"


def duration_ms(value: Any, what: str) -> int:
    """``value`` (int ms, or a ``timedelta``) as whole milliseconds; ``what`` names it in the error."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TriggerError(f"{what} must be milliseconds (an int) or a datetime.timedelta, got {value!r}")
    return int(value)


def bounded_ms(value: Any, what: str, *, minimum: int = 0) -> int:
    """:func:`duration_ms` of ``value``, at least ``minimum`` ms (0: ``>= 0``, 1: ``> 0``); else TriggerError."""
    if value is None:
        raise TriggerError(f"{what} is missing")
    ms = duration_ms(value, what)
    if ms < minimum:
        raise TriggerError(f"{what} must be {'> 0' if minimum == 1 else f'>= {minimum}'} ms, got {value!r}")
    return ms


@dataclass(frozen=True, slots=True)
class Trigger:
    """When a window fires besides on time: after ``messages`` messages, or each time the event-time
    watermark crosses a multiple of ``interval_ms`` (both set: whichever comes first). ``repeat=False``
    fires at most once (Samza's non-repeated triggers)."""

    messages: int | None = None
    interval_ms: int | None = None
    repeat: bool = True

    def __post_init__(self) -> None:
        if self.messages is None and self.interval_ms is None:
            raise TriggerError("a trigger needs a message count or an interval: every(n) or every(timedelta)")
        if self.messages is not None and (isinstance(self.messages, bool) or int(self.messages) < 1):
            raise TriggerError(f"a trigger's message count must be >= 1, got {self.messages!r}")
        if self.interval_ms is not None and int(self.interval_ms) < 1:
            raise TriggerError(f"a trigger's interval must be >= 1 ms, got {self.interval_ms!r}")

    def fires_on_count(self, pending: int, fired: int) -> bool:
        """True when ``pending`` messages since the last pane reach the count (and a one-shot trigger that
        fired ``fired`` times before may still fire)."""
        return (self.messages is not None and pending >= self.messages
                and (self.repeat or fired == 0))

    def fires_on_time(self, origin: int, before: int | None, now: int, fired: int) -> bool:
        """True when the watermark moving from ``before`` to ``now`` crossed ``origin + k * interval_ms``
        (k >= 1), for a trigger that may still fire."""
        if self.interval_ms is None or not (self.repeat or fired == 0):
            return False
        step = self.interval_ms
        reached = (now - origin) // step
        if reached < 1:
            return False
        passed = -1 if before is None else (before - origin) // step
        return reached > passed

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (for plans and reports)."""
        return {"messages": self.messages, "interval_ms": self.interval_ms, "repeat": self.repeat}


def every(count: int | timedelta | None = None, *, messages: int | None = None, ms: int | None = None,
          duration: timedelta | None = None) -> Trigger:
    """A repeating trigger: ``every(5)`` (5 messages), ``every(timedelta(minutes=1))`` or ``every(ms=60_000)``
    (event time), or both ``every(messages=100, ms=60_000)`` (whichever first)."""
    if isinstance(count, timedelta):
        duration, count = count, None
    if count is not None:
        if messages is not None:
            raise TriggerError("every(): give the message count once (positionally or as messages=)")
        if isinstance(count, bool) or not isinstance(count, int):
            raise TriggerError(f"every(): a message count (int) or a timedelta, got {count!r}")
        messages = count
    interval = None
    if duration is not None and ms is not None:
        raise TriggerError("every(): give the interval once (ms= or duration=)")
    if duration is not None:
        interval = duration_ms(duration, "every(duration=...)")
    elif ms is not None:
        interval = duration_ms(ms, "every(ms=...)")
    return Trigger(messages, interval, repeat=True)


class Triggers:
    """Samza's ``Triggers`` factory spellings, mapped onto :class:`Trigger`."""

    @staticmethod
    def count(n: int) -> Trigger:
        """Fires once, after ``n`` messages (wrap in :meth:`repeat` to fire every ``n``)."""
        return Trigger(messages=n, repeat=False)

    @staticmethod
    def timeSinceFirstMessage(duration: int | timedelta) -> Trigger:
        """Fires once, when the event-time watermark is ``duration`` past the window's start (early) or end
        (late). Samza measures this in processing time; sparza in event time, so replays fire alike."""
        return Trigger(interval_ms=duration_ms(duration, "Triggers.timeSinceFirstMessage"), repeat=False)

    @staticmethod
    def repeat(trigger: Trigger) -> Trigger:
        """``trigger``, firing again each time its condition is met anew."""
        if not isinstance(trigger, Trigger):
            raise TriggerError(f"Triggers.repeat needs a trigger, got {type(trigger).__name__}")
        return replace(trigger, repeat=True)

    @staticmethod
    def any(*triggers: Trigger) -> Trigger:
        """Fires when any of ``triggers`` would (at most one message count and one interval)."""
        counts = {t.messages for t in triggers if isinstance(t, Trigger) and t.messages is not None}
        intervals = {t.interval_ms for t in triggers if isinstance(t, Trigger) and t.interval_ms is not None}
        if not triggers or any(not isinstance(t, Trigger) for t in triggers) or len(counts) > 1 or len(intervals) > 1:
            raise TriggerError("Triggers.any takes triggers with at most one message count and one interval, e.g. "
                               "any(count(100), timeSinceFirstMessage(timedelta(minutes=1)))")
        return Trigger(next(iter(counts), None), next(iter(intervals), None),
                       repeat=all(t.repeat for t in triggers))


def check_trigger(value: Any, what: str) -> Trigger | None:
    """``value`` as a trigger (None stays None); anything else fails naming ``what`` and what to pass."""
    if value is None or isinstance(value, Trigger):
        return value
    raise TriggerError(f"{what}={value!r} is not a trigger; use every(n) for a message count, every(timedelta(...)) "
                       f"for an event-time interval, or Samza's Triggers.count/timeSinceFirstMessage/repeat")
