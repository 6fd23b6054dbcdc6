"""Rewind: with the job stopped, set its tasks' input positions back (or forward) and choose their state.

What a rewind changes, per task rewound, in its checkpoint (written conditionally, the claim held):

- ``offsets`` of its source inputs (not intermediate streams, not adjunct-store inputs) to the target
  (:mod:`sparza.ops.positions`);
- the state: ``keep`` (the stores as committed: a count goes on counting, so reprocessed messages count again),
  ``reset`` (every store but the adjunct stores empty, and the control state, watermarks included, forgotten:
  the task starts as if it had never run, at the new offsets), or ``savepoint:<name>`` (the stores and control
  state of that savepoint, the stores copied into the job);
- ``ended`` and any drain completion are cleared (a rewound task reads again); ``batch`` is kept, so the output
  transactions of the batches that follow have higher versions than any written before: Delta app
  transactions, Kafka transactions and blob names are new, and nothing reprocessed is skipped as a replay.

Reprocessed output is new output: appended again to Delta streams, Kafka topics and blob containers (a
consumer of those outputs sees the range twice); upsert tables are overwritten key by key. With the state
reset on every task, the job's upsert tables are emptied first (one Delta delete commit each), so once the
re-run has caught up they hold exactly what a job started at the target would hold; a reset of some tasks
only cannot tell which rows are theirs, and needs an explicit choice for the tables (``tables="keep"``).
Snapshots no checkpoint refers to any more are deleted (gc purges them). The rewind is journaled
(:mod:`sparza.ops.journal`). Interrupted half-way, it can be run again with the same arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from sparza.blobstore import blob_store_manager_from_config
from sparza.engine.checkpoint import VersionedCheckpoint
from sparza.errors import SparzaError
from sparza.ops.cleanup import drop_snapshots
from sparza.ops.journal import Operation, TaskChange, append_operation
from sparza.ops.positions import RewindTarget, resolve_positions
from sparza.ops.savepoints import SavepointError, copy_savepoint_stores, find_savepoint
from sparza.ops.stopped import StoppedJob
from sparza.ops.tables import empty_upsert_tables, upsert_tables
from sparza.streams import SystemStreamPartition

__all__ = ["RewindError", "RewindPlan", "TaskRewind", "apply_rewind", "plan_rewind"]


class RewindError(SparzaError):
    """A rewind cannot be planned or applied as asked; the message says why and what to do."""


@dataclass(frozen=True)
class TaskRewind:
    """One task's checkpoint before (with its version tag) and the offsets and stores it gets."""

    task: str
    before: VersionedCheckpoint
    offsets: dict[str, str]
    stores: dict[str, str]

    @property
    def moved(self) -> dict[str, tuple[str, str]]:
        """SSP → (from, to) for every offset that changes."""
        old = self.before.checkpoint.offsets
        return {s: (old.get(s, "-"), o) for s, o in sorted(self.offsets.items()) if old.get(s) != o}


@dataclass(frozen=True)
class RewindPlan:
    """What :func:`apply_rewind` will do: the target, the state choice, each task's change and the upsert
    tables it empties. :meth:`describe` is the dry run's output."""

    job_key: str
    target: RewindTarget
    state: str
    tasks: list[TaskRewind]
    tables: list[str] = field(default_factory=list)
    savepoint: str | None = None

    def describe(self) -> list[str]:
        """One line per change, for the dry run and the log."""
        lines = [f"rewind of {self.job_key} to {self.target.describe()}, state {self.state}: "
                 f"{len(self.tasks)} task(s)"]
        for t in self.tasks:
            cp = t.before.checkpoint
            lines.append(f"  {t.task} (batch {cp.batch}):")
            for ssp, (old, new) in t.moved.items():
                lines.append(f"    {ssp}: {old} -> {new}")
            if not t.moved:
                lines.append("    offsets unchanged")
            if self.state != "keep":
                for store in sorted(set(cp.stores) | set(t.stores)):
                    lines.append(f"    store {store}: {cp.stores.get(store, '-')} -> "
                                 f"{t.stores.get(store, 'empty' if self.savepoint is None else '(copied)')}")
        for table in self.tables:
            lines.append(f"  upsert table {table}: emptied (the re-run writes it again)")
        return lines


def _state_choice(state: str) -> str | None:
    """The savepoint name of ``savepoint:<name>``; None for keep/reset; raises on anything else."""
    if state in ("keep", "reset"):
        return None
    if state.startswith("savepoint:") and len(state) > len("savepoint:"):
        return state[len("savepoint:"):]
    raise RewindError(f"state {state!r}: keep, reset or savepoint:<name>")


def plan_rewind(stopped: StoppedJob, target: RewindTarget, *, tasks: Iterable[str] | None = None,
                state: str = "keep", tables: str = "auto") -> RewindPlan:
    """Plan a rewind of the stopped job (:func:`sparza.ops.stopped.stopped_job`): ``tasks`` (default every
    task), ``state`` ``keep``/``reset``/``savepoint:<name>``, ``tables`` ``auto`` (empty the upsert tables when
    every task's state is reset), ``reset`` or ``keep``. Reads the inputs (a time target reads each partition up
    to the time); writes nothing."""
    from sparza.engine.drain import source_ssps
    from sparza.engine.inputs import InputSystems
    from sparza.state.adjunct import AdjunctConfig

    job = stopped.job
    savepoint = _state_choice(state)
    if job.app_class is not None:
        raise RewindError(f"job {job.job_key} is an application (app.class): rewind each stage's job is not "
                          "supported yet")
    if tables not in ("auto", "reset", "keep"):
        raise RewindError(f"tables {tables!r}: auto, reset or keep")
    inputs = InputSystems(job)
    try:
        models = {m.name: m for m in inputs.task_models()}
        chosen = list(models) if tasks is None else list(dict.fromkeys(tasks))
        unknown = [t for t in chosen if t not in models]
        if unknown:
            raise RewindError(f"job {job.job_key} has no task {', '.join(repr(t) for t in unknown)} (its tasks: "
                              f"{', '.join(models)})")
        metadata = {}
        by_system: dict[str, set[str]] = {}
        for spec in job.inputs:
            by_system.setdefault(spec.stream.system, set()).add(spec.stream.stream)
        for system, streams in sorted(by_system.items()):
            for stream, meta in inputs.admins[system].get_system_stream_metadata(streams).items():
                for partition, pm in meta.partitions.items():
                    metadata[SystemStreamPartition(system, stream, partition)] = pm
    finally:
        inputs.close()
    before: dict[str, VersionedCheckpoint] = {}
    for task in chosen:
        versioned = stopped.checkpoints.read(task)
        if versioned is None or not versioned.checkpoint.committed:
            raise RewindError(f"task {task!r} of {job.job_key} never committed: it starts at samza.offset.default; "
                              "run the job first, or leave the task out (--task)")
        intent = versioned.checkpoint.open_intent()
        if intent is not None:
            raise RewindError(f"task {task!r} flushed outputs of batch {intent.batch} without committing it (the job "
                              "was killed): run it once (sparza run --once) to complete that batch, then rewind")
        before[task] = versioned
    ssps = {t: source_ssps(job, models[t].ssps) for t in chosen}
    positions = resolve_positions(job, [s for group in ssps.values() for s in group], target, metadata)
    adjunct = set(AdjunctConfig.from_config(job.config).store_names())
    planned = []
    for task in chosen:
        cp = before[task].checkpoint
        offsets = {str(s): positions[str(s)] for s in ssps[task]}
        # Reset or savepoint: only the adjunct stores stay (a savepoint's stores are copied in at apply).
        stores = dict(cp.stores) if state == "keep" else {s: i for s, i in cp.stores.items() if s in adjunct}
        planned.append(TaskRewind(task, before[task], offsets, stores))
    reset_all = state != "keep" and len(chosen) == len(models)
    found = upsert_tables(job)
    if tables == "auto" and found and state != "keep" and not reset_all:
        raise RewindError(f"the job writes upsert tables ({', '.join(found)}) and only some tasks' state is reset: "
                          "their rows cannot be told apart; choose --tables keep (rows of the rewound keys are "
                          "overwritten as the re-run reaches them, others keep their values) or rewind every task")
    emptied = found if tables == "reset" or (tables == "auto" and reset_all) else []
    return RewindPlan(job.job_key, target, state, planned, emptied, savepoint)


def apply_rewind(stopped: StoppedJob, plan: RewindPlan, *, source_blob_store: object | None = None) -> Operation:
    """Carry out ``plan`` (made by :func:`plan_rewind` on the same ``stopped`` job) and journal it. A checkpoint
    that changed since the plan was made fails the write (:class:`~sparza.engine.errors.CheckpointConflictError`)."""
    job = stopped.job
    notes: list[str] = []
    blob_store = blob_store_manager_from_config(job.config)
    try:
        savepoint = None
        if plan.savepoint is not None:
            source = source_blob_store or blob_store
            savepoint = find_savepoint(source, plan.savepoint)  # type: ignore[arg-type]
            if savepoint is None:
                raise SavepointError(f"no savepoint {plan.savepoint} in the job's blob store (sparza savepoint list)")
            # Every copy first: a damaged savepoint is refused before a table is emptied or a checkpoint written.
            copies = copy_savepoint_stores(savepoint, {t.task: t.before.checkpoint.batch for t in plan.tasks}, job,
                                           source, blob_store, use="used for the rewind")  # type: ignore[arg-type]
        for table in empty_upsert_tables(job, plan.tables):
            notes.append(f"upsert table {table} emptied")
        changes: dict[str, TaskChange] = {}
        dropped: list[tuple[str, str]] = []
        for t in plan.tasks:
            cp = t.before.checkpoint
            stores = dict(t.stores)
            # The control state goes with the stores: kept, forgotten, or the savepoint's.
            control, window_at_ms, drain = cp.control, cp.window_at_ms, _without_completion(cp.drain)
            if plan.state == "reset":
                control, window_at_ms, drain = None, 0, None
            if savepoint is not None:
                copied, store_notes = copies[t.task]
                stores.update(copied)
                notes.extend(store_notes)
                saved = savepoint.tasks.get(t.task)
                control, window_at_ms, drain = ((saved.control, saved.window_at_ms, _without_completion(saved.drain))
                                                if saved is not None else (None, 0, None))
            after = dataclasses.replace(cp, offsets={**cp.offsets, **t.offsets}, stores=stores, ended=False,
                                        pending=None, control=control, window_at_ms=window_at_ms, drain=drain)
            stopped.checkpoints.write(after, t.before.etag)
            dropped.extend((t.task, sid) for s, sid in cp.stores.items() if stores.get(s) != sid)
            changes[t.task] = TaskChange(dict(cp.offsets), dict(after.offsets), dict(cp.stores), stores, plan.state,
                                         cp.batch)
        drop_snapshots(blob_store, job, dropped)
        if dropped:
            notes.append(f"{len(dropped)} store snapshot(s) no longer referred to were deleted")
        return append_operation(stopped.checkpoints, Operation("rewind", plan.target.describe(), changes,
                                                               notes=notes))
    finally:
        blob_store.close()


def _without_completion(drain: dict[str, object] | None) -> dict[str, object] | None:
    """The drain state without the completion mark (a rewound task has not drained the input it reads again)."""
    if not drain:
        return drain
    return {k: v for k, v in drain.items() if k != "completed"}
