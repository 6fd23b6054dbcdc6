"""Waiting in tests for something another process or thread will do: one polling loop with a deadline, so
every test that waits says what it waits for and fails with that message instead of hanging."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["eventually"]

T = TypeVar("T")


def eventually(predicate: Callable[[], T], timeout: float, interval: float = 0.2,
               message: str | Callable[[], str] = "the condition did not hold") -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and return that.

    After ``timeout`` seconds without it, raise :class:`AssertionError` with ``message`` (a callable is called
    then, so the message can show the state at the deadline). The predicate may raise itself, e.g. when the
    process it waits on has exited: that ends the wait at once with its own error.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(message() if callable(message) else message)
        time.sleep(interval)
