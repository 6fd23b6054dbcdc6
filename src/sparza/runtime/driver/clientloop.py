"""The batch loop on Spark Connect: the client plans each batch and runs it as one batch job on the server whose
result rows come back to the client.

Why not Structured Streaming through Connect: there, the source's planning (``latestOffset``) and the
``foreachBatch`` function run in Python processes on the *server* (checked with a Connect server
started from pyspark 4.3: other pids, the server's working dir). The runner's state (metrics, status
line, failure detection, ``request_stop``, the last results) would stay on the server, and the stop
file the source reads would have to be on the server's disk. The server's streaming source runner also
does not see the session's Python artifacts, so sparza would have to be installed on the server.

What this loop does instead, in the client process (the Connect client is the processor's driver):

1. **plan**: the same :class:`~sparza.runtime.driver.source.SparzaStreamReader` Spark's engine would call
   (``initialOffset``, ``latestOffset``, ``prepareForTriggerAvailableNow``, ``partitions``), in-process;
2. **run**: ``spark.read.format("sparza")`` with the batch's task splits (one Spark partition per
   task, see :class:`~sparza.runtime.driver.source.SparzaBatchReader`, whose ``read`` runs the task's batch as
   the stream reader's does) goes to ``foreach_batch``, the runner's ``_on_batch``, which collects one
   result row per task.

It keeps no offset log: the task checkpoints are the only record of positions. Every start plans from them,
and a batch the last run left half done is completed exactly: tasks that committed it read on, a task that
flushed outputs without committing (an open intent) replays that exact range with its planning time, the
others plan from their checkpoint (see :mod:`sparza.engine.planner`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ClientDrivenQuery"]


class ClientDrivenQuery:
    """A streaming query the client drives (see the module docstring), with the part of
    ``StreamingQuery``'s interface the runner uses: ``isActive``, ``status``, ``lastProgress``,
    ``awaitTermination``, ``stop``, ``exception``."""

    def __init__(self, spark: Any, reader: Any, foreach_batch: Callable[[Any, int], None],
                 *, trigger_ms: int, available_now: bool, stop_requested: Callable[[], bool], name: str) -> None:
        self._spark = spark
        self._reader = reader
        self._foreach_batch = foreach_batch
        self._trigger_ms = trigger_ms
        self._available_now = available_now
        self._stop_requested = stop_requested
        self.name = name
        self._stopping = threading.Event()
        self._active = False
        self._in_trigger = False
        self._error: BaseException | None = None
        self._message = "Initializing sources"
        self.lastProgress: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name=f"sparza-client-loop-{name}", daemon=True)

    # --- StreamingQuery-like interface ---------------------------------------------------------
    def start(self) -> ClientDrivenQuery:
        """Start the loop thread (returns at once)."""
        self._active = True
        self._thread.start()
        return self

    @property
    def isActive(self) -> bool:
        """True until the loop ended (stopped, caught up under AvailableNow, or failed)."""
        return self._active

    @property
    def status(self) -> dict[str, Any]:
        """``{"message", "isTriggerActive", "isDataAvailable"}`` as StreamingQuery.status."""
        return {"message": self._message, "isTriggerActive": self._in_trigger, "isDataAvailable": self._in_trigger}

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Wait for the end (up to ``timeout`` s); raises the loop's failure as StreamingQuery does."""
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Plan no further batch and wait for the running one to finish (unlike Spark's stop, which
        interrupts it: a batch here is one Spark job the client waits for)."""
        self._stopping.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def exception(self) -> BaseException | None:
        """The failure that ended the loop, or None."""
        return self._error

    # --- the loop ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # reported through exception()/awaitTermination(), as Spark does
            self._error = exc
        finally:
            self._active = False
            self._in_trigger = False
            self._message = "Stopped"

    def _halted(self) -> bool:
        return self._stopping.is_set() or self._stop_requested()

    def _loop(self) -> None:
        reader = self._reader
        start = reader.initialOffset()  # from the task checkpoints, with every open intent's replay
        if self._available_now:
            reader.prepareForTriggerAvailableNow()
        self._message = "Waiting for data to arrive"
        batch_id = 0  # this run's count, for the status line only: it restarts at 0 as Spark's does
        while not self._halted():
            began = time.monotonic()
            end = reader.latestOffset(start, None)
            if end == start:
                if self._available_now:
                    return
                self._stopping.wait(max(self._trigger_ms, 100) / 1000.0)
                continue
            self._run_batch(batch_id, start, end)
            batch_id, start = batch_id + 1, end
            if self._trigger_ms > 0:
                self._stopping.wait(max(0.0, self._trigger_ms / 1000.0 - (time.monotonic() - began)))

    def _run_batch(self, batch_id: int, start: dict[str, Any], end: dict[str, Any]) -> None:
        self._in_trigger = True
        self._message = "Processing new data"
        began = time.monotonic()
        try:
            splits = self._reader.partitions(start, end)
            df = self._spark.read.format("sparza").options(**self._reader.batch_options(splits)).load()
            self._foreach_batch(df, batch_id)
        finally:
            self._in_trigger = False
            self._message = "Waiting for data to arrive"
        self.lastProgress = {"id": self.name, "batchId": batch_id, "numInputRows": len(splits),
                             "durationMs": {"triggerExecution": int((time.monotonic() - began) * 1000)}}
