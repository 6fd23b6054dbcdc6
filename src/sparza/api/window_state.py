"""Window state in a task store: one entry per (window end, start, key), fired in end order.

Keys are strings ``w|<end>|<start>|<key json>`` with times offset and zero-padded so byte order is
time order, and the store's values are JSON; ``m|fired`` holds the watermark up to which windows
have fired and ``m|late`` the count of late messages, so both survive restarts with the store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sparza.api.windows import WindowPane, WindowSpec

__all__ = ["WindowState"]

_OFFSET = 1 << 62  # shifts negative epoch-ms into the padded range, so ordering holds for them too
_FIRED = "m|fired"
_LATE = "m|late"


def _t(ms: int) -> str:
    return f"{ms + _OFFSET:020d}"


class WindowState:
    """The accumulators of one window operator, kept in ``store`` (a task KeyValueStore with string
    keys and json values)."""

    def __init__(self, spec: WindowSpec, store: Any) -> None:
        self.spec = spec
        self.store = store
        fired = store.get(_FIRED)
        self.fired: int | None = None if fired is None else int(fired)
        self.late = int(store.get(_LATE) or 0)

    def add(self, key: Any, timestamp: int, message: Any) -> bool:
        """Fold ``message`` into its open windows; True when one of its windows had already fired (late).

        A late message is still folded into the windows of it that are open."""
        key_json = json.dumps(key, sort_keys=True, separators=(",", ":"))
        late = False
        puts: dict[str, Any] = {}
        for start in self.spec.starts(timestamp):
            end = start + self.spec.size_ms
            if self.fired is not None and end <= self.fired:
                late = True
                continue
            skey = f"w|{_t(end)}|{_t(start)}|{key_json}"
            entry = self.store.get(skey)
            acc = self.spec.initial() if entry is None else entry["a"]
            puts[skey] = {"a": self.spec.fold(message, acc)}
        if late:
            self.late += 1
            puts[_LATE] = self.late
        if puts:
            self.store.put_all(puts)
        return late

    def _panes(self, upto: str) -> Iterator[tuple[str, WindowPane]]:
        for skey, entry in list(self.store.range("w|", upto)):
            _, end, start, key_json = skey.split("|", 3)
            yield skey, WindowPane(json.loads(key_json), int(start) - _OFFSET, int(end) - _OFFSET, entry["a"])

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
