"""Session window state in a task store: sessions per key that merge when a message bridges them.

A message at ``t`` of key ``k`` opens the window ``[t, t + gap)``; the sessions of ``k`` that overlap it
merge with it into one session ``[min start, max end)`` (Flink's merging windows). A session fires on
time when the watermark reaches its end. Keys (strings, times offset and zero-padded so byte order is
time order; values JSON):

- ``s|<key json>|<start>``: the session: ``end``, the accumulator ``a`` (with a ``merge`` function) or its
  messages ``ms`` as ``[event time, sequence, message]`` (folded in that order when it fires), and the
  trigger counters of :mod:`sparza.api.panes`;
- ``t|<end>|<key json>|<start>``: open sessions by end (fired in end order);
- ``g|<end + allowed lateness>|<key json>|<start>``: sessions that fired on time, kept for late messages
  until the watermark passes that time;
- ``m|fired``, ``m|late``, ``m|seq``: the watermark fired up to, the late count and the message sequence.

The ``(start, end)`` of each key's live sessions are also kept in memory (read from the store the first
time a key is seen, bounded): a message finds the sessions it touches without a range scan, which in
RocksDB would step over the tombstones of the key's earlier sessions.

**Output mode: updates with retractions.** Each pane carries the session's whole value and replaces the
previous pane of the same ``(key, start)``. When a message merges a session that already emitted a pane
into another (or moves its start earlier), that session no longer exists: it gets a ``retract`` pane
(value None) naming its key and start, so an upsert table deletes its row and a consumer drops it.

A message is late, and dropped and counted, when its event time is more than the allowed lateness
behind the watermark the operator fired up to; a message within it merges like any other, and a session
it updates after its on-time firing fires a ``late`` pane (per the late trigger).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sparza.api.panes import FIRED_KEY, LATE_KEY, FiresPanes, FiringEntry, count_pane, record_pane, stored_progress
from sparza.api.triggers import PaneKind
from sparza.api.window_state import window_key_text
from sparza.api.windows import SessionSpec, WindowPane

__all__ = ["SessionState"]

_OFFSET = 1 << 62
_FIRED = FIRED_KEY
_LATE = LATE_KEY
_SEQ = "m|seq"
_CACHE_LIMIT = 65_536  # keys whose sessions are kept in memory; past it the cache starts over


def _t(ms: int) -> str:
    return f"{ms + _OFFSET:020d}"


def _ms(text: str) -> int:
    return int(text) - _OFFSET


class SessionState(FiresPanes[SessionSpec]):
    """The sessions of one session-window operator, kept in ``store`` (string keys, JSON values). The panes a
    message fires (retractions, trigger firings) are in :attr:`panes` after :meth:`add`."""

    def __init__(self, spec: SessionSpec, store: Any) -> None:
        self.spec = spec
        self.store = store
        self.fired, self.late = stored_progress(store)
        self.seq = int(store.get(_SEQ) or 0)
        self.gap = spec.gap_ms
        self.lateness = spec.allowed_lateness_ms
        self.panes: list[WindowPane] = []
        self._spans: dict[str, list[tuple[int, int]]] = {}  # key json -> its live sessions' (start, end)

    def _sessions_of(self, key_text: str) -> list[tuple[int, int]]:
        spans = self._spans.get(key_text)
        if spans is None:
            if len(self._spans) >= _CACHE_LIMIT:
                self._spans.clear()
            prefix = f"s|{key_text}|"
            spans = self._spans[key_text] = [(_ms(skey[len(prefix):]), entry["end"])
                                              for skey, entry in self.store.range(prefix, prefix + "~")]
        return spans

    # --- messages ---------------------------------------------------------------------------------------
    def add(self, key: Any, timestamp: int, message: Any) -> bool:
        """Merge ``message`` into its key's sessions; True (and nothing stored) when it is late beyond the
        allowed lateness."""
        fired, spec, store = self.fired, self.spec, self.store
        if fired is not None and timestamp < fired - self.lateness:
            self.late += 1
            store.put(_LATE, self.late)
            return True
        key_text = window_key_text(key)
        prefix = f"s|{key_text}|"
        spans = self._sessions_of(key_text)
        touched = [span for span in spans if span[0] < timestamp + self.gap and span[1] > timestamp]
        keys = [prefix + _t(span[0]) for span in touched]
        found = store.get_all(keys) if keys else {}
        overlaps = [(skey, found[skey]) for skey in keys]
        start = min([timestamp] + [_ms(skey[len(prefix):]) for skey, _ in overlaps])
        end = max([timestamp + self.gap] + [entry["end"] for _, entry in overlaps])
        owner = next((entry for skey, entry in overlaps if _ms(skey[len(prefix):]) == start), None)
        merged: dict[str, Any] = {"end": end, "n": 1 + sum(entry.get("n", 0) for _, entry in overlaps)}
        for counter in ("i", "e", "l"):
            merged[counter] = owner.get(counter, 0) if owner is not None else 0
        puts: dict[str, Any] = {}
        if spec.merge is not None:
            acc = None
            for _, entry in overlaps:
                acc = entry["a"] if acc is None else spec.merge(acc, entry["a"])
            merged["a"] = spec.fold(message, spec.initial() if acc is None else acc)
        else:
            self.seq += 1
            puts[_SEQ] = self.seq
            merged["ms"] = [item for _, entry in overlaps for item in entry["ms"]] + [[timestamp, self.seq, message]]
        for skey, entry in overlaps:
            old_start = _ms(skey[len(prefix):])
            puts[skey] = None
            puts[self._index_key(entry["end"], key_text, old_start)] = None
            if entry is not owner and entry.get("i", 0) > 0:
                # It emitted panes and no longer exists: retract them (an upsert table deletes its row).
                self.panes.append(WindowPane(key, old_start, entry["end"], None, PaneKind.RETRACT, entry["i"]))
        closed = fired is not None and end <= fired
        kind = count_pane(merged, closed, spec.early, spec.late)
        if kind is not None:
            self._pane(key, start, merged, kind)
        puts[prefix + _t(start)] = merged
        puts[self._index_key(end, key_text, start)] = 1
        store.put_all(puts)
        if touched:
            spans[:] = [span for span in spans if span not in touched]
        spans.append((start, end))
        return False

    def _index_key(self, end: int, key_text: str, start: int) -> str:
        if self.fired is not None and end <= self.fired:
            return f"g|{_t(end + self.lateness)}|{key_text}|{_t(start)}"
        return f"t|{_t(end)}|{key_text}|{_t(start)}"

    def _value(self, entry: dict[str, Any]) -> Any:
        if "a" in entry:
            return entry["a"]
        acc = self.spec.initial()
        for _ts, _seq, message in sorted(entry["ms"], key=lambda item: (item[0], item[1])):
            acc = self.spec.fold(message, acc)
        return acc

    def _pane(self, key: Any, start: int, entry: dict[str, Any], kind: str) -> None:
        value = self._value(entry)
        index = record_pane(entry, kind)
        self.panes.append(WindowPane(key, start, entry["end"], value, kind, index))

    # --- time -------------------------------------------------------------------------------------------
    @staticmethod
    def _parse_index(skey: str) -> tuple[int, str, int]:
        """``(time, key json, start)`` of a ``t|`` or ``g|`` key (the key json may contain ``|``)."""
        _, time_text, rest = skey.split("|", 2)
        key_text, start_text = rest.rsplit("|", 1)
        return _ms(time_text), key_text, _ms(start_text)

    def _open_entries(self, since: int | None, until: int | None) -> Iterator[FiringEntry]:
        return self._indexed("t|", since, until)

    def _kept_entries(self, since: int | None, until: int | None) -> Iterator[FiringEntry]:
        return self._indexed("g|", since, until)

    def _indexed(self, prefix: str, since: int | None, until: int | None) -> Iterator[FiringEntry]:
        """The sessions of the ``t|`` or ``g|`` index with ``since <= time < until`` (None: unbounded)."""
        lo = prefix + ("" if since is None else _t(since))
        hi = prefix[:-1] + "}" if until is None else prefix + _t(until)
        for ikey, _ in list(self.store.range(lo, hi)):
            time, key_text, start = self._parse_index(ikey)
            skey = f"s|{key_text}|{_t(start)}"
            entry = self.store.get(skey)
            yield FiringEntry(ikey, skey, key_text, start, entry["end"], time, entry)

    def _keep(self, found: FiringEntry, puts: dict[str, Any]) -> None:
        puts[found.row] = None
        puts[found.skey] = found.entry
        puts[f"g|{_t(found.time + self.lateness)}|{found.key_text}|{_t(found.start)}"] = 1

    def _drop(self, found: FiringEntry, puts: dict[str, Any]) -> None:
        puts[found.row] = None
        puts[found.skey] = None
        self._forget(found.key_text, found.start)

    def flush(self) -> list[WindowPane]:
        """At end-of-stream: the on-time pane of every open session and the late pane of kept sessions with
        late messages since their last pane; only the bookkeeping stays in the store."""
        deletes: list[str] = []
        for prefix, kind in (("t|", PaneKind.ON_TIME), ("g|", PaneKind.LATE)):
            for ikey, _ in list(self.store.range(prefix, prefix[0] + "}")):
                _time, key_text, start = self._parse_index(ikey)
                skey = f"s|{key_text}|{_t(start)}"
                entry = self.store.get(skey)
                if kind == PaneKind.ON_TIME or entry.get("n", 0):
                    self._pane(self._key_of(key_text), start, entry, kind)
                deletes += [ikey, skey]
        if deletes:
            self.store.delete_all(deletes)
        self._spans.clear()
        return self.take_panes()

    def _forget(self, key_text: str, start: int) -> None:
        spans = self._spans.get(key_text)
        if spans is not None:
            spans[:] = [span for span in spans if span[0] != start]

    def _key_of(self, key_text: str) -> Any:
        return json.loads(key_text)
