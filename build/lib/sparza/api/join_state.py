"""Stream-stream join buffers in a task store (see :mod:`sparza.api.joins` for the semantics).

Keys (strings; times offset and zero-padded so byte order is time order; values JSON):

- ``b|<side>|<key json>|<event time>|<sequence>``: a buffered message of side ``l`` or ``r``:
  ``{"m": message, "k": join key, "x": matched}``. A new message of one side looks up the other side's
  entries of its key between ``t - within`` and ``t + within`` with one range scan.
- ``x|<event time>|<side>|<key json>|<sequence>``: the same entries by event time, dropped (and, in
  left/outer joins, emitted unmatched) once the watermark passes ``t + within + allowed lateness``.
- ``m|wm``, ``m|late``, ``m|seq``: the join's watermark, its late count and the message sequence.

All of it is in the task store, so it is snapshotted with the task checkpoint: a restarted or replayed
batch starts from the buffers of the previous commit and matches the same pairs.
"""

from __future__ import annotations

from typing import Any

from sparza.api.joins import JoinSpec
from sparza.api.window_state import window_key_text

__all__ = ["JoinState"]

_OFFSET = 1 << 62
_WM = "m|wm"
_LATE = "m|late"
_SEQ = "m|seq"


def _t(ms: int) -> str:
    return f"{ms + _OFFSET:020d}"


Output = tuple[Any, Any, int]
"""A join result as ``(value, key, event time)``."""


class JoinState:
    """The two buffers of one stream-stream join, kept in ``store`` (string keys, JSON values). What
    :meth:`add`, :meth:`expire` and :meth:`flush` produce is returned as :data:`Output` tuples."""

    def __init__(self, spec: JoinSpec, store: Any) -> None:
        self.spec = spec
        self.store = store
        wm = store.get(_WM)
        self.watermark: int | None = None if wm is None else int(wm)
        self.late = int(store.get(_LATE) or 0)
        self.seq = int(store.get(_SEQ) or 0)
        # Whether a side's entries must remember that they matched (only if they may be emitted unmatched).
        self._track = {"l": spec.emits_unmatched("l"), "r": spec.emits_unmatched("r")}

    def add(self, side: str, key: Any, timestamp: int, message: Any) -> list[Output] | None:
        """Match ``message`` of ``side`` (``"l"`` or ``"r"``) against the other side and buffer it: the pairs,
        or None when it is late (more than the allowed lateness behind the join's watermark; not buffered)."""
        spec, store = self.spec, self.store
        wm = self.watermark
        if wm is not None and timestamp < wm - spec.allowed_lateness_ms:
            self.late += 1
            store.put(_LATE, self.late)
            return None
        key_text = window_key_text(key)
        other = "r" if side == "l" else "l"
        prefix = f"b|{other}|{key_text}|"
        out: list[Output] = []
        puts: dict[str, Any] = {}
        track = self._track[other]
        within = spec.within_ms
        for okey, entry in list(store.range(prefix + _t(timestamp - within), prefix + _t(timestamp + within + 1))):
            other_ts = int(okey[len(prefix):len(prefix) + 20]) - (1 << 62)
            left, right = (message, entry["m"]) if side == "l" else (entry["m"], message)
            out.append((spec.join_fn(left, right), key, max(timestamp, other_ts)))
            if track and not entry["x"]:
                entry["x"] = True
                puts[okey] = entry
        self.seq += 1
        seq = f"{self.seq:020d}"
        puts[f"b|{side}|{key_text}|{_t(timestamp)}|{seq}"] = {"m": message, "k": key, "x": bool(out)}
        puts[f"x|{_t(timestamp)}|{side}|{key_text}|{seq}"] = 1
        puts[_SEQ] = self.seq
        store.put_all(puts)
        return out

    def _drop(self, upto: str | None) -> list[Output]:
        """Remove the entries of the ``x|`` index below ``upto`` (None: all), oldest first; the unmatched ones
        of a side the join emits unmatched become outputs."""
        spec, store = self.spec, self.store
        out: list[Output] = []
        deletes: list[str] = []
        for xkey, _ in list(store.range("x|", upto if upto is not None else "x}")):
            _, ts_text, side, rest = xkey.split("|", 3)
            key_text, seq = rest.rsplit("|", 1)
            bkey = f"b|{side}|{key_text}|{ts_text}|{seq}"
            if self._track[side]:
                entry = store.get(bkey)
                if entry is not None and not entry["x"]:
                    left, right = (entry["m"], None) if side == "l" else (None, entry["m"])
                    out.append((spec.join_fn(left, right), entry["k"], int(ts_text) - _OFFSET))
            deletes += [xkey, bkey]
        if deletes:
            store.delete_all(deletes)
        return out

    def expire(self, watermark: int) -> list[Output]:
        """The join's watermark moved to ``watermark``: drop what can no longer be matched (emitting the
        unmatched messages of left/outer joins, oldest first)."""
        if self.watermark is not None and watermark <= self.watermark:
            return []
        bound = watermark - self.spec.allowed_lateness_ms - self.spec.within_ms
        out = self._drop(f"x|{_t(bound)}")
        self.watermark = watermark
        self.store.put(_WM, watermark)
        return out

    def flush(self) -> list[Output]:
        """At end-of-stream nothing more can match: every buffered message leaves (unmatched ones emitted as
        the join's kind says)."""
        return self._drop(None)
