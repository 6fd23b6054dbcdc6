"""The trigger bookkeeping of one window (or session) entry, shared by the window and session states.

An entry is a JSON object in the operator's store. Besides the accumulator it keeps: ``n``, messages
folded since its last pane; ``i``, the index of its next pane; ``e`` / ``l``, how many early / late
panes fired (one-shot triggers fire once). Everything is decided from the messages and the watermark,
so a replay from the same store fires the same panes. :class:`FiresPanes` runs the firing at a watermark for
both, over their own store layouts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, Generic, NamedTuple, TypeVar

from sparza.api.triggers import PaneKind, Trigger
from sparza.api.windows import SessionSpec, WindowPane, WindowSpec

__all__ = ["FIRED_KEY", "LATE_KEY", "FiresPanes", "FiringEntry", "count_pane", "interval_pane", "record_pane",
           "stored_progress"]

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


_Spec = TypeVar("_Spec", WindowSpec, SessionSpec)


class FiringEntry(NamedTuple):
    """An entry that :meth:`FiresPanes.fire` meets, in either store layout."""

    row: str
    """The store key the scan met: the entry's own key (windows) or its index key (sessions)."""
    skey: str
    """The store key of the entry itself."""
    key_text: str
    """Its window key as JSON text."""
    start: int
    """The start of its window or session."""
    end: int
    """The end of its window or session."""
    time: int
    """The time ``row`` is ordered by: the end of an open entry, end + allowed lateness of a kept one."""
    entry: dict[str, Any]
    """The stored entry (accumulator and trigger counters)."""


class FiresPanes(ABC, Generic[_Spec]):
    """A window or session state whose triggers also fire panes between watermarks (on a message): they wait in
    :attr:`panes` until :meth:`take_panes`, and :meth:`fire` hands them out with the panes of the watermark.

    :meth:`fire` is the one trigger algorithm of both states; each supplies its store layout through the
    hooks: the open and the kept entries by time, what keeping or dropping an entry writes, how a pane is
    made and how a key is read back."""

    spec: _Spec
    store: Any
    fired: int | None
    lateness: int
    panes: list[WindowPane]

    def take_panes(self) -> list[WindowPane]:
        """The panes fired since the last call (emptied)."""
        panes, self.panes = self.panes, []
        return panes

    def fire(self, watermark: int) -> list[WindowPane]:
        """Early panes of open entries whose interval the watermark crossed, on-time panes of entries whose end
        it reached (kept for the allowed lateness), late panes of kept entries, and the final late pane of kept
        entries it drops now (if they took late messages since their last pane)."""
        before = self.fired
        if before is not None and watermark <= before:
            return []
        early, late, lateness = self.spec.early, self.spec.late, self.lateness
        # Entries that ended (or were dropped) by the last watermark were moved when it fired: start after them
        # (their tombstones would cost a step each).
        since = None if before is None else before + 1
        puts: dict[str, Any] = {}
        if early is not None and early.interval_ms is not None:
            for found in self._open_entries(watermark + 1, None):
                kind = interval_pane(found.entry, False, found.start, before, watermark, early, late)
                if kind is not None:
                    self._pane_of(found, kind)
                    puts[found.skey] = found.entry
        for found in self._open_entries(since, watermark + 1):
            self._pane_of(found, PaneKind.ON_TIME)
            if found.time + lateness > watermark:
                self._keep(found, puts)
            else:
                self._drop(found, puts)
        if puts:
            self.store.put_all(puts)
            puts = {}
        # Kept entries are read up to the watermark only, unless a late interval trigger may fire later ones.
        through = None if late is not None and late.interval_ms is not None else watermark + 1
        for found in self._kept_entries(since, through):
            if found.time <= watermark:  # end + lateness <= watermark: dropped now, with what it took since
                if found.entry.get("n", 0):
                    self._pane_of(found, PaneKind.LATE)
                self._drop(found, puts)
                continue
            kind = interval_pane(found.entry, True, found.end, before, watermark, early, late)
            if kind is not None:
                self._pane_of(found, kind)
                puts[found.skey] = found.entry
        return self._fired_at(watermark, puts)

    def _pane_of(self, found: FiringEntry, kind: str) -> None:
        self._pane(self._key_of(found.key_text), found.start, found.entry, kind)

    def _fired_at(self, watermark: int, puts: dict[str, Any]) -> list[WindowPane]:
        """Write ``puts`` and ``watermark`` as the last one fired in one store call; the panes fired since the
        last take."""
        self.fired = watermark
        self.store.put_all({**puts, FIRED_KEY: watermark})
        return self.take_panes()

    # --- the store layout -------------------------------------------------------------------------------
    @abstractmethod
    def _open_entries(self, since: int | None, until: int | None) -> Iterator[FiringEntry]:
        """The entries not fired on time yet whose end is in ``[since, until)`` (None: unbounded), by end;
        the scan is read before the first is yielded (the caller writes while it iterates)."""

    @abstractmethod
    def _kept_entries(self, since: int | None, until: int | None) -> Iterator[FiringEntry]:
        """The entries kept for lateness whose end + allowed lateness is in ``[since, until)``, by that time."""

    @abstractmethod
    def _keep(self, found: FiringEntry, puts: dict[str, Any]) -> None:
        """Into ``puts``: move the open ``found`` (just fired on time) to the kept entries."""

    @abstractmethod
    def _drop(self, found: FiringEntry, puts: dict[str, Any]) -> None:
        """Into ``puts``: remove ``found`` from the store (it is past its allowed lateness)."""

    @abstractmethod
    def _pane(self, key: Any, start: int, entry: dict[str, Any], kind: str) -> None:
        """Add the pane of ``kind`` of ``entry`` to :attr:`panes`, counting it in the entry."""

    @abstractmethod
    def _key_of(self, key_text: str) -> Any:
        """The window key stored as ``key_text``."""


_EVERY_LATE = Trigger(messages=1)
"""A closed window without ``late=`` fires again on every late message it takes (Flink's and Beam's default)."""
