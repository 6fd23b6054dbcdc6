"""Window state in a task store: one entry per (window end, start, key), fired in end order.

Keys are strings ``w|<end>|<start>|<key json>`` with times offset and zero-padded so byte order is
time order, and the store's values are JSON; ``m|fired`` holds the watermark up to which windows
have fired and ``m|late`` the count of late messages, so both survive restarts with the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from sparza.api.windows import WindowPane, WindowSpec

__all__ = ["WindowState"]

_OFFSET = 1 << 62  # shifts negative epoch-ms into the padded range, so ordering holds for them too
_FIRED = "m|fired"
_LATE = "m|late"


def _t(ms: int) -> str:
    return f"{ms + _OFFSET:020d}"


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
        fired = store.get(_FIRED)
        self.fired: int | None = None if fired is None else int(fired)
        self.late = int(store.get(_LATE) or 0)
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
        return json.dumps(key, sort_keys=True, separators=(",", ":"))

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
        if late:
            self.late += 1
            puts[_LATE] = self.late
        if puts:
            store.put_all(puts)
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
