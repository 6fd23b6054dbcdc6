"""Time for code that decides expiry (blob TTLs, job claims, leases), injectable so tests move time instead
of sleeping.

A :data:`Clock` is a function returning milliseconds. Code that decides expiry takes one as an argument
with a real default: :func:`system_clock_ms` (epoch ms: times that are stored or shown, such as a blob's
TTL) or :func:`monotonic_ms` (durations measured inside one process, such as the time since a lease was
last renewed: immune to steps of the wall clock). A test passes one :class:`ManualClock` for either; it
moves only when told (:meth:`ManualClock.advance`), so a 30-second expiry is checked in microseconds and
cannot be missed by a slow machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["DEFAULT_START_MS", "Clock", "ManualClock", "monotonic_ms", "system_clock_ms"]

Clock = Callable[[], int]
"""Returns the current time in milliseconds (epoch ms, or an arbitrary origin for durations)."""

DEFAULT_START_MS = 1_700_000_000_000
"""Where a :class:`ManualClock` starts unless told otherwise (2023-11-14T22:13:20Z)."""


def system_clock_ms() -> int:
    """The wall clock in epoch milliseconds."""
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """A monotonic clock in milliseconds (arbitrary origin): for durations within one process."""
    return int(time.monotonic() * 1000)


class ManualClock:
    """A clock (epoch ms) that moves only when told: a test passes it wherever a :data:`Clock` is taken and
    calls :meth:`advance` to let a TTL, a claim or a lease expire without waiting."""

    def __init__(self, start_ms: int = DEFAULT_START_MS) -> None:
        self.now_ms = int(start_ms)

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, *, days: float = 0, hours: float = 0, seconds: float = 0, ms: int = 0) -> int:
        """Move forward (never back); returns the new time."""
        step = int(days * 86_400_000 + hours * 3_600_000 + seconds * 1000 + ms)
        if step < 0:
            raise ValueError(f"a ManualClock only moves forward, got {step} ms")
        self.now_ms += step
        return self.now_ms
