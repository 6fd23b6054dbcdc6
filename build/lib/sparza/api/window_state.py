"""Window state in a task store: one entry per (window end, start, key), fired in end order.

Keys are strings ``w|<end>|<start>|<key json>`` with times offset and zero-padded so byte order is
time order, and the store's values are JSON; ``m|fired`` holds the watermark up to which windows
have fired and ``m|late`` the count of late messages, so both survive restarts with the store.

A window with triggers or an allowed lateness (:class:`TriggeredWindowState`) also keeps, after its
on-time firing, its entry under ``r|<end + allowed lateness>|<start>|<key json>`` until the watermark
passes that time, so late messages update it and fire late panes; the trigger counters live in the
entries (:mod:`sparza.api.panes`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from sparza.api.panes import FIRED_KEY, LATE_KEY, FiresPanes, FiringEntry, count_pane, record_pane, stored_progress
from sparza.api.triggers import PaneKind
from sparza.api.windows import WindowPane, WindowSpec

__all__ = ["TriggeredWindowState", "WindowState", "window_key_text", "window_state"]

_OFFSET = 1 << 62  # shifts negative epoch-ms into the padded range, so ordering holds for them too
_FIRED = FIRED_KEY
_LATE = LATE_KEY


def _t(ms: int) -> str:
    return f"{ms + _OFFSET:020d}"


def _time_range(prefix: str, since: int | None, until: int | None) -> tuple[str, str]:
    """The store range of the keys ``<prefix><time>|…`` with ``since <= time < until`` (None: unbounded)."""
    return prefix + ("" if since is None else _t(since)), (prefix[:-1] + "}" if until is None else prefix + _t(until))


def window_key_text(key: Any) -> str:
    """A window key as the JSON text in its store keys (sorted fields, no spaces): JSON texts are never a
    prefix of one another followed by ``|``, so a range over ``<prefix><key text>|`` holds that key only."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


_SCALARS = (int, float, str, bool, type(None))
_MEMO_LIMIT = 65_536


def _fresh_accumulator(spec: WindowSpec) -> Callable[[], Any]:
    """``spec.initial`` without a deep copy when ``init`` is a flat list or dict of scalars (the usual case)."""
    init = spec.init
    if callable(init):
        return spec.initial
    if isinstance(init, _SCALARS):
        return lambda: init
    if type(init) is list and all(isinstance(v, _SCALARS) for v in init):
        return init.copy
    if type(init) is dict and all(isinstance(v, _SCALARS) for v in init.values()):
        return init.copy
    return spec.initial


class WindowState:
    """The accumulators of one window operator, kept in ``store`` (a task KeyValueStore with string
    keys and json values)."""

    def __init__(self, spec: WindowSpec, store: Any) -> None:
        self.spec = spec
        self.store = store
        self.fired, self.late = stored_progress(store)
        self._fresh = _fresh_accumulator(spec)
        self._tumbling = spec.slide_ms == spec.size_ms
        # Memos of the store key's parts (the same few keys and windows recur message after message).
        self._key_texts: dict[str, str] = {}
        self._prefixes: dict[int, str] = {}
        self._text_keys: dict[str, str] = {}

    def _key_text(self, key: Any) -> str:
        if key.__class__ is str:  # only str: values of other types may be equal yet encode differently
            text = self._key_texts.get(key)
            if text is None:
                if len(self._key_texts) >= _MEMO_LIMIT:
                    self._key_texts.clear()
                text = self._key_texts[key] = json.dumps(key, separators=(",", ":"))
            return text
        return window_key_text(key)

    def _prefix(self, start: int) -> str:
        prefix = self._prefixes.get(start)
        if prefix is None:
            if len(self._prefixes) >= _MEMO_LIMIT:
                self._prefixes.clear()
            prefix = self._prefixes[start] = f"w|{_t(start + self.spec.size_ms)}|{_t(start)}|"
        return prefix

    def add(self, key: Any, timestamp: int, message: Any) -> bool:
        """Fold ``message`` into its open windows; True when one of its windows had already fired (late).

        A late message is still folded into the windows of it that are open."""
        key_text = self._key_text(key)
        spec = self.spec
        store = self.store
        fired = self.fired
        if self._tumbling:
            start = timestamp - timestamp % spec.size_ms  # Python's % keeps this right for negative times
            if fired is None or start + spec.size_ms > fired:
                skey = self._prefix(start) + key_text
                entry = store.get(skey)
                store.put(skey, {"a": spec.fold(message, self._fresh() if entry is None else entry["a"])})
                return False
            self.late += 1
            store.put(_LATE, self.late)
            return True
        late = False
        puts: dict[str, Any] = {}
        for start in spec.starts(timestamp):
            end = start + spec.size_ms
            if fired is not None and end <= fired:
                late = True
                continue
            skey = self._prefix(start) + key_text
            entry = store.get(skey)
            acc = self._fresh() if entry is None else entry["a"]
            puts[skey] = {"a": spec.fold(message, acc)}
        return self._write_add(puts, late)

    def _write_add(self, puts: dict[str, Any], late: bool) -> bool:
        """Write what :meth:`add` changed in one store call, with the late count when the message was late;
        returns ``late``."""
        if late:
            self.late += 1
            puts[_LATE] = self.late
        if puts:
            self.store.put_all(puts)
        return late

    def _key_of(self, text: str) -> Any:
        key = self._text_keys.get(text)
        if key is None:
            key = json.loads(text)
            if key.__class__ is not str:
                return key  # a new object each time: it may be mutable
            if len(self._text_keys) >= _MEMO_LIMIT:
                self._text_keys.clear()
            self._text_keys[text] = key
        return key

    def _panes(self, upto: str) -> Iterator[tuple[str, WindowPane]]:
        for skey, entry in list(self.store.range("w|", upto)):
            _, end, start, key_json = skey.split("|", 3)
            yield skey, WindowPane(self._key_of(key_json), int(start) - _OFFSET, int(end) - _OFFSET, entry["a"])

    def fire(self, watermark: int) -> list[WindowPane]:
        """The panes of every window with ``end <= watermark`` (removed from the store), oldest end first."""
        if self.fired is not None and watermark <= self.fired:
            return []
        fired = list(self._panes(f"w|{_t(watermark + 1)}"))
        self.fired = watermark
        self.store.put_all({**{k: None for k, _ in fired}, _FIRED: watermark})
        return [pane for _, pane in fired]

    def flush(self) -> list[WindowPane]:
        """At end-of-stream: the panes of every window still open (removed from the store)."""
        fired = list(self._panes("w}"))
        if fired:
            self.store.delete_all([k for k, _ in fired])
        return [pane for _, pane in fired]


class TriggeredWindowState(WindowState, FiresPanes[WindowSpec]):
    """Windows with early/late triggers or an allowed lateness (see the module docstring and
    :mod:`sparza.api.triggers`). :meth:`add` returns, as the plain state does, whether the message was
    dropped from one of its windows as too late; the panes its triggers fired meanwhile are in
    :attr:`panes` until the caller takes them."""

    def __init__(self, spec: WindowSpec, store: Any) -> None:
        super().__init__(spec, store)
        self.lateness = spec.allowed_lateness_ms
        self.panes: list[WindowPane] = []

    def _retained_key(self, start: int, key_text: str) -> str:
        return f"r|{_t(start + self.spec.size_ms + self.lateness)}|{_t(start)}|{key_text}"

    def add(self, key: Any, timestamp: int, message: Any) -> bool:
        """Fold ``message`` into its windows that are open or kept for lateness; True when it was too late for
        one of them (that window's end plus the allowed lateness is behind the watermark)."""
        key_text = self._key_text(key)
        spec, store, fired = self.spec, self.store, self.fired
        late = False
        puts: dict[str, Any] = {}
        for start in spec.starts(timestamp):
            end = start + spec.size_ms
            closed = fired is not None and end <= fired
            if fired is not None and end + self.lateness <= fired:
                late = True
                continue
            skey = self._retained_key(start, key_text) if closed else self._prefix(start) + key_text
            entry = store.get(skey) or {"a": self._fresh(), "n": 0, "i": 0}
            entry["a"] = spec.fold(message, entry["a"])
            entry["n"] = entry.get("n", 0) + 1
            kind = count_pane(entry, closed, spec.early, spec.late)
            if kind is not None:
                self._pane(key, start, entry, kind)
            puts[skey] = entry
        return self._write_add(puts, late)

    def _pane(self, key: Any, start: int, entry: dict[str, Any], kind: str) -> None:
        index = record_pane(entry, kind)
        self.panes.append(WindowPane(key, start, start + self.spec.size_ms, entry["a"], kind, index))

    # The trigger algorithm is FiresPanes.fire; WindowState's one-firing fire comes first in the bases.
    fire = FiresPanes.fire

    def _open_entries(self, since: int | None, until: int | None) -> Iterator[FiringEntry]:
        for skey, entry in list(self.store.range(*_time_range("w|", since, until))):
            _, end_text, start_text, key_json = skey.split("|", 3)
            end = int(end_text) - _OFFSET
            yield FiringEntry(skey, skey, key_json, int(start_text) - _OFFSET, end, end, entry)

    def _kept_entries(self, since: int | None, until: int | None) -> Iterator[FiringEntry]:
        for skey, entry in list(self.store.range(*_time_range("r|", since, until))):
            _, until_text, start_text, key_json = skey.split("|", 3)
            start = int(start_text) - _OFFSET
            yield FiringEntry(skey, skey, key_json, start, start + self.spec.size_ms, int(until_text) - _OFFSET,
                              entry)

    def _keep(self, found: FiringEntry, puts: dict[str, Any]) -> None:
        puts[found.row] = None
        puts[self._retained_key(found.start, found.key_text)] = found.entry

    def _drop(self, found: FiringEntry, puts: dict[str, Any]) -> None:
        puts[found.row] = None

    def flush(self) -> list[WindowPane]:
        """At end-of-stream: the on-time panes of every open window and the late panes of kept windows with
        late messages since their last pane; the store keeps only its bookkeeping."""
        deletes: list[str] = []
        for skey, entry in list(self.store.range("w|", "w}")):
            _, _end, start_text, key_json = skey.split("|", 3)
            self._pane(self._key_of(key_json), int(start_text) - _OFFSET, entry, PaneKind.ON_TIME)
            deletes.append(skey)
        for skey, entry in list(self.store.range("r|", "r}")):
            _, _until, start_text, key_json = skey.split("|", 3)
            if entry.get("n", 0):
                self._pane(self._key_of(key_json), int(start_text) - _OFFSET, entry, PaneKind.LATE)
            deletes.append(skey)
        if deletes:
            self.store.delete_all(deletes)
        return self.take_panes()


def window_state(spec: WindowSpec, store: Any) -> WindowState:
    """The state for ``spec``: the plain one-firing state, or the triggered one when it has triggers or an
    allowed lateness (the plain path stays as fast as it was)."""
    return TriggeredWindowState(spec, store) if spec.triggered else WindowState(spec, store)
