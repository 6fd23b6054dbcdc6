"""Savepoints (Flink's word; Samza has none): a named, self-contained copy of a stopped job's task checkpoints
and state snapshots, to start the same job or a changed one from.

A savepoint is only blobs of the blob store (``blob.store.*``), all under ``_savepoint-<name>/``: a copy of
every backed-up store snapshot of every task (restored from the job's snapshot and uploaded again, so nothing
in it is shared with the job, whose commits delete the snapshots they replace), and last a manifest holding
each task's checkpoint with the copies' index ids. Every blob is made permanent (its TTL removed), the
manifest last: a savepoint that failed half-way is TTL-tagged blobs that ``sparza gc`` removes, and a savepoint
whose manifest exists is complete. ``sparza gc`` keeps a savepoint's blobs until :func:`delete_savepoint`
tombstones them (gc purges them after ``blob.store.deleted.retention.ms``).

Restoring (:func:`restore_savepoint`, ``sparza run --from-savepoint``) copies the savepoint's snapshots into
the target job's blob store under the target's job name and id (so the target may be another job, in another
container or account), and writes the target's task checkpoints: the savepoint's offsets for the inputs the
target reads, its control state, and a batch number that never goes back (a restore over the same job keeps
its output transaction versions increasing, so nothing it writes is skipped as a replay). A store the target
adds starts empty; a store it no longer has is dropped. The savepoint stays as it was.

A savepoint also holds the job's record of its input partition counts (:mod:`sparza.engine.partitions`): a target
that has no record of its own (a new ``job.id``) starts with it, so an input that grew after the savepoint was
taken is met as growth (``job.partition.expansion``), and tasks grouped by SEP-5 stay grouped so (a savepoint
taken before it held the record leaves the target to its own record, made from the counts at its first start).
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparza.blobstore import BlobStoreManager, blob_store_manager_from_config
from sparza.blobstore.api import DeletedError, Metadata
from sparza.config import Config
from sparza.engine.checkpoint import TaskCheckpoint
from sparza.engine.jobconfig import JobConfig
from sparza.errors import SparzaError
from sparza.ops.cleanup import LOCAL_SNAPSHOT_PREFIX, drop_snapshots
from sparza.ops.journal import Operation, TaskChange, append_operation, operator_name, read_journal
from sparza.ops.stopped import stopped_job
from sparza.state.backup import SnapshotUnavailableError, StateBackup

__all__ = ["SAVEPOINT_OWNER", "Savepoint", "SavepointError", "copy_savepoint_stores", "copy_snapshot",
           "create_savepoint",
           "delete_savepoint", "describe", "find_savepoint", "list_savepoints", "restore_savepoint",
           "savepoint_stores"]

SAVEPOINT_OWNER = "_savepoint"
"""The job name a savepoint's blobs are written under: their ids start with ``_savepoint-<name>/``."""
_MANIFEST = "_manifest"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class SavepointError(SparzaError):
    """A savepoint cannot be taken, found, restored or deleted; the message says why and what to do."""


@dataclass(frozen=True)
class Savepoint:
    """One savepoint: its ``name``, the job it was taken of (``job_name``, ``job_id``), when and by whom, each
    task's checkpoint as taken (``stores`` name the savepoint's own snapshot copies) and ``manifest`` (its
    manifest's blob id)."""

    name: str
    job_name: str
    job_id: str
    created_at_ms: int
    created_by: str
    tasks: dict[str, TaskCheckpoint] = field(default_factory=dict)
    manifest: str = ""
    partitions: bytes | None = None
    """The job's partition record when it was taken (``PartitionRecord.to_json``; None: it had none)."""

    @property
    def job_key(self) -> str:
        """``<job.name>-<job.id>`` of the job it was taken of."""
        return f"{self.job_name}-{self.job_id}"

    def to_json(self) -> bytes:
        """The manifest's bytes."""
        body = {"format": 1, "name": self.name, "job_name": self.job_name, "job_id": self.job_id,
                "created_at_ms": self.created_at_ms, "created_by": self.created_by,
                "tasks": {t: json.loads(cp.to_json()) for t, cp in sorted(self.tasks.items())}}
        if self.partitions is not None:
            body["partitions"] = json.loads(self.partitions)
        return json.dumps(body, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, manifest: str) -> Savepoint:
        """Parse a manifest (raises :class:`SavepointError` naming the blob when it is unreadable)."""
        try:
            body = json.loads(data)
            tasks = {str(t): TaskCheckpoint.from_json(json.dumps(cp).encode(), source=manifest)
                     for t, cp in body["tasks"].items()}
            partitions = body.get("partitions")
            return cls(str(body["name"]), str(body["job_name"]), str(body["job_id"]), int(body["created_at_ms"]),
                       str(body.get("created_by", "")), tasks, manifest,
                       json.dumps(partitions, sort_keys=True).encode("utf-8") if partitions is not None else None)
        except (ValueError, KeyError, TypeError) as exc:
            raise SavepointError(f"savepoint manifest {manifest} is unreadable ({exc})") from exc

    def snapshot_count(self) -> int:
        """How many store snapshots it holds."""
        return sum(len(cp.stores) for cp in self.tasks.values())


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise SavepointError(f"savepoint name {name!r}: use letters, digits, '.', '_' and '-' (at most 100, "
                             "starting with a letter or digit)")


def _manifest_meta(name: str, size: int = -1) -> Metadata:
    return Metadata("manifest.json", size, SAVEPOINT_OWNER, name, _MANIFEST, _MANIFEST)


def _manifests(blob_store: BlobStoreManager, name: str | None = None) -> Iterator[str]:
    prefix = f"{SAVEPOINT_OWNER}-{name}/" if name else f"{SAVEPOINT_OWNER}-"
    for info in blob_store.list_blobs(prefix):
        if info.deleted_at_ms is None and info.expires_at_ms is None and f"/{_MANIFEST}/{_MANIFEST}/" in info.blob_id:
            yield info.blob_id


def _read(blob_store: BlobStoreManager, manifest: str) -> Savepoint:
    buf = io.BytesIO()
    blob_store.get(manifest, buf, _manifest_meta(""))
    return Savepoint.from_json(buf.getvalue(), manifest)


def list_savepoints(blob_store: BlobStoreManager) -> list[Savepoint]:
    """Every complete savepoint in ``blob_store``, oldest first."""
    found = [_read(blob_store, m) for m in _manifests(blob_store)]
    return sorted(found, key=lambda s: (s.created_at_ms, s.name))


def find_savepoint(blob_store: BlobStoreManager, name: str) -> Savepoint | None:
    """The savepoint ``name`` in ``blob_store``, or None."""
    _check_name(name)
    for manifest in _manifests(blob_store, name):
        savepoint = _read(blob_store, manifest)
        if savepoint.name == name:
            return savepoint
    return None


def copy_snapshot(source: BlobStoreManager, index_blob_id: str, target: BlobStoreManager, *, owner: tuple[str, str],
                  task: str, store: str, checkpoint_id: str, permanent: bool = True) -> str:
    """Copy one store snapshot into ``target`` as a new snapshot of ``owner`` (job name, job id) and ``task``;
    returns its index blob id. Goes through the state backup's public API: the snapshot is restored into a
    temporary dir (every checksum verified) and uploaded from it. The copy is made permanent unless ``permanent``
    is False (it keeps the upload's TTL until ``StateBackup.make_permanent``: a savepoint makes its copies permanent
    once every one exists)."""
    reader = StateBackup(source, "", "", task)
    writer = StateBackup(target, owner[0], owner[1], task)
    try:
        with tempfile.TemporaryDirectory(prefix="sparza-savepoint-") as tmp:
            store_dir = Path(tmp) / "store"
            reader.restore(index_blob_id, store_dir, reupload_deleted=False)
            copied = writer.upload(store, store_dir, None, checkpoint_id=checkpoint_id)
        if permanent:
            writer.make_permanent(copied)
        return copied
    finally:
        reader.close()
        writer.close()


def create_savepoint(config: Config, name: str, *, blob_store: BlobStoreManager | None = None) -> Savepoint:
    """Take savepoint ``name`` of the stopped job of ``config`` (holding its claim meanwhile) in its blob store
    (or ``blob_store``). Refused while the job runs, when the name exists, when a task has an uncommitted flush
    (run the job once to finish it) or a store that is not backed up, and for applications and adjunct stores
    (not supported yet)."""
    _check_name(name)
    job = JobConfig.from_config(config, require_inputs=False)
    _check_supported(job)
    store = blob_store or blob_store_manager_from_config(job.config)
    try:
        with stopped_job(job.config) as stopped:
            if find_savepoint(store, name) is not None:
                raise SavepointError(f"savepoint {name} exists already: choose another name or delete it first "
                                     f"(sparza savepoint delete {name})")
            checkpoints = {t: cp for t, cp in stopped.checkpoints.read_all().items() if cp.committed}
            if not checkpoints:
                raise SavepointError(f"job {job.job_key} has no committed task checkpoint at "
                                     f"{stopped.checkpoints.describe()}: run it before taking a savepoint")
            for task, cp in sorted(checkpoints.items()):
                _check_savable(task, cp)
            tasks: dict[str, TaskCheckpoint] = {}
            for task, cp in sorted(checkpoints.items()):
                copies = {s: _copy_for_savepoint(store, name, task, cp, s, sid) for s, sid in sorted(cp.stores.items())}
                tasks[task] = dataclasses.replace(cp, stores=copies, pending=None, location=None)
            # Only now, with every copy made: a savepoint refused half-way (a purged snapshot) leaves TTL-tagged
            # copies that gc removes, never permanent ones that nothing names.
            _make_permanent(store, (SAVEPOINT_OWNER, name), {t: saved.stores.values() for t, saved in tasks.items()})
            from sparza.engine.partitions import read_record

            record = read_record(stopped.checkpoints)
            savepoint = Savepoint(name, job.name, job.job_id, int(time.time() * 1000), operator_name(), tasks,
                                  partitions=record.to_json() if record is not None else None)
            data = savepoint.to_json()
            manifest = store.put(io.BytesIO(data), _manifest_meta(name, len(data)))
            store.remove_ttl(manifest, _manifest_meta(name))  # the commit point: the savepoint exists from here
            return dataclasses.replace(savepoint, manifest=manifest)
    finally:
        if blob_store is None:
            store.close()


def _copy_for_savepoint(blob_store: BlobStoreManager, name: str, task: str, cp: TaskCheckpoint, store: str,
                        index: str) -> str:
    """Copy ``task``'s committed snapshot ``index`` of ``store`` into savepoint ``name`` (with its TTL); a snapshot the
    blob store no longer holds refuses the savepoint, naming the task, the store and what to do."""
    try:
        return copy_snapshot(blob_store, index, blob_store, owner=(SAVEPOINT_OWNER, name), task=task, store=store,
                             checkpoint_id=str(cp.batch), permanent=False)
    except SnapshotUnavailableError as exc:
        raise SavepointError(
            f"savepoint {name} cannot be taken: store '{store}' of task '{task}' has lost its committed state: its "
            f"snapshot {index} (batch {cp.batch}) refers to blob {exc.blob_id}, which is gone from the blob store "
            "(purged). Bring that blob back (from a backup of the blob store, or undelete it if the Azure account "
            "keeps soft-deleted blobs) and take the savepoint again; or delete the task checkpoint of "
            f"'{task}' (see `sparza checkpoints show`) so the task rebuilds its stores from its inputs' oldest "
            "offsets, run the job, then take it. No savepoint was made (its copies so far keep their TTL: "
            "`sparza gc` removes them)") from exc


def _check_supported(job: JobConfig) -> None:
    if job.app_class is not None:
        raise SavepointError(f"job {job.job_key} is an application (app.class): savepoints of applications are not "
                             "supported yet; drain it and start the new version from its checkpoints")
    from sparza.state.adjunct import AdjunctConfig

    adjunct = AdjunctConfig.from_config(job.config).store_names()
    if adjunct:
        raise SavepointError(f"job {job.job_key} has adjunct stores ({', '.join(adjunct)}): savepoints of jobs with "
                             "adjunct stores are not supported yet")


def _check_savable(task: str, cp: TaskCheckpoint) -> None:
    intent = cp.open_intent()
    if intent is not None:
        raise SavepointError(f"task {task!r} flushed outputs of batch {intent.batch} without committing it (the "
                             "job was killed): run it once (sparza run --once) to complete that batch, then take "
                             "the savepoint")
    local = sorted(s for s, sid in cp.stores.items() if sid.startswith(LOCAL_SNAPSHOT_PREFIX))
    if local:
        raise SavepointError(f"store(s) {', '.join(local)} of task {task!r} are kept on the executors' disks only: "
                             "set stores.<store>.backup.factories: blobstore (and run the job) so a savepoint can "
                             "copy them")


def delete_savepoint(blob_store: BlobStoreManager, name: str) -> Savepoint:
    """Delete savepoint ``name``: its manifest first (it no longer exists from then on), then its snapshots (gc
    purges the tombstones after ``blob.store.deleted.retention.ms``). Raises when there is none."""
    savepoint = find_savepoint(blob_store, name)
    if savepoint is None:
        raise SavepointError(f"no savepoint {name} in the blob store (sparza savepoint list shows them)")
    try:
        blob_store.delete(savepoint.manifest, _manifest_meta(name))
    except DeletedError:
        pass
    for task, cp in savepoint.tasks.items():
        backup = StateBackup(blob_store, SAVEPOINT_OWNER, name, task)
        try:
            for index in cp.stores.values():
                backup.delete_snapshot(index)
        finally:
            backup.close()
    return savepoint


def savepoint_stores(savepoint: Savepoint, task: str, job: JobConfig, source: BlobStoreManager,
                     target: BlobStoreManager, batch: int) -> tuple[dict[str, str], list[str]]:
    """The snapshots ``task`` of ``job`` starts from: the savepoint's copied into ``target`` for every store the
    job has (a store it added starts empty). Returns them and notes on stores dropped or added."""
    return copy_savepoint_stores(savepoint, {task: batch}, job, source, target)[task]


def copy_savepoint_stores(savepoint: Savepoint, tasks: Mapping[str, int], job: JobConfig, source: BlobStoreManager,
                          target: BlobStoreManager, *, use: str = "restored") -> dict[str, tuple[dict[str, str],
                                                                                               list[str]]]:
    """:func:`savepoint_stores` of every task of ``tasks`` (task -> the batch its copies are made at), all of them
    before the caller changes anything of the job: a copy of the savepoint that the blob store no longer holds (a
    damaged savepoint) refuses it as a :class:`SavepointError` (``use`` says for what) naming the task, the store and
    the blob, and leaves only copies with their TTL (gc removes them). The copies are made permanent once all exist.
    """
    copied: dict[str, tuple[dict[str, str], list[str]]] = {}
    for task, batch in tasks.items():
        cp = savepoint.tasks.get(task)
        stores = dict(cp.stores) if cp is not None else {}
        notes = []
        out: dict[str, str] = {}
        for store, index in sorted(stores.items()):
            if store not in job.store_names:
                notes.append(f"{task}: store {store} of the savepoint is not in the job: dropped")
                continue
            try:
                out[store] = copy_snapshot(source, index, target, owner=(job.name, job.job_id), task=task, store=store,
                                           checkpoint_id=str(batch), permanent=False)
            except SnapshotUnavailableError as exc:
                raise SavepointError(
                    f"savepoint {savepoint.name} cannot be {use}: its copy {index} of store '{store}' of task "
                    f"'{task}' refers to blob {exc.blob_id}, which is gone from the blob store (purged: the savepoint "
                    "is damaged). No task checkpoint of the job was changed. Bring that blob back (from a backup of "
                    "the blob store) and try again, or use another savepoint (sparza savepoint list) or the job's own "
                    "checkpoints") from exc
        for store in job.store_names:
            if store not in stores and cp is not None:
                notes.append(f"{task}: store {store} is new (not in the savepoint): it starts empty")
        copied[task] = out, notes
    _make_permanent(target, (job.name, job.job_id), {t: out.values() for t, (out, _) in copied.items()})
    return copied


def _make_permanent(blob_store: BlobStoreManager, owner: tuple[str, str],
                    snapshots: Mapping[str, Iterable[str]]) -> None:
    """Make the copied snapshots (task -> index blob ids) of ``owner`` (job name, job id) permanent, once every copy
    exists."""
    for task, indexes in sorted(snapshots.items()):
        backup = StateBackup(blob_store, owner[0], owner[1], task)
        try:
            for index in indexes:
                backup.make_permanent(index)
        finally:
            backup.close()


def _carry_partitions(savepoint: Savepoint, checkpoints: Any) -> list[str]:
    """Give a target job without a partition record the savepoint's, before its tasks are grouped: an input that grew
    since is then growth to it too. Returns a note when it wrote one."""
    from sparza.engine.checkpoint import SupportsJobDocuments
    from sparza.engine.partitions import PARTITIONS_DOCUMENT, PartitionRecord, read_record

    if (savepoint.partitions is None or not isinstance(checkpoints, SupportsJobDocuments)
            or read_record(checkpoints) is not None):
        return []
    record = PartitionRecord.from_json(savepoint.partitions)
    checkpoints.write_document(PARTITIONS_DOCUMENT, record.to_json())
    counts = ", ".join(f"{s}: {n}" for s, n in sorted(record.counts.items()))
    return [f"input partition counts as the savepoint's job had them ({counts})"]


def restore_savepoint(config: Config, name: str, *, source: Config | None = None,
                      source_blob_store: BlobStoreManager | None = None, force: bool = False) -> Operation | None:
    """Start the job of ``config`` from savepoint ``name`` (found in the blob store of ``source``, default the
    job's own): write every task checkpoint from it, with the store snapshots copied into the job's blob store.

    Returns the journal entry written, or None when the job's newest operation is already the restore of this
    savepoint (``sparza run --from-savepoint`` given again at a restart continues from the job's own checkpoints;
    ``force`` restores anyway). Tasks of the savepoint the job does not have, and inputs it no longer reads, are
    dropped; tasks and inputs it adds start at ``samza.offset.default``. Every snapshot is copied before any
    checkpoint is written: a damaged savepoint (a blob purged) is refused with the task checkpoints as they were.
    """
    from sparza.engine.inputs import InputSystems

    job = JobConfig.from_config(config)
    _check_supported(job)
    target = blob_store_manager_from_config(job.config)
    src = source_blob_store or (blob_store_manager_from_config(source) if source is not None else target)
    try:
        savepoint = find_savepoint(src, name)
        if savepoint is None:
            raise SavepointError(f"no savepoint {name} in the blob store of "
                                 f"{'the source config' if source is not None else 'the job'} (sparza savepoint "
                                 "list shows them; --savepoint-config names another blob store)")
        with stopped_job(job.config) as stopped:
            journal = read_journal(stopped.checkpoints)
            if not force and journal and journal[-1].kind == "savepoint-restore" and \
                    journal[-1].target == f"savepoint {name}":
                return None
            notes: list[str] = [f"savepoint of job {savepoint.job_key} taken {_iso(savepoint.created_at_ms)} by "
                                f"{savepoint.created_by}"]
            notes.extend(_carry_partitions(savepoint, stopped.checkpoints))
            inputs = InputSystems(job)
            try:
                models = inputs.task_models()
                # The grouping settled here, not at the run's start: say what changed since the savepoint.
                from sparza.engine.partitions import expansion_policy

                grown = inputs.grouping.describe(expansion_policy(job.config))
                notes.extend(([grown] if grown else []) + list(inputs.grouping.notes))
            finally:
                inputs.close()
            current = {t: v for t in (m.name for m in models) if (v := stopped.checkpoints.read(t)) is not None}
            changes: dict[str, TaskChange] = {}
            dropped = sorted(set(savepoint.tasks) - {m.name for m in models})
            if dropped:
                notes.append(f"tasks not in the job, dropped: {', '.join(dropped)}")
            replaced: list[tuple[str, str]] = []
            batches = {m.name: max(savepoint.tasks[m.name].batch, current[m.name].checkpoint.batch
                                   if m.name in current else 0) for m in models if m.name in savepoint.tasks}
            # Every copy first: a damaged savepoint is refused before any task checkpoint is written.
            copies = copy_savepoint_stores(savepoint, batches, job, src, target)
            for model in models:
                saved = savepoint.tasks.get(model.name)
                before = current[model.name].checkpoint if model.name in current else None
                if saved is None:
                    notes.append(f"{model.name}: not in the savepoint: starts at samza.offset.default")
                    continue
                batch = batches[model.name]
                stores, store_notes = copies[model.name]
                notes.extend(store_notes)
                reads = set(model.ssp_keys())
                offsets = {s: o for s, o in saved.offsets.items() if s in reads}
                gone = sorted(set(saved.offsets) - reads)
                if gone:
                    notes.append(f"{model.name}: inputs no longer read, dropped: {', '.join(gone)}")
                after = dataclasses.replace(saved, task=model.name, batch=batch, offsets=offsets, stores=stores,
                                            generation=before.generation if before is not None else 0,
                                            pending=None, location=None)
                stopped.checkpoints.write(after, current[model.name].etag if model.name in current else None)
                if before is not None:
                    replaced.extend((model.name, sid) for sid in before.stores.values())
                changes[model.name] = TaskChange(dict(before.offsets) if before else {}, offsets,
                                                 dict(before.stores) if before else {}, stores,
                                                 f"savepoint:{name}", batch)
            drop_snapshots(target, job, replaced)
            return append_operation(stopped.checkpoints, Operation("savepoint-restore", f"savepoint {name}",
                                                                   changes, notes=notes))
    finally:
        if src is not target and source_blob_store is None:
            src.close()
        target.close()


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(savepoint: Savepoint) -> dict[str, Any]:
    """A summary for listings: name, job, when, by whom, tasks, snapshots, batches."""
    batches = sorted({cp.batch for cp in savepoint.tasks.values()})
    return {"name": savepoint.name, "job": savepoint.job_key, "created": _iso(savepoint.created_at_ms),
            "created_by": savepoint.created_by, "tasks": len(savepoint.tasks),
            "snapshots": savepoint.snapshot_count(),
            "batches": f"{batches[0]}-{batches[-1]}" if len(batches) > 1 else str(batches[0] if batches else "-")}
