"""Event-time windows of the high-level API: tumbling and sliding (hopping) windows with a fold.

A window groups messages by ``key_fn(message)`` and by time range ``[start, end)``; each message
is folded into the accumulator (``fold(message, acc) -> acc``, starting from ``init``). A window
fires once, when the task watermark reaches its end, and emits a :class:`WindowPane`. Keys and
accumulators are stored as JSON in the window's task store, so both must be JSON-able (tuples come
back as lists).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparza.errors import SparzaError

__all__ = ["WindowError", "WindowPane", "WindowSpec", "Windows"]


class WindowError(SparzaError, ValueError):
    """A window was declared with bad sizes, or a message had no event time to window it by."""


@dataclass(frozen=True, slots=True)
class WindowPane:
    """The result of one window: its key, its range ``[start, end)`` in epoch ms and the folded value."""

    key: Any
    start: int
    end: int
    value: Any


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """A window definition; build it with :class:`Windows`."""

    size_ms: int
    slide_ms: int
    key_fn: Callable[[Any], Any]
    init: Any
    fold: Callable[[Any, Any], Any]
    timestamp_fn: Callable[[Any], int] | None = None

    @property
    def kind(self) -> str:
        """``tumbling`` when windows do not overlap, else ``sliding``."""
        return "tumbling" if self.slide_ms == self.size_ms else "sliding"

    def initial(self) -> Any:
        """A fresh accumulator: ``init()`` when callable, else a deep copy of ``init``."""
        return self.init() if callable(self.init) else copy.deepcopy(self.init)

    def starts(self, timestamp: int) -> list[int]:
        """Start times of the windows containing ``timestamp``, oldest first."""
        last = timestamp - (timestamp % self.slide_ms)  # Python's % keeps this right for negative times
        out: list[int] = []
        start = last
        while start + self.size_ms > timestamp:
            out.append(start)
            start -= self.slide_ms
        return out[::-1]


class Windows:
    """Factories for window definitions (Samza's ``Windows``)."""

    @staticmethod
    def tumbling(size_ms: int, key_fn: Callable[[Any], Any], init: Any, fold: Callable[[Any, Any], Any],
                 timestamp_fn: Callable[[Any], int] | None = None) -> WindowSpec:
        """Back-to-back windows of ``size_ms``; each message is in exactly one."""
        if int(size_ms) <= 0:
            raise WindowError(f"window size must be > 0 ms, got {size_ms}")
        return WindowSpec(int(size_ms), int(size_ms), key_fn, init, fold, timestamp_fn)

    @staticmethod
    def sliding(size_ms: int, slide_ms: int, key_fn: Callable[[Any], Any], init: Any,
                fold: Callable[[Any, Any], Any], timestamp_fn: Callable[[Any], int] | None = None) -> WindowSpec:
        """Windows of ``size_ms`` starting every ``slide_ms``; a message is in ``size/slide`` of them."""
        if int(size_ms) <= 0 or int(slide_ms) <= 0:
            raise WindowError(f"window size and slide must be > 0 ms, got {size_ms} and {slide_ms}")
        if int(slide_ms) > int(size_ms):
            raise WindowError(f"slide ({slide_ms} ms) larger than size ({size_ms} ms) would skip messages")
        return WindowSpec(int(size_ms), int(slide_ms), key_fn, init, fold, timestamp_fn)
