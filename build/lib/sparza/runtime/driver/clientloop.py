"""The batch loop on Spark Connect: the client plans each batch, writes the plan ahead, and runs it as one
batch job on the server whose result rows come back to the client.

Why not Structured Streaming through Connect: there, the source's planning (``latestOffset``) and the
``foreachBatch`` function run in Python processes on the *server* (checked with a Connect server
started from pyspark 4.3: other pids, the server's working dir). The runner's state (metrics, status
line, failure detection, ``request_stop``, the last results) would stay on the server, and the stop
file the source reads would have to be on the server's disk. The server's streaming source runner also
does not see the session's Python artifacts, so sparza would have to be installed on the server.

What this loop does instead, in the client process (the Connect client is the processor's driver):

1. **plan**: the same :class:`~sparza.runtime.driver.source.SparzaStreamReader` Spark's engine would call
   (``initialOffset``, ``latestOffset``, ``prepareForTriggerAvailableNow``, ``partitions``), in-process;
2. **write ahead**: the batch's start and end plans go to ``<checkpoint dir>/offsets/<batch id>`` (an
   atomic rename) before anything runs, as Spark writes its offset log;
3. **run**: ``spark.read.format("sparza")`` with the batch's task splits (one Spark partition per
   task, see :class:`~sparza.runtime.driver.source.SparzaBatchReader`, whose ``read`` runs the task's batch as
   the stream reader's does) goes to ``foreach_batch``, the runner's ``_on_batch``, which collects one
   result row per task;
4. **commit**: ``<checkpoint dir>/commits/<batch id>``.

A restart whose last logged batch has no commit runs that batch again with the very same plans (same
``batch``, ranges and ``planned_at``), as Spark's offset log does; tasks that had committed it skip it.
Losing the log is the same as losing Spark's checkpoint dir: the next start plans from the task
checkpoints, and open intents replay their exact range (see :mod:`sparza.engine.planner`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ClientDrivenQuery", "PlanLog"]

_RETAINED = 20
"""Logged batches kept (Spark keeps 100 by default; a restart needs only the last one)."""


class PlanLog:
    """The client loop's write-ahead log: ``offsets/<n>`` (``{"start": plan, "end": plan}``) written before
    batch ``n`` runs, ``commits/<n>`` after it committed. A local directory of the client."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(str(directory).removeprefix("file:"))
        self._offsets = self.directory / "offsets"
        self._commits = self.directory / "commits"

    @staticmethod
    def _ids(folder: Path) -> list[int]:
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())

    def last(self) -> tuple[int, dict[str, Any], dict[str, Any], bool] | None:
        """``(batch id, start plan, end plan, committed)`` of the newest logged batch, or None."""
        ids = self._ids(self._offsets)
        if not ids:
            return None
        n = ids[-1]
        body = json.loads((self._offsets / str(n)).read_text(encoding="utf-8"))
        return n, body["start"], body["end"], (self._commits / str(n)).exists()

    def _write(self, folder: Path, n: int, body: dict[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{n}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(body, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, folder / str(n))

    def write_offsets(self, n: int, start: dict[str, Any], end: dict[str, Any]) -> None:
        """Record batch ``n``'s plans before it runs."""
        self._write(self._offsets, n, {"start": start, "end": end})

    def write_commit(self, n: int) -> None:
        """Record that batch ``n`` committed, and forget batches older than the retained ones."""
        self._write(self._commits, n, {"batch": n})
        for folder in (self._offsets, self._commits):
            for old in self._ids(folder):
                if old <= n - _RETAINED:
                    (folder / str(old)).unlink(missing_ok=True)


class ClientDrivenQuery:
    """A streaming query the client drives (see the module docstring), with the part of
    ``StreamingQuery``'s interface the runner uses: ``isActive``, ``status``, ``lastProgress``,
    ``awaitTermination``, ``stop``, ``exception``."""

    def __init__(self, spark: Any, reader: Any, foreach_batch: Callable[[Any, int], None], checkpoint_dir: str,
                 *, trigger_ms: int, available_now: bool, stop_requested: Callable[[], bool], name: str) -> None:
        self._spark = spark
        self._reader = reader
        self._foreach_batch = foreach_batch
        self._log = PlanLog(checkpoint_dir)
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
        last = self._log.last()
        if last is None:
            next_id, start = 0, reader.initialOffset()
        elif last[3]:
            next_id, start = last[0] + 1, last[2]
        else:  # the newest batch did not commit: run the very same plans again before anything else
            self._run_batch(last[0], last[1], last[2])
            next_id, start = last[0] + 1, last[2]
        if self._available_now:
            reader.prepareForTriggerAvailableNow()
        self._message = "Waiting for data to arrive"
        while not self._halted():
            began = time.monotonic()
            end = reader.latestOffset(start, None)
            if end == start:
                if self._available_now:
                    return
                self._stopping.wait(max(self._trigger_ms, 100) / 1000.0)
                continue
            self._log.write_offsets(next_id, start, end)
            self._run_batch(next_id, start, end)
            next_id, start = next_id + 1, end
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
            self._reader.commit(end)
            self._log.write_commit(batch_id)
        finally:
            self._in_trigger = False
            self._message = "Waiting for data to arrive"
        self.lastProgress = {"id": self.name, "batchId": batch_id, "numInputRows": len(splits),
                             "durationMs": {"triggerExecution": int((time.monotonic() - began) * 1000)}}
