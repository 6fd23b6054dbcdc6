"""A bounded upload pool: ``threadPoolCount`` threads, a queue of ``blockingQueueSize`` jobs, and
caller-runs when the queue is full (backpressure: the sending thread uploads itself, nothing is dropped).

This is Samza's ``ThreadPoolExecutor(..., CallerRunsPolicy)``. Threads are daemons, so a request stuck on
a silent server cannot keep the process alive; :meth:`shutdown` waits for queued work.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sparza.systems.azureblob.errors import WriterClosedError

__all__ = ["UploadPool"]

_STOP = object()


class UploadPool:
    """Runs upload jobs on a few threads; a full queue makes :meth:`submit` run the job in the caller."""

    def __init__(self, threads: int, queue_size: int, name: str = "azureblob-upload") -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(queue_size, 0) or 1)
        self._queue_size = queue_size
        self._closed = False
        self.caller_runs = 0
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            future, fn = item
            _run(future, fn)

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        """Queue ``fn``; run it now in this thread when the queue is full (or has size 0)."""
        if self._closed:
            raise WriterClosedError("the upload pool is shut down (the producer was stopped)")
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()
        if self._queue_size > 0:
            try:
                self._queue.put_nowait((future, fn))
                return future
            except queue.Full:
                pass
        self.caller_runs += 1
        _run(future, fn)
        return future

    def shutdown(self, wait: bool = True) -> None:
        """Stop the threads after the queued jobs (each thread takes one stop marker)."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            try:
                self._queue.put(_STOP, block=wait)
            except queue.Full:
                break  # daemon threads stuck on a silent server: leave them
        if wait:
            for thread in self._threads:
                thread.join()


def _run(future: Future[Any], fn: Callable[[], Any]) -> None:
    try:
        result = fn()
    except BaseException as exc:  # the future carries it to whoever waits
        future.set_exception(exc)
    else:
        future.set_result(result)
