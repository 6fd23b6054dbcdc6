"""Scheduler: one object that runs a processor's periodic coordination actions, periods from config.

Samza had six scheduler classes with a thread each and hard-coded delays, and any exception in one
stopped the whole coordinator. Here one timer thread dispatches named actions to a small pool:
an action never overlaps itself (a run that is still going when its next turn comes is skipped),
a slow action (a listener stopping tasks) cannot delay lease renewal, and an exception is reported
to ``on_error`` and the action simply runs again at its next period — storage outages are expected.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

__all__ = ["Scheduler"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Action:
    name: str
    period_s: float
    fn: Callable[[], object]
    running: bool = False
    cancelled: bool = False
    runs: int = 0
    errors: int = 0
    thread: int = 0
    pending: set[int] = field(default_factory=set)


class Scheduler:
    """Periodic named actions on one timer thread and a worker pool. Thread-safe."""

    def __init__(self, name: str, *, workers: int = 6,
                 on_error: Callable[[str, BaseException], None] | None = None) -> None:
        self.name = name
        self._on_error = on_error
        self._actions: dict[str, _Action] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-action")
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._running_set: set[_Action] = set()

    def every(self, name: str, period_ms: int, fn: Callable[[], object], *,
              initial_delay_ms: int | None = None) -> None:
        """Run ``fn`` every ``period_ms`` (first after ``initial_delay_ms``, default: right away)."""
        with self._cond:
            old = self._actions.get(name)
            if old is not None:
                old.cancelled = True
            self._actions[name] = _Action(name, period_ms / 1000.0, fn)
            self._push(name, (initial_delay_ms or 0) / 1000.0)

    def cancel(self, name: str) -> None:
        """Stop running ``name`` (a run in progress finishes)."""
        with self._cond:
            action = self._actions.pop(name, None)
            if action is not None:
                action.cancelled = True

    def has(self, name: str) -> bool:
        """True when ``name`` is scheduled."""
        with self._cond:
            return name in self._actions

    def run_soon(self, name: str) -> None:
        """Run ``name`` as soon as possible, in addition to its period (e.g. right after an event)."""
        with self._cond:
            if name in self._actions:
                self._push(name, 0.0)

    def stats(self) -> dict[str, tuple[int, int]]:
        """Action name → (runs, errors)."""
        with self._cond:
            return {a.name: (a.runs, a.errors) for a in self._actions.values()}

    def _push(self, name: str, delay_s: float) -> None:
        heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), name))
        self._cond.notify()

    def start(self) -> None:
        """Start the timer thread."""
        with self._cond:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name=f"{self.name}-timer", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop dispatching and wait (up to ``timeout_s``) for running actions to end."""
        with self._cond:
            self._stopping = True
            for action in self._actions.values():
                action.cancelled = True
            self._actions.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout_s
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._cond:
            me = threading.get_ident()  # stop() called from an action must not wait for itself
            while any(a.running and a.thread != me for a in self._running_set) and time.monotonic() < deadline:
                self._cond.wait(0.05)

    def _loop(self) -> None:
        with self._cond:
            while not self._stopping:
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, name = self._heap[0]
                now = time.monotonic()
                if due > now:
                    self._cond.wait(due - now)
                    continue
                heapq.heappop(self._heap)
                action = self._actions.get(name)
                if action is None or action.cancelled:
                    continue
                if not any(n == name for _, _, n in self._heap):
                    self._push(name, action.period_s)  # the next periodic run
                if action.running:
                    continue  # never overlap a run of the same action
                action.running = True
                self._running_set.add(action)
                try:
                    self._pool.submit(self._run, action)
                except RuntimeError:
                    return  # pool shut down

    def _run(self, action: _Action) -> None:
        action.thread = threading.get_ident()
        try:
            if not action.cancelled:
                action.fn()
                action.runs += 1
        except BaseException as exc:
            action.errors += 1
            log.debug("%s: action %s failed: %r", self.name, action.name, exc)
            if self._on_error is not None:
                try:
                    self._on_error(action.name, exc)
                except Exception:
                    log.exception("%s: error handler failed", self.name)
        finally:
            with self._cond:
                action.running = False
                self._running_set.discard(action)
                self._cond.notify_all()
