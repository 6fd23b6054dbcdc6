"""The commit of one task's batch: one object, six numbered steps, a status that only moves forward.

The steps run in this order, after the task processed the batch (the numbers are the ones
``docs/runtime.md`` and ``docs/guarantees.md`` use; each step boundary is a fault point the
guarantees harness injects at, see :class:`CommitStep`):

1. **intent** — if the task used producers, write its :class:`~sparza.runtime.checkpoint.Intent`
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

Whatever fails before step 5 leaves the previous checkpoint in force; the caller abandons the
producers and drops the in-memory task, so the retry starts from committed state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from sparza.config import Config, define_key
from sparza.metrics import MetricsRegistry
from sparza.runtime.checkpoint import CheckpointStore, Intent, TaskCheckpoint
from sparza.runtime.errors import RuntimeStateError
from sparza.systems import SystemProducer, Transaction

__all__ = [
    "BatchStatus",
    "CommitStatus",
    "CommitStep",
    "FaultHook",
    "InjectedFault",
    "TaskCommit",
    "inject_fault",
    "register_fault_hook",
    "unregister_fault_hook",
]

define_key("task.testing.fail.once.file", None,
           "Testing only: the first task to create this file fails once at task.testing.fail.once.at (proves "
           "retries and restarts are exact).", "runtime")
define_key("task.testing.fault.hook", None,
           "Testing only: id of an in-process fault hook (register_fault_hook) called at every commit step; "
           "sparza.testing.TestRunner uses it to fail a chosen task and batch between two steps.", "runtime")
define_key("task.testing.fail.once.at", "after-flush",
           "Testing only: the commit step after which the injected failure happens: after-intent, after-flush, "
           "after-adjunct, after-snapshot, after-checkpoint or during-cleanup.", "runtime")


class BatchStatus(enum.Enum):
    """How a task's batch ended, as reported to the driver."""

    COMMITTED = "committed"
    SKIPPED = "skipped"  # a replay of a batch the task checkpoint already holds
    FAILED = "failed"  # a deterministic failure (poison message, task exception): the job stops


class CommitStep(enum.Enum):
    """The fault points of a commit: the failure happens right after the named step (or inside cleanup)."""

    AFTER_INTENT = "after-intent"
    AFTER_FLUSH = "after-flush"
    AFTER_ADJUNCT = "after-adjunct"
    AFTER_SNAPSHOT = "after-snapshot"
    AFTER_CHECKPOINT = "after-checkpoint"
    DURING_CLEANUP = "during-cleanup"


class CommitStatus(enum.IntEnum):
    """How far a commit got; each step requires the one before it."""

    STARTED = 0
    INTENT_WRITTEN = 1
    FLUSHED = 2
    ADJUNCT_COMMITTED = 3
    SNAPSHOTTED = 4
    CHECKPOINTED = 5
    CLEANED = 6


class InjectedFault(RuntimeError):
    """The one-time failure ``task.testing.fail.once.*`` or a fault hook asked for (never raised in production
    configs)."""


FaultHook = Callable[[str, CommitStep, int], None]
"""``hook(task, step, batch)``: called right after ``step`` of the commit of ``batch`` (the output version);
raising there fails the commit at that point."""

_FAULT_HOOKS: dict[str, FaultHook] = {}


def register_fault_hook(hook_id: str, hook: FaultHook) -> None:
    """Testing only: call ``hook`` at every commit step of jobs whose ``task.testing.fault.hook`` is ``hook_id``.

    In-process only (a Spark executor has its own registry): this is how :class:`sparza.testing.TestRunner`
    injects a failure between two commit steps of one task and batch.
    """
    _FAULT_HOOKS[hook_id] = hook


def unregister_fault_hook(hook_id: str) -> None:
    """Remove the hook registered under ``hook_id`` (nothing happens when there is none)."""
    _FAULT_HOOKS.pop(hook_id, None)


def inject_fault(config: Config, task: str, at: CommitStep) -> None:
    """Fail once at ``at`` when the config asks for it: the first task to create the file fails."""
    path = config.get_str("task.testing.fail.once.file", None)
    if not path:
        return
    wanted = config.get_choice("task.testing.fail.once.at", tuple(s.value for s in CommitStep), "after-flush")
    if wanted != at.value:
        return
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{task}\n".encode())
    os.close(fd)
    raise InjectedFault(f"injected one-time failure in task '{task}' {at.value.replace('-', ' ')}")


class TaskCommit:
    """Commits one batch of one task (see the module docstring for the steps).

    ``stores`` is the task's :class:`~sparza.runtime.stores.TaskStores`; ``adjunct`` its adjunct
    manager or None; ``control_state`` returns the control-message state to checkpoint.
    """

    def __init__(self, *, task: str, config: Config, checkpoints: CheckpointStore, metrics: MetricsRegistry,
                 stores: Any, adjunct: Any, producers: Mapping[str, SystemProducer], transaction: Transaction,
                 committed: TaskCheckpoint | None, etag: str | None, generation: int) -> None:
        self.task = task
        self.config = config
        self.checkpoints = checkpoints
        self.metrics = metrics
        self.stores = stores
        self.adjunct = adjunct
        self.producers = producers
        self.transaction = transaction
        self.committed = committed
        self.etag = etag
        self.generation = generation
        self.status = CommitStatus.STARTED
        self.snapshot_ids: dict[str, str] = {}
        self.adjunct_entry: dict[str, Any] | None = None
        self._snapshot: Future[dict[str, str]] | None = None

    def _advance(self, expected: CommitStatus, to: CommitStatus) -> None:
        if self.status is not expected:
            raise RuntimeStateError(f"commit of task '{self.task}' at step {to.name} found status {self.status.name}")
        self.status = to

    def _fault(self, at: CommitStep) -> None:
        inject_fault(self.config, self.task, at)
        if _FAULT_HOOKS:
            hook = _FAULT_HOOKS.get(self.config.get_str("task.testing.fault.hook", None) or "")
            if hook is not None:
                hook(self.task, at, self.transaction.version)

    # 1. intent
    def write_intent(self, intent: Intent) -> None:
        """Announce the batch's range before any output of it may become visible (only if outputs exist)."""
        if self.producers:
            base = self.committed or TaskCheckpoint(task=self.task, batch=0, generation=self.generation, offsets={})
            with self.metrics.timer("task", "intent-write-ms").time():
                self.etag = self.checkpoints.write(
                    dataclasses.replace(base, generation=self.generation, pending=intent), self.etag)
        self._advance(CommitStatus.STARTED, CommitStatus.INTENT_WRITTEN)
        self._fault(CommitStep.AFTER_INTENT)

    # 2. flush
    def flush(self) -> None:
        """Flush every producer the task used, idempotently per transaction."""
        with self.metrics.timer("task", "flush-ms").time():
            for system, producer in self.producers.items():
                with self.metrics.timer("task", f"flush-{system}-ms").time():
                    producer.flush(self.task, transaction=self.transaction)
        self._advance(CommitStatus.INTENT_WRITTEN, CommitStatus.FLUSHED)
        self._fault(CommitStep.AFTER_FLUSH)

    # 3. adjunct
    def commit_adjunct(self, batch: int) -> None:
        """Commit adjunct stores; their entry goes into the task checkpoint."""
        with self.metrics.timer("task", "adjunct-commit-ms").time():
            self.adjunct_entry = self.adjunct.commit(batch) if self.adjunct is not None else None
        self._advance(CommitStatus.FLUSHED, CommitStatus.ADJUNCT_COMMITTED)
        self._fault(CommitStep.AFTER_ADJUNCT)

    # 4. snapshot
    def begin_snapshot(self, batch: int) -> None:
        """Start step 4's work (checkpoint and upload every store) in a thread, to overlap steps 2 and 3."""
        if self._snapshot is not None:
            raise RuntimeStateError(f"commit of task '{self.task}' started its snapshot twice")
        previous = dict(self.committed.stores) if self.committed else {}
        timer = self.metrics.timer("task", "snapshot-ms")
        future: Future[dict[str, str]] = Future()

        def work() -> None:
            began = time.perf_counter()
            try:
                future.set_result(self.stores.snapshot(batch, previous))
            except BaseException as exc:  # handed to whoever waits: settle() or snapshot()
                future.set_exception(exc)
            finally:
                timer.update((time.perf_counter() - began) * 1000.0)

        self._snapshot = future
        threading.Thread(target=work, name=f"sparza-snapshot-{self.task}", daemon=True).start()

    def settle(self) -> None:
        """Wait for a snapshot started by :meth:`begin_snapshot` (a failure path calls this before it
        closes the stores the snapshot uses); its outcome no longer matters."""
        if self._snapshot is not None:
            with contextlib.suppress(BaseException):
                self._snapshot.result()

    def snapshot(self, batch: int) -> None:
        """Checkpoint every store and upload the backed-up ones (or wait for :meth:`begin_snapshot`'s work)."""
        if self._snapshot is None:
            previous = dict(self.committed.stores) if self.committed else {}
            with self.metrics.timer("task", "snapshot-ms").time():
                self.snapshot_ids = self.stores.snapshot(batch, previous)
        else:
            with self.metrics.timer("task", "snapshot-wait-ms").time():
                self.snapshot_ids = self._snapshot.result()
        self._advance(CommitStatus.ADJUNCT_COMMITTED, CommitStatus.SNAPSHOTTED)
        self._fault(CommitStep.AFTER_SNAPSHOT)

    # 5. checkpoint
    def write_checkpoint(self, build: Callable[[dict[str, str], dict[str, Any] | None], TaskCheckpoint]) -> None:
        """Write the task checkpoint ``build(snapshot_ids, adjunct_entry)``: the commit point."""
        checkpoint = build(self.snapshot_ids, self.adjunct_entry)
        with self.metrics.timer("task", "checkpoint-write-ms").time():
            self.etag = self.checkpoints.write(dataclasses.replace(
                checkpoint, generation=self.generation, written_at_ms=int(time.time() * 1000)), self.etag)
        self._advance(CommitStatus.SNAPSHOTTED, CommitStatus.CHECKPOINTED)
        self._fault(CommitStep.AFTER_CHECKPOINT)

    # 6. cleanup
    def cleanup(self, batch: int) -> None:
        """Markers, TTL removal of the new snapshot, deletion of what the old one no longer needs."""
        fired: list[bool] = []

        def fault() -> None:
            fired.append(True)
            self._fault(CommitStep.DURING_CLEANUP)

        with self.metrics.timer("task", "cleanup-ms").time():
            self.stores.committed(batch, self.snapshot_ids, fault=fault)
            if self.adjunct is not None:
                self.adjunct.committed(batch)  # committed means permanent: no TTL left on its snapshots
        if not fired:  # a task without stores still has the fault point
            fault()
        self._advance(CommitStatus.CHECKPOINTED, CommitStatus.CLEANED)
