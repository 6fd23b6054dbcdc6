"""The trigger bookkeeping of one window (or session) entry, shared by the window and session states.

An entry is a JSON object in the operator's store. Besides the accumulator it keeps: ``n``, messages
folded since its last pane; ``i``, the index of its next pane; ``e`` / ``l``, how many early / late
panes fired (one-shot triggers fire once). Everything is decided from the messages and the watermark,
so a replay from the same store fires the same panes.
"""

from __future__ import annotations

from typing import Any

from sparza.api.triggers import PaneKind, Trigger
from sparza.api.windows import WindowPane

__all__ = ["FIRED_KEY", "LATE_KEY", "FiresPanes", "count_pane", "interval_pane", "record_pane", "stored_progress"]

FIRED_KEY = "m|fired"
"""The store key of the watermark a window or session state last fired at."""
LATE_KEY = "m|late"
"""The store key of the count of late messages a window or session state dropped."""


def stored_progress(store: Any) -> tuple[int | None, int]:
    """``(fired, late)`` of a window or session state kept in ``store``: the watermark it last fired at (None
    before the first) and the late messages it counted."""
    fired = store.get(FIRED_KEY)
    return (None if fired is None else int(fired)), int(store.get(LATE_KEY) or 0)


def count_pane(entry: dict[str, Any], closed: bool, early: Trigger | None, late: Trigger | None) -> str | None:
    """After one message was folded into ``entry`` (``n`` already counted): the pane a message-count trigger
    fires now, or None. ``closed``: the window had its on-time firing (its late trigger applies)."""
    if closed:
        trigger = late if late is not None else _EVERY_LATE
        return PaneKind.LATE if trigger.fires_on_count(entry.get("n", 0), entry.get("l", 0)) else None
    if early is not None and early.fires_on_count(entry.get("n", 0), entry.get("e", 0)):
        return PaneKind.EARLY
    return None


def interval_pane(entry: dict[str, Any], closed: bool, origin: int, before: int | None, now: int,
                  early: Trigger | None, late: Trigger | None) -> str | None:
    """At a watermark moving from ``before`` to ``now``: the pane an interval trigger fires for ``entry``
    (counted from ``origin``: the window's start while open, its end once closed), or None. Nothing fires
    for an entry without messages since its last pane."""
    if not entry.get("n", 0):
        return None
    if closed:
        if late is not None and late.fires_on_time(origin, before, now, entry.get("l", 0)):
            return PaneKind.LATE
        return None
    if early is not None and early.fires_on_time(origin, before, now, entry.get("e", 0)):
        return PaneKind.EARLY
    return None


def record_pane(entry: dict[str, Any], kind: str) -> int:
    """Account a pane of ``kind`` fired from ``entry``: returns its index and resets the pending count."""
    index = int(entry.get("i", 0))
    entry["i"] = index + 1
    entry["n"] = 0
    if kind == PaneKind.EARLY:
        entry["e"] = entry.get("e", 0) + 1
    elif kind == PaneKind.LATE:
        entry["l"] = entry.get("l", 0) + 1
    return index


class FiresPanes:
    """A window or session state whose triggers also fire panes between watermarks (on a message): they wait in
    :attr:`panes` until :meth:`take_panes`, and its ``fire`` hands them out with :meth:`_fired_at`."""

    store: Any
    fired: int | None
    panes: list[WindowPane]

    def take_panes(self) -> list[WindowPane]:
        """The panes fired since the last call (emptied)."""
        panes, self.panes = self.panes, []
        return panes

    def _fired_at(self, watermark: int, puts: dict[str, Any]) -> list[WindowPane]:
        """Write ``puts`` and ``watermark`` as the last one fired in one store call; the panes fired since the
        last take."""
        self.fired = watermark
        self.store.put_all({**puts, FIRED_KEY: watermark})
        return self.take_panes()


_EVERY_LATE = Trigger(messages=1)
"""A closed window without ``late=`` fires again on every late message it takes (Flink's and Beam's default)."""
