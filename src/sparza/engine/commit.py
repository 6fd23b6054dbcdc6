"""The commit of one task's batch: one object that runs six numbered steps, with a status that only moves forward.

:meth:`TaskCommit.run` runs the steps in this order, after the task processed the batch (the numbers are the
ones ``docs/runtime.md`` and ``docs/guarantees.md`` use). After each step the commit tells
each :class:`CommitListener` (``task.commit.listeners``: the seam the fault injection of tests and of the
guarantees harness uses from the outside, :mod:`sparza.testing.faults`), and a listener that raises fails the
commit right there:

1. **intent** — if the task used producers, write its :class:`~sparza.engine.checkpoint.Intent`
   (the batch's exact input range and output version) into the task checkpoint, conditional on the
   version read when the batch began and fenced by generation. From here on a restart replays
   exactly this range with this version, even if Spark's offset log is lost.
2. **flush** — flush every producer the task used with ``Transaction(<job>/<task>, version)``.
   Producers commit idempotently per transaction, so a replay adds nothing.
3. **adjunct** — commit the task's adjunct stores (their checkpoint entry).
4. **snapshot** — write cached store entries, checkpoint every store, upload the backed-up ones. This
   work starts right after step 1, in a thread, and overlaps steps 2 and 3 (they touch neither
   the stores nor anything the snapshot reads); the step itself waits for it. A failure anywhere
   waits for it too before it is raised, so the caller never closes stores a snapshot still uses.
   Blobs a snapshot uploaded before a failure carry a TTL and no checkpoint names them (as after a
   failure right after step 4).
5. **checkpoint** — write the task checkpoint (offsets, snapshot ids, control state), conditional
   and fenced as in step 1. This is the commit point: before it the previous checkpoint is in
   force and the batch runs again; after it the batch is done.
6. **cleanup** — store markers, remove the new snapshot's TTL, delete what the previous snapshot no
   longer needs, old local checkpoints. A failure here is finished by the next batch or restart.

Whatever fails before step 5 leaves the previous checkpoint in force and the commit ``FAILED``; the caller
abandons the producers and drops the in-memory task, so the retry starts from committed state. The exception
raised carries a note naming the step it failed in and the status (:func:`failed_step`): the task's status line
and its trace file say where the commit stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

from sparza.config import LIST, Config, define_key
from sparza.engine.checkpoint import CheckpointStore, Intent, TaskCheckpoint
from sparza.engine.errors import RuntimeStateError
from sparza.metrics import MetricsRegistry
from sparza.systems import SupportsConcurrentFlush, SystemProducer, Transaction, load_object

__all__ = [
    "CommitListener",
    "CommitStatus",
    "CommitStep",
    "TaskCommit",
    "commit_listeners",
    "failed_step",
]

COMMIT_LISTENERS = define_key("task.commit.listeners", "",
                              "Comma list of dotted CommitListener classes (built with the job config) told of every "
                              "commit step of every task; raising there fails the commit at that step.", "runtime",
                              kind=LIST)


class CommitStep(enum.Enum):
    """The moments a :class:`CommitListener` hears of, in order: right after each step (inside cleanup, after
    the store markers and before the blob-store cleanup, for the last)."""

    AFTER_INTENT = "after-intent"
    AFTER_FLUSH = "after-flush"
    AFTER_ADJUNCT = "after-adjunct"
    AFTER_SNAPSHOT = "after-snapshot"
    AFTER_CHECKPOINT = "after-checkpoint"
    DURING_CLEANUP = "during-cleanup"


class CommitStatus(enum.Enum):
    """Where a :class:`TaskCommit` stands; it only moves forward, to ``FAILED`` from anywhere before
    ``COMMITTED``."""

    STARTED = "started"  # nothing of the batch is durable yet
    PREPARED = "prepared"  # intent written, outputs flushed, snapshots uploaded: step 5 decides
    COMMITTED = "committed"  # the task checkpoint names the batch (step 5): it is done
    COMPLETE = "complete"  # cleanup done (step 6)
    FAILED = "failed"  # a step before 5 failed: the previous checkpoint is in force


@runtime_checkable
class CommitListener(Protocol):
    """Told of every commit step of every task of a job (``task.commit.listeners``: dotted classes whose
    constructor takes the job :class:`~sparza.config.Config`). Raising fails the commit at that step."""

    def on_step(self, task: str, step: CommitStep, batch: int) -> None:
        """``step`` of the commit of ``task``'s batch ``batch`` (its output batch) is done."""


def commit_listeners(config: Config) -> list[CommitListener]:
    """The listeners of a job's commits: ``task.commit.listeners``."""
    paths = [p for p in COMMIT_LISTENERS.get(config) if p]
    listeners: list[CommitListener] = []
    for path in paths:
        cls = load_object(path, "task.commit.listeners")
        listener = cls(config) if isinstance(cls, type) else cls
        if not isinstance(listener, CommitListener):
            from sparza.errors import ConfigError

            raise ConfigError("task.commit.listeners", path, "a class with on_step(task, step, batch)")
        listeners.append(listener)
    return listeners


_FLUSH_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_FLUSH_LOCKS_LOCK = threading.Lock()


def _flush_guard(producer: Any) -> contextlib.AbstractContextManager[Any]:
    """The lock that takes ``producer``'s flushes one at a time, or nothing when it flushes concurrently."""
    if isinstance(producer, SupportsConcurrentFlush) and producer.flushes_concurrently():
        return contextlib.nullcontext()
    with _FLUSH_LOCKS_LOCK:
        lock = _FLUSH_LOCKS.get(producer)
        if lock is None:
            lock = _FLUSH_LOCKS[producer] = threading.Lock()
    return lock


CheckpointBuilder = Callable[[dict[str, str], dict[str, Any] | None], TaskCheckpoint]
"""``build(snapshot ids, adjunct entry)``: the task checkpoint step 5 writes."""


class TaskCommit:
    """Commits one batch of one task: :meth:`run` runs the steps (see the module docstring).

    ``stores`` is the task's :class:`~sparza.engine.stores.TaskStores`; ``adjunct`` its adjunct manager or
    None; ``intent`` the batch's range and output batch; ``checkpoint`` builds the task checkpoint of step 5
    from the snapshot ids and the adjunct entry.
    """

    def __init__(self, *, task: str, batch: int, checkpoints: CheckpointStore, metrics: MetricsRegistry,
                 stores: Any, adjunct: Any, producers: Mapping[str, SystemProducer], transaction: Transaction,
                 committed: TaskCheckpoint | None, etag: str | None, generation: int, intent: Intent,
                 checkpoint: CheckpointBuilder, listeners: list[CommitListener] | None = None) -> None:
        self.task = task
        self.batch = batch
        self.checkpoints = checkpoints
        self.metrics = metrics
        self.stores = stores
        self.adjunct = adjunct
        self.producers = producers
        self.transaction = transaction
        self.committed = committed
        self.etag = etag
        self.generation = generation
        self.intent = intent
        self.build_checkpoint = checkpoint
        self.listeners = listeners or []
        self.status = CommitStatus.STARTED
        self.last_step: CommitStep | None = None  # the last step done (its listeners told)
        self.step = 0  # the step running, 1 to 6 (0: not started)
        self.snapshot_ids: dict[str, str] = {}
        self.written: TaskCheckpoint | None = None  # the task checkpoint step 5 wrote
        self.adjunct_entry: dict[str, Any] | None = None
        self._snapshot: Future[dict[str, str]] | None = None

    def run(self, on_committed: Callable[[], None] | None = None) -> None:
        """Run steps 1 to 6; ``on_committed`` runs right after the commit point (step 5), before cleanup.

        A failure before step 5 leaves the status ``FAILED`` and is raised (after the snapshot work, which
        overlaps steps 2 and 3, finished with the stores); a failure in cleanup is raised with the batch
        committed (the next batch or restart finishes it).
        """
        if self.status is not CommitStatus.STARTED:
            raise RuntimeStateError(f"commit of task '{self.task}' batch {self.batch} ran twice ({self.status.name})")
        try:
            self._write_intent()                   # 1
            self._begin_snapshot()                 # 4 starts here, in a thread
            try:
                self._flush()                      # 2
                self._commit_adjunct()             # 3
            except BaseException:
                self._settle()  # the failure path closes the stores: let the snapshot finish with them first
                raise
            self._finish_snapshot()                # 4
            self.status = CommitStatus.PREPARED
            self._write_checkpoint()               # 5: the commit point
        except BaseException as exc:
            if self.status is not CommitStatus.COMMITTED:
                self.status = CommitStatus.FAILED
            exc.add_note(self._failure_note())
            raise
        if on_committed is not None:
            on_committed()
        try:
            self._cleanup()                        # 6
        except BaseException as exc:
            exc.add_note(self._failure_note())
            raise
        self.status = CommitStatus.COMPLETE

    def _failure_note(self) -> str:
        done = f"; last done: {self.last_step.value}" if self.last_step is not None else ""
        return (f"{_NOTE}{self.step} ({_STEP_NAMES[self.step]}{done}), task '{self.task}' batch {self.batch}: "
                f"{self.status.value} ({_STATUS_MEANS[self.status]})")

    def _done(self, step: CommitStep) -> None:
        self.last_step = step
        for listener in self.listeners:
            listener.on_step(self.task, step, self.transaction.version)

    # 1. intent
    def _write_intent(self) -> None:
        """Announce the batch's range before any output of it may become visible (only if outputs exist)."""
        self.step = 1
        if self.producers:
            base = self.committed or TaskCheckpoint(task=self.task, batch=0, generation=self.generation, offsets={})
            with self.metrics.timer("task", "intent-write-ms").time():
                self.etag = self.checkpoints.write(
                    dataclasses.replace(base, generation=self.generation, pending=self.intent), self.etag)
        self._done(CommitStep.AFTER_INTENT)

    # 2. flush
    def _flush(self) -> None:
        """Flush every producer the task used, idempotently per transaction (one flush at a time per producer, unless
        it flushes its sources concurrently: a container commits its tasks beside each other)."""
        self.step = 2
        with self.metrics.timer("task", "flush-ms").time():
            for system, producer in self.producers.items():
                with self.metrics.timer("task", f"flush-{system}-ms").time(), _flush_guard(producer):
                    producer.flush(self.task, transaction=self.transaction)
        self._done(CommitStep.AFTER_FLUSH)

    # 3. adjunct
    def _commit_adjunct(self) -> None:
        """Commit adjunct stores; their entry goes into the task checkpoint."""
        self.step = 3
        with self.metrics.timer("task", "adjunct-commit-ms").time():
            self.adjunct_entry = (self.adjunct.commit(self.batch, self.generation) if self.adjunct is not None
                                  else None)
        self._done(CommitStep.AFTER_ADJUNCT)

    # 4. snapshot
    def _begin_snapshot(self) -> None:
        """Start step 4's work (checkpoint and upload every store) in a thread, to overlap steps 2 and 3
        (they touch neither the stores nor anything the snapshot reads)."""
        previous = dict(self.committed.stores) if self.committed else {}
        timer = self.metrics.timer("task", "snapshot-ms")
        future: Future[dict[str, str]] = Future()
        batch = self.batch

        def work() -> None:
            began = time.perf_counter()
            try:
                future.set_result(self.stores.snapshot(batch, previous))
            except BaseException as exc:  # handed to whoever waits: _settle() or _finish_snapshot()
                future.set_exception(exc)
            finally:
                timer.update((time.perf_counter() - began) * 1000.0)

        self._snapshot = future
        threading.Thread(target=work, name=f"sparza-snapshot-{self.task}", daemon=True).start()

    def _settle(self) -> None:
        if self._snapshot is not None:
            with contextlib.suppress(BaseException):
                self._snapshot.result()

    def _finish_snapshot(self) -> None:
        """Wait for the snapshot work: every store checkpointed, the backed-up ones uploaded."""
        self.step = 4
        assert self._snapshot is not None
        with self.metrics.timer("task", "snapshot-wait-ms").time():
            self.snapshot_ids = self._snapshot.result()
        self._done(CommitStep.AFTER_SNAPSHOT)

    # 5. checkpoint
    def _write_checkpoint(self) -> None:
        """Write the task checkpoint: the commit point."""
        self.step = 5
        checkpoint = self.build_checkpoint(self.snapshot_ids, self.adjunct_entry)
        written = dataclasses.replace(checkpoint, generation=self.generation, written_at_ms=int(time.time() * 1000))
        with self.metrics.timer("task", "checkpoint-write-ms").time():
            self.etag = self.checkpoints.write(written, self.etag)
        self.written = written
        self.status = CommitStatus.COMMITTED
        self._done(CommitStep.AFTER_CHECKPOINT)

    # 6. cleanup
    def _cleanup(self) -> None:
        """Markers, TTL removal of the new snapshot, deletion of what the old one no longer needs."""
        self.step = 6
        with self.metrics.timer("task", "cleanup-ms").time():
            self.stores.mark_committed(self.batch, self.snapshot_ids)
            self._done(CommitStep.DURING_CLEANUP)
            self.stores.clean_up(self.batch, self.snapshot_ids)
            if self.adjunct is not None:
                self.adjunct.committed(self.batch)  # committed means permanent: no TTL left on its snapshots


_NOTE = "sparza: the commit failed in step "
_STEP_NAMES = {0: "before intent", 1: "intent", 2: "flush", 3: "adjunct", 4: "snapshot", 5: "checkpoint",
               6: "cleanup"}
_STATUS_MEANS = {
    CommitStatus.FAILED: "the previous checkpoint is in force: the batch runs again",
    CommitStatus.COMMITTED: "the batch is committed: the next batch or restart finishes its cleanup",
    CommitStatus.STARTED: "nothing of the batch is durable", CommitStatus.PREPARED: "step 5 decides",
    CommitStatus.COMPLETE: "done",
}


def failed_step(exc: BaseException) -> str | None:
    """What a commit that raised ``exc`` says of where it stopped (``step 2 (flush; last done: after-intent), task
    'P' batch 7: failed (...)``), or None when ``exc`` did not come out of a :class:`TaskCommit`."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, str) and note.startswith(_NOTE):
            return "step " + note[len(_NOTE):]
    return None
