"""How a running job stops on a signal: SIGINT (Ctrl-C) and SIGTERM finish the running batch, commit and
exit 0; a second Ctrl-C forces the stop, saying what that costs.

A terminal sends Ctrl-C to its whole process group. PySpark starts Spark's JVM ignoring SIGINT (and the
Python processes the JVM starts directly inherit that), but the Python workers its daemon forks restore
Python's default handler, and creating a SparkContext replaces the driver's SIGINT handler with one that
cancels every Spark job and raises ``KeyboardInterrupt``. So the driver installs :class:`StopOnSignals`
and installs it again once its session exists (:meth:`StopOnSignals.reassert`), and sparza's code on an
executor calls :func:`ignore_interrupts` first: only the driver decides when the job stops.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ForcedStop", "StopOnSignals", "ignore_interrupts", "sigint_kept"]

FORCE_HINT = "Ctrl-C again to stop at once without committing"


class ForcedStop(KeyboardInterrupt):
    """A second Ctrl-C while a stop was already under way: the running batch is abandoned (not committed;
    the next start runs it again, exactly once)."""


class StopOnSignals:
    """SIGINT and SIGTERM call ``request_stop("stopped by SIGINT")`` and say so through ``say``; a second
    SIGINT raises :class:`ForcedStop`. Installed only from the main thread (signals are delivered there)."""

    def __init__(self, request_stop: Callable[[str], None], say: Callable[[str], None]) -> None:
        self._request_stop = request_stop
        self._say = say
        self._previous: dict[int, Any] = {}
        self._stopping = False

    def install(self) -> StopOnSignals:
        """Handle SIGINT and SIGTERM from now on (remembering the previous handlers); a no-op off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, self._handle)
        return self

    def reassert(self) -> None:
        """Install again after something replaced the handlers (PySpark's SparkContext takes SIGINT)."""
        if self._previous and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, self._handle)

    def restore(self) -> None:
        """Put the handlers back that were there before :meth:`install`."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if not self._stopping:
            self._stopping = True
            self._request_stop(f"stopped by {name}")
            self._say(f"sparza: {name}: finishing the running batch, committing, then exiting"
                      + (f" ({FORCE_HINT})" if signum == signal.SIGINT else ""))
            return
        if signum != signal.SIGINT:
            return  # a repeated SIGTERM (a supervisor's) does not force anything
        self._say("sparza: second Ctrl-C: stopping now; the running batch is not committed and runs again "
                  "at the next start (exactly once)")
        # Whatever py4j was doing is cut short: its reports of that are noise after the line above.
        logging.disable(logging.CRITICAL)
        raise ForcedStop


def ignore_interrupts() -> None:
    """In a Python worker that runs sparza's tasks: ignore SIGINT, which a terminal's Ctrl-C sends to the
    whole process group; the driver decides when the job stops. A no-op off the main thread."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def sigint_kept() -> Iterator[None]:
    """Whatever handled SIGINT before the block handles it after: around building a SparkContext, whose
    own handler (cancel every Spark job, raise ``KeyboardInterrupt``) would skip the commit of the batch."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
