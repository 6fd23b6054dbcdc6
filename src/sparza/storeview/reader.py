"""Reading a job's stores as committed: each task's checkpoint names a snapshot per store, and the snapshot is
materialized into a temp dir and opened read-only with the store's own engine and serdes.

Nothing of a running job is opened or changed: its task checkpoints are read (never written), a backed-up
snapshot is downloaded from the blob store (deleted blobs are read, nothing is uploaded), and a store kept
only locally is read from a copy of its committed checkpoint dir (the job's live store dir is never opened;
that checkpoint dir is immutable until the job's next commit removes it, in which case the copy is retried
from the newer checkpoint).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.config import Config
from sparza.config.shared import APP_STAGE
from sparza.errors import SparzaError

__all__ = ["CommittedStores", "StoreRef", "StoreViewError", "TaskSnapshot"]

_LOCAL = "local:"
_COPY_ATTEMPTS = 5


class StoreViewError(SparzaError, ValueError):
    """The store, task or checkpoint asked for does not exist, or cannot be read; the message says which and
    what there is instead."""


@dataclass(frozen=True)
class StoreRef:
    """A task store of a job: ``store`` in the job (or application stage) ``job_key``, whose config is ``config``."""

    store: str
    job_key: str
    config: Config


@dataclass(frozen=True)
class TaskSnapshot:
    """Where one task's committed state of a store is: the task checkpoint's ``batch`` and the ``snapshot``
    it names (a blob-store snapshot-index id, or ``local:<batch>…`` for a store kept locally only)."""

    task: str
    batch: int
    snapshot: str

    def to_json(self) -> str:
        """For shipping to Spark executors (an InputPartition payload)."""
        return json.dumps({"task": self.task, "batch": self.batch, "snapshot": self.snapshot})

    @classmethod
    def from_json(cls, text: str) -> TaskSnapshot:
        """Inverse of :meth:`to_json`."""
        body = json.loads(text)
        return cls(str(body["task"]), int(body["batch"]), str(body["snapshot"]))


def _load_config(config: Config | Mapping[str, Any] | str | Path) -> Config:
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return Config({k: str(v) for k, v in config.items()})
    return Config.load(config)


class CommittedStores:
    """The committed stores of the job (or every stage of the application) that ``config`` describes.

    ``store(name)`` finds a store (``stage`` picks an application's stage when several have one of that
    name); ``snapshots(ref)`` lists each task's committed snapshot; ``open(ref, snapshot)`` yields the store
    opened read-only from a private copy; ``scan``, ``get`` and ``count`` read entries with the store's serdes.
    """

    def __init__(self, config: Config | Mapping[str, Any] | str | Path) -> None:
        from sparza.engine.jobconfig import JobConfig

        self.config = _load_config(config)
        job = JobConfig.from_config(self.config, require_inputs=False)
        configs = [job.config]
        if job.app_class is not None and APP_STAGE.get(job.config) is None:
            from sparza.api import plan_application

            configs = [stage.config for stage in plan_application(job.config).stages]
        from sparza.state.adjunct import AdjunctConfig

        self.refs: list[StoreRef] = []
        for stage_config in configs:
            stage = JobConfig.from_config(stage_config, require_inputs=False)
            adjunct = AdjunctConfig.from_config(stage.config)
            self.refs.extend(StoreRef(name, stage.job_key, stage.config) for name in stage.store_names
                             if not adjunct.is_adjunct_store(name))

    # --- finding -------------------------------------------------------------------------------
    def store(self, name: str, *, stage: str | None = None) -> StoreRef:
        """The store called ``name`` (in ``stage``, a job key or an application's stage name, when given)."""
        found = [r for r in self.refs if r.store == name and (stage is None or stage in (
            r.job_key, APP_STAGE.get(r.config)))]
        if not found:
            known = ", ".join(f"{r.store} ({r.job_key})" for r in self.refs) or "none (adjunct stores are copies of "\
                "their input streams: read the stream)"
            raise StoreViewError(f"no task store {name!r}{f' in stage {stage!r}' if stage else ''}; the job's "
                                 f"stores are: {known}")
        if len(found) > 1:
            raise StoreViewError(f"store {name!r} exists in {', '.join(r.job_key for r in found)}: name one with "
                                 "--stage")
        return found[0]

    def snapshots(self, ref: StoreRef, *, task: str | None = None) -> list[TaskSnapshot]:
        """Each task's committed snapshot of ``ref`` (tasks that committed nothing yet are left out), in task
        order; ``task`` keeps one (an error names the tasks when it has none)."""
        from sparza.engine.checkpoint import checkpoint_store_from_config

        store = checkpoint_store_from_config(ref.config, ref.job_key)
        checkpoints = store.read_all()
        out = [TaskSnapshot(name, cp.batch, cp.stores[ref.store])
               for name, cp in sorted(checkpoints.items(), key=lambda kv: (len(kv[0]), kv[0]))
               if cp.committed and ref.store in cp.stores]
        if task is not None:
            out = [s for s in out if s.task == task]
            if not out:
                tasks = ", ".join(sorted(checkpoints, key=lambda n: (len(n), n))) or "none"
                raise StoreViewError(f"task {task!r} has no committed snapshot of store {ref.store!r} in "
                                     f"{store.describe()}; the tasks with checkpoints are: {tasks}")
        return out

    def pick(self, ref: StoreRef, snapshot: TaskSnapshot, checkpoint: str | None) -> TaskSnapshot:
        """``snapshot``, or the one ``checkpoint`` names: the task's committed batch number, or a snapshot-index
        blob id of this store and task (``sparza checkpoints show`` prints them)."""
        if checkpoint is None or checkpoint in (str(snapshot.batch), snapshot.snapshot):
            return snapshot
        if checkpoint.isdigit():
            raise StoreViewError(f"task {snapshot.task!r} has committed batch {snapshot.batch}, not {checkpoint}: "
                                 "only the last committed batch of a task is kept (give a snapshot id to read an "
                                 "older snapshot that still exists)")
        backup = self._backup(ref, snapshot.task)
        try:
            index = backup.read_index(checkpoint, get_deleted=True)
        except Exception as exc:
            raise StoreViewError(f"no snapshot {checkpoint!r} in the blob store ({exc}); give the task's committed "
                                 f"batch ({snapshot.batch}) or a snapshot id of store {ref.store!r}") from exc
        finally:
            backup.close()
            backup.blob_store.close()
        meta = index.metadata
        if meta.store_name != ref.store or meta.task_name != snapshot.task:
            raise StoreViewError(f"snapshot {checkpoint} is of store {meta.store_name!r} of task {meta.task_name!r}, "
                                 f"not of {ref.store!r} of {snapshot.task!r}")
        return TaskSnapshot(snapshot.task, -1, checkpoint)

    # --- reading -------------------------------------------------------------------------------
    def _backup(self, ref: StoreRef, task: str) -> Any:
        from sparza.blobstore import blob_store_manager_from_config
        from sparza.state.backup import StateBackup

        return StateBackup.from_config(blob_store_manager_from_config(ref.config), ref.config, task, progress=False)

    @contextlib.contextmanager
    def open(self, ref: StoreRef, snapshot: TaskSnapshot) -> Iterator[Any]:
        """The task's store as of ``snapshot``, opened read-only from a private temp copy (removed after)."""
        from sparza.state.kv import open_store

        work = Path(tempfile.mkdtemp(prefix="sparza-storeview-"))
        try:
            directory = work / "store"
            if snapshot.snapshot.startswith(_LOCAL):
                self._copy_local(ref, snapshot, directory)
            else:
                backup = self._backup(ref, snapshot.task)
                try:
                    backup.restore(snapshot.snapshot, directory, reupload_deleted=False)
                finally:
                    backup.close()
                    backup.blob_store.close()
            store = open_store(ref.store, ref.config, snapshot.task, work, read_only=True, directory=directory)
            try:
                yield store
            finally:
                store.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _copy_local(self, ref: StoreRef, snapshot: TaskSnapshot, target: Path) -> None:
        """Copy the local checkpoint dir of a store kept locally only (the job may remove it at its next commit:
        then the newer committed one is copied)."""
        from sparza.engine.jobconfig import JobConfig
        from sparza.state.kv import store_dir

        job = JobConfig.from_config(ref.config, require_inputs=False)
        live = store_dir(job.task_store_base_dir, ref.store, snapshot.task)
        current = snapshot
        for _ in range(_COPY_ATTEMPTS):
            source = live.parent / f"{live.name}-{current.batch}"
            try:
                shutil.copytree(source, target)
                return
            except (FileNotFoundError, shutil.Error):
                shutil.rmtree(target, ignore_errors=True)
                newer = self.snapshots(ref, task=current.task)
                if not newer or newer[0].batch == current.batch:
                    raise StoreViewError(
                        f"store {ref.store!r} of task {current.task!r} is kept locally only, and its committed "
                        f"state (batch {current.batch}) is not at {source}: read it on the host that runs the task "
                        f"(or set stores.{ref.store}.backup.factories: blobstore)") from None
                current = newer[0]
        raise StoreViewError(f"store {ref.store!r} of task {snapshot.task!r} kept changing while it was copied; "
                             "try again")

    def key_serde(self, ref: StoreRef) -> Any:
        """The store's key serde (``stores.<store>.key.serde``)."""
        return self._serde(ref, "key")

    def msg_serde(self, ref: StoreRef) -> Any:
        """The store's value serde (``stores.<store>.msg.serde``)."""
        return self._serde(ref, "msg")

    def _serde(self, ref: StoreRef, which: str) -> Any:
        from sparza.state.kv.format import configured_format

        configured = configured_format(ref.store, ref.config)
        return (configured.key if which == "key" else configured.msg).serde_object()

    def parse_key(self, ref: StoreRef, text: str) -> Any:
        """A key typed on a command line, as the store's key serde holds it: text for ``string``, a number for
        ``integer``/``long``/``double``, JSON for ``json``/``avro`` (bare text when it is not JSON), UTF-8
        bytes for ``bytes``."""
        name = getattr(self.key_serde(ref), "name", "bytes")
        if name == "string":
            return text
        if name in ("integer", "long"):
            return int(text)
        if name == "double":
            return float(text)
        if name in ("json", "avro"):
            try:
                return json.loads(text)
            except ValueError:
                return text
        return text.encode()

    # --- the three reads -----------------------------------------------------------------------
    def scan(self, ref: StoreRef, *, task: str | None = None, prefix: str | None = None,
             checkpoint: str | None = None) -> Iterator[tuple[str, Any, Any]]:
        """``(task, key, value)`` of every committed entry (keys whose text starts with ``prefix``), task by task
        in key order."""
        for snapshot in self.snapshots(ref, task=task):
            with self.open(ref, self.pick(ref, snapshot, checkpoint)) as store:
                for key, value in store.all():
                    if prefix is None or _key_text(key).startswith(prefix):
                        yield snapshot.task, key, value

    def get(self, ref: StoreRef, key: Any, *, task: str | None = None,
            checkpoint: str | None = None) -> dict[str, Any]:
        """``{task: value}`` of ``key`` in every task that holds it (the one ``task``, when given)."""
        out: dict[str, Any] = {}
        for snapshot in self.snapshots(ref, task=task):
            with self.open(ref, self.pick(ref, snapshot, checkpoint)) as store:
                value = store.get(key)
                if value is not None:
                    out[snapshot.task] = value
        return out

    def count(self, ref: StoreRef, *, task: str | None = None, prefix: str | None = None,
              checkpoint: str | None = None) -> dict[str, int]:
        """``{task: entries}`` (keys starting with ``prefix``), every task with a committed snapshot listed."""
        counts = {s.task: 0 for s in self.snapshots(ref, task=task)}
        for name, _key, _value in self.scan(ref, task=task, prefix=prefix, checkpoint=checkpoint):
            counts[name] += 1
        return counts


def _key_text(key: Any) -> str:
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="replace")
    return key if isinstance(key, str) else json.dumps(key, sort_keys=True, default=str)
