"""A task's stores across batches: open at the committed version, back up at commit, clean up after.

Stores are versioned by batch. Before a batch, each store must hold exactly the state of the
task's checkpoint. A marker file next to the store dir (``<store dir>.sparza-committed``) records
which snapshot the dir holds; it is removed while a batch writes (the dir is then "dirty") and
written back after the task checkpoint commits. If the marker does not match the checkpoint (a
crashed batch, a new host, a deleted state dir), the dir is rebuilt: from the local checkpoint dir
of that batch when it is still there, else restored from the blob store (SEP-003).

Stores without ``stores.<st>.backup.factories: blobstore`` are kept locally only: their snapshot
id is ``local:<batch>`` and losing the local dir loses them (the error says so).

``memory`` stores are snapshotted the same way (their checkpoint is one entries file), so their
state is as durable as a RocksDB store's. Between batches the worker process keeps the store
object it committed and reuses it while the checkpoint still names that snapshot; any other
worker or a restart loads the snapshot instead.

The task gets :class:`StoreHandle` proxies from ``context.get_store``: the handle points at the
store opened for the current batch, so a task may keep it across batches.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparza.config import Int, define_key
from sparza.engine.errors import RuntimeStateError
from sparza.engine.jobconfig import JobConfig
from sparza.metrics import MetricsRegistry
from sparza.state.backup.backup import BACKUP_FACTORIES
from sparza.state.kv.api import SupportsReadView
from sparza.state.kv.factory import STORE_FACTORY

__all__ = ["BLOBSTORE_SCOPE", "LOCAL_SNAPSHOT_PREFIX", "StoreHandle", "TaskStores"]

OBJECT_CACHE_SIZE = define_key("stores.<store>.object.cache.size", 10_000, "Deserialized entries cached per task store "
                               "(write-back, written to the store at commit); 0 turns the cache off.", "runtime",
                               kind=Int(min_value=0))

LOCAL_SNAPSHOT_PREFIX = "local:"
BLOBSTORE_SCOPE = "blobstore"
"""The scope of the request counts of the stores' backups and restores (:mod:`sparza.azure.requests`)."""
_MEMORY_TAG = ":memory-"  # in the local snapshot ids of memory stores: local:<batch>:memory-<unique>
_log = logging.getLogger(__name__)
_MARKER_SUFFIX = ".sparza-committed"


_ABSENT = object()  # not in the cache (a cached None is an absent or deleted key)


class StoreHandle:
    """A stable reference to a task's store, with a write-back object cache (Samza's CachedStore).

    Every call goes to the store opened for the current batch. ``get``/``put``/``delete`` go through
    a cache of deserialized objects (``stores.<st>.object.cache.size`` entries, 0 turns it off):
    repeated keys skip serdes and RocksDB. Dirty entries are written to the store in one batch when
    the cache is full, before iteration, and always before the store is checkpointed at commit, so
    the committed state never lacks a write. The cache is emptied at every batch start.

    Any other attribute is the bound store's (``flush``, ``name``, an engine's own methods). The class has no
    ``__getattr__`` for that: on Python 3.11 a class with one gets no specialized attribute lookups, which made every
    ``get`` and ``put`` of a task (and every attribute they read) about 3x slower. While a store is bound, the handle's
    class is instead a subclass made once per store type (:func:`_handle_class`) with a property for each of the
    store's public attributes; unbound, it is :class:`_UnboundStoreHandle`, whose ``__getattr__`` refuses them all.
    """

    __slots__ = ("_cache", "_dirty", "_limit", "_name", "_store")

    def __init__(self, name: str, cache_size: int = 0) -> None:
        self._name = name
        self._store: Any = None
        self._limit = cache_size
        self._cache: dict[Any, Any] = {}
        self._dirty: set[Any] = set()
        self.__class__ = _UnboundStoreHandle

    def _bind(self, store: Any) -> None:
        if store is not None and store is self._store and not self._dirty:
            return  # the same committed store again (a resident task): its cache still matches it
        self._store = store
        self._cache.clear()
        self._dirty.clear()
        self.__class__ = _UnboundStoreHandle if store is None else _handle_class(store)

    def _live(self) -> Any:
        store = self._store
        if store is None:
            raise RuntimeStateError(f"store '{self._name}' used outside a batch (open only while the task runs)")
        return store

    def flush_cache(self) -> None:
        """Write every dirty cached entry to the store (one atomic write; a cached None is a deletion)."""
        if self._dirty:
            cache = self._cache
            self._live().put_all([(k, cache[k]) for k in self._dirty])
            self._dirty.clear()

    def _make_room(self) -> None:
        if len(self._cache) >= self._limit:
            self.flush_cache()
            self._cache.clear()

    # The cache maps a key to its value, or to None when the key is absent (read so) or deleted: a hit is one dict
    # lookup whatever the key holds (get and put run once or twice per message).
    def get(self, key: Any) -> Any:
        """The value of ``key`` (None when absent), from the cache when it is there."""
        value = self._cache.get(key, _ABSENT)
        if value is not _ABSENT:
            return value
        return self._read(key)

    def _read(self, key: Any) -> Any:
        """A key the cache does not hold (it holds none when off): read from the store, and cached."""
        value = self._live().get(key)
        if self._limit:
            self._make_room()
            self._cache[key] = value
        return value

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` (None deletes); written to the store by the next cache flush."""
        cache = self._cache
        # A full cache (always, when it is off) is the only case where a new key needs more than the dict write.
        if len(cache) >= self._limit and key not in cache:
            if not self._limit:
                self._live().put(key, value)
                return
            self._make_room()
        cache[key] = value
        self._dirty.add(key)

    def delete(self, key: Any) -> None:
        """Remove ``key``."""
        self.put(key, None)

    def get_all(self, keys: Any) -> dict[Any, Any]:
        """``{key: value}`` for the keys present: cached ones from the cache, the others in one store read."""
        if not self._limit:
            return dict(self._live().get_all(keys))
        cache = self._cache
        out = {}
        misses = []
        for key in keys:
            if key in cache:
                value = cache[key]
                if value is not None:
                    out[key] = value
            else:
                misses.append(key)
        if misses:
            found = self._live().get_all(misses)
            for key in misses:
                value = found.get(key)
                if key not in cache:
                    self._make_room()
                    cache[key] = value
                if value is not None:
                    out[key] = value
        return out

    def put_all(self, entries: Any) -> None:
        """Set many keys (None deletes); written to the store by the next cache flush."""
        pairs = entries.items() if hasattr(entries, "items") else entries
        if not self._limit:
            self._live().put_all(list(pairs))
            return
        for key, value in pairs:
            self.put(key, value)

    def delete_all(self, keys: Any) -> None:
        """Remove many keys."""
        for key in keys:
            self.put(key, None)

    def range(self, from_key: Any, to_key: Any) -> Any:
        """Entries in ``[from_key, to_key)``, sorted (dirty cached writes are written first)."""
        self.flush_cache()
        return self._live().range(from_key, to_key)

    def all(self) -> Any:
        """Every entry, sorted (dirty cached writes are written first)."""
        self.flush_cache()
        return self._live().all()

    def peek(self, key: Any) -> Any:
        """``key``'s in-flight value (the cache first), without caching it or writing anything: for a reader in
        another thread (a live query) while the task runs."""
        value = self._cache.get(key, _ABSENT)
        if value is not _ABSENT:
            return value
        return self._live().get(key)

    def peek_all(self) -> list[tuple[Any, Any]]:
        """Every in-flight entry, sorted: the store's entries with the cache's dirty writes over them; read-only."""
        dirty = {k: self._cache.get(k) for k in list(self._dirty)}
        merged = {k: v for k, v in self._live().all() if k not in dirty}
        merged.update({k: v for k, v in dirty.items() if v is not None})
        return sorted(merged.items(), key=lambda item: repr(item[0]) if not isinstance(item[0], str | bytes)
                      else item[0] if isinstance(item[0], str) else item[0].decode("utf-8", "replace"))

    def __repr__(self) -> str:
        return f"StoreHandle({self._name!r})"


class _UnboundStoreHandle(StoreHandle):
    """A handle with no store bound (before the first batch, after a failure or close): every store attribute
    refuses (:meth:`StoreHandle._live`)."""

    __slots__ = ()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)  # copy/pickle probes: not the store's
        return getattr(self._live(), attr)


_HANDLE_NAMES = frozenset(dir(StoreHandle))
_HANDLE_CLASSES: dict[tuple[type, frozenset[str]], type[StoreHandle]] = {}


def _store_attribute(attr: str) -> property:
    def read(handle: StoreHandle) -> Any:
        return getattr(handle._live(), attr)

    return property(read, doc=f"The bound store's ``{attr}``.")


def _handle_class(store: Any) -> type[StoreHandle]:
    """The handle class for ``store``: :class:`StoreHandle` with a property for each public attribute of the store
    (its type's and its own) the handle does not define, made once per store type and attribute set."""
    own = getattr(store, "__dict__", None)
    names = frozenset(n for n in (*dir(type(store)), *(own or ())) if not n.startswith("_")) - _HANDLE_NAMES
    key = (type(store), names)
    cls = _HANDLE_CLASSES.get(key)
    if cls is None:
        body: dict[str, Any] = {"__slots__": (), "__module__": __name__, "__qualname__": "StoreHandle"}
        body.update({name: _store_attribute(name) for name in sorted(names)})
        cls = _HANDLE_CLASSES[key] = type("StoreHandle", (StoreHandle,), body)
    return cls


_CLEANED: dict[tuple[str, str, str], str] = {}
"""(job key, task, store) → the file snapshot (index blob id) whose cleanup last ran in this process: cleanup is
idempotent, this only saves its calls when a task's stores are opened again. One entry per task store (a set of
every snapshot ever cleaned grew by one per commit)."""


class TaskStores:
    """The stores of one task instance (see the module docstring for the lifecycle)."""

    def __init__(self, job: JobConfig, task: str, metrics: MetricsRegistry, *,
                 backup_metrics: MetricsRegistry | None = None) -> None:
        self.job = job
        self.task = task
        self.metrics = metrics
        # Backups outlive batches: their metrics go to the job's long-lived registry, drained into each result.
        self.backup_metrics = backup_metrics if backup_metrics is not None else MetricsRegistry()
        from sparza.state.adjunct import AdjunctConfig

        adjunct = AdjunctConfig.from_config(job.config)
        # Adjunct stores are opened, backed up and restored by sparza.state.adjunct, not here.
        self.names = [name for name in job.store_names if not adjunct.is_adjunct_store(name)]
        self.handles = {name: StoreHandle(name, OBJECT_CACHE_SIZE.get(job.config, store=name)) for name in self.names}
        self.backed_up = {
            name: "blobstore" in [f.strip().lower() for f in BACKUP_FACTORIES.get(job.config, store=name)]
            for name in self.names}
        self._open: dict[str, Any] = {}
        self._to_keep: dict[str, Any] = {}  # memory stores snapshotted in this batch, kept once it commits
        self._kept: dict[str, tuple[str, Any]] = {}  # memory store -> (committed snapshot id, the store)
        # preopen() may run in a container's restore thread: it holds this lock while it restores and keeps
        # stores, and close_committed() waits for it (else it could close the stores before the restore added one).
        self._restore_lock = threading.RLock()
        self._backup: Any = None
        self._checkpoint_dirs: dict[str, Path] = {}
        self.replaced: dict[str, str] = {}
        self._committed: dict[str, tuple[int, Path]] = {}  # store -> (batch, its local checkpoint dir) as committed
        # Resident stores: store -> (batch, a read view of the open store as that batch committed it), for live
        # queries; _pending_views holds this batch's until it commits (mark_committed).
        self._views: dict[str, tuple[int, Any]] = {}
        self._pending_views: dict[str, Any] = {}
        # store -> (the committed snapshot id its open store's change record starts at, the writes since that id's
        # file snapshot): a kept store whose next commit can carry its writes in its id (sparza.state.backup.delta).
        self._tracked: dict[str, tuple[str, dict[bytes, bytes | None]]] = {}
        self._pending_changes: dict[str, dict[bytes, bytes | None]] = {}
        self.delta_max_bytes = {name: self._delta_limit(name) for name in self.names}
        from sparza.blobstore.api import blob_owner

        self._blob_owner = blob_owner(job.name, job.job_id)
        self.resident = False
        """True while the task stays in this process between batches (a container): committed stores stay
        open (and their caches warm) instead of being closed for another process to open."""

    # --- paths ---------------------------------------------------------------------------------
    def store_dir(self, name: str) -> Path:
        """The live dir of store ``name`` (``<base>/<job.name>-<job.id>/<store>/<task>``)."""
        from sparza.state.kv import store_dir

        return Path(store_dir(self.job.task_store_base_dir, name, self.task))

    def _marker(self, name: str) -> Path:
        d = self.store_dir(name)
        return d.parent / (d.name + _MARKER_SUFFIX)

    def _checkpoint_dir(self, name: str, batch: int) -> Path:
        d = self.store_dir(name)
        return d.parent / f"{d.name}-{batch}"

    def _backup_client(self) -> Any:
        if self._backup is None:
            from sparza.azure import StorageRequests
            from sparza.blobstore import blob_store_manager_from_config
            from sparza.state.backup import StateBackup

            requests = StorageRequests(self.backup_metrics, BLOBSTORE_SCOPE, scope_of=self._store_of_blob)
            self._backup = StateBackup(blob_store_manager_from_config(self.job.config, requests=requests),
                                       self.job.name, self.job.job_id, self.task, metrics=self.backup_metrics)
        return self._backup

    def _store_of_blob(self, path: str) -> str | None:
        """``store.<store>`` for a request on one of this job's blobs (``.../<job>-<id>/<task>/<store>/...``, as
        :func:`~sparza.blobstore.api.blob_name_for` names them), else None (a listing: the blob store's own)."""
        parts = path.split("/")
        owner = self._blob_owner
        for i, part in enumerate(parts[:-3]):
            if part == owner:
                return f"store.{parts[i + 2]}"
        return None

    def _delta_limit(self, name: str) -> int:
        if not self.backed_up[name]:
            return 0
        from sparza.state.backup import DELTA_MAX_BYTES

        return int(DELTA_MAX_BYTES.get(self.job.config, store=name))

    def _cleaned_key(self, name: str) -> tuple[str, str, str]:
        return (self.job.job_key, self.task, name)

    def _track(self, name: str, store: Any) -> None:
        from sparza.state.kv import TracksChanges

        if self.delta_max_bytes[name] and isinstance(store, TracksChanges):
            store.track_changes(self.delta_max_bytes[name])

    def _is_memory(self, name: str) -> bool:
        factory = STORE_FACTORY.get(self.job.config, store=name).strip().lower()
        return factory == "memory"

    # --- lifecycle -----------------------------------------------------------------------------
    def open(self, committed: dict[str, str], committed_batch: int | None) -> None:
        """Bring every store to the snapshot ``committed`` names, mark it dirty and open it."""
        from sparza.state.kv import open_store

        for name in self.names:
            expected = committed.get(name)
            kept = self._kept.pop(name, None)
            if kept is not None and expected is not None and kept[0] == expected:
                self._open[name] = kept[1]  # the store this process committed: still exact
                self.handles[name]._bind(kept[1])
                if self._tracked.get(name, ("",))[0] != expected:
                    self._tracked.pop(name, None)
                if self._is_memory(name):
                    self.metrics.counter("stores", "reused-in-memory").inc()
                else:
                    self._marker(name).unlink(missing_ok=True)  # the batch writes the live dir: dirty
                    self.metrics.counter("stores", "reused-open").inc()
                continue
            if kept is not None:
                kept[1].close()
            memory = self._is_memory(name)
            if memory and expected is not None and expected.startswith(LOCAL_SNAPSHOT_PREFIX) \
                    and _MEMORY_TAG not in expected:
                # Written before memory stores were snapshotted (sparza kept no state for them then).
                _log.warning("memory store '%s' of task '%s' has a checkpoint from before memory stores were "
                             "snapshotted (%s): it starts empty", name, self.task, expected)
                self.metrics.counter("stores", "legacy-memory-started-empty").inc()
                expected = None
            with self.metrics.timer("stores", "restore-ms").time():
                # A memory store's live dir is only a load source: rebuild it from the committed snapshot.
                self._prepare_dir(name, expected, committed_batch, reuse_live=not memory)
            self._marker(name).unlink(missing_ok=True)
            # A memory store loads its committed entries (and their recorded format) from the rebuilt dir.
            store = open_store(name, self.job.config, self.task, self.job.task_store_base_dir,
                               directory=self.store_dir(name) if memory and expected is not None else None)
            self._open[name] = store
            self.handles[name]._bind(store)
            self._tracked.pop(name, None)  # its first commit uploads files: the record starts there
            self._track(name, store)

    def preopen(self, committed: dict[str, str], committed_batch: int | None, *,
                cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Restore and open every store at the snapshot ``committed`` names and keep it as committed, so the next
        :meth:`open` at that snapshot reuses it at once. A container runs this for a task handed to it beside its
        loop (the slow part of a hand-over: the blob-store restore); nothing is written to the stores, so each
        dir is marked as holding that snapshot (unless the restore replaced it). Stores with nothing committed, or
        already kept at that snapshot, are left to :meth:`open`. On failure what this opened is closed again.

        ``cancelled`` is asked before each store (a container's: the task was revoked, the container closes): once
        it is true this stops and returns False; what it opened stays kept for the caller's :meth:`close_committed`,
        which waits for a preopen still restoring (so it never closes a store under it, nor misses one it adds)."""
        from sparza.state.kv import open_store

        with self._restore_lock:
            try:
                for name in self.names:
                    if cancelled():
                        return False  # what it opened stays kept: the release closes it
                    expected = committed.get(name)
                    if expected is None or committed_batch is None:
                        continue
                    kept = self._kept.get(name)
                    if kept is not None and kept[0] == expected:
                        continue
                    memory = self._is_memory(name)
                    if memory and expected.startswith(LOCAL_SNAPSHOT_PREFIX) and _MEMORY_TAG not in expected:
                        continue  # a legacy memory checkpoint: open() says so and starts it empty
                    if kept is not None:
                        self._kept.pop(name)
                        kept[1].close()
                    with self.metrics.timer("stores", "restore-ms").time():
                        self._prepare_dir(name, expected, committed_batch, reuse_live=not memory)
                    if not memory and name not in self.replaced:
                        # Nothing is written to the store before its first batch, so the dir holds exactly that
                        # snapshot (a revoked task's next owner here reuses it). Not when the restore replaced the
                        # snapshot (deleted blobs, SAMZA-2787): only this object knows the replacement, and a
                        # process that reused the dir after this one died would diff its next upload against the
                        # deleted blobs (the in-process harness's kill scenario found it: the cleanup of that
                        # upload met a deleted blob).
                        self._write_marker(name, committed_batch, expected)
                    store = open_store(name, self.job.config, self.task, self.job.task_store_base_dir,
                                       directory=self.store_dir(name) if memory else None)
                    self._kept[name] = (expected, store)
                    self._tracked.pop(name, None)  # its first commit uploads files: the record starts there
                    self._track(name, store)
            except BaseException:
                self.close_committed()
                raise
            return not cancelled()  # False: cancelled while its last store was restored

    def _read_marker(self, name: str) -> str | None:
        try:
            return str(json.loads(self._marker(name).read_text())["snapshot"])
        except (FileNotFoundError, ValueError, KeyError):
            return None

    def _ensure_cleaned(self, name: str, expected: str | None) -> None:
        """Finish the cleanup of the committed snapshot once per process: a crash between the task
        checkpoint write and cleanup leaves its new blobs with a TTL, and gc would delete them if no
        later commit ran before it passed."""
        if expected is None or not self.backed_up[name] or expected.startswith(LOCAL_SNAPSHOT_PREFIX):
            return
        from sparza.state.backup import base_of

        if _CLEANED.get(self._cleaned_key(name)) == base_of(expected):
            return
        with self.metrics.timer("stores", "cleanup-ms").time():
            self._backup_client().cleanup(expected)
        _CLEANED[self._cleaned_key(name)] = base_of(expected)

    def recover_deleted(self, committed: dict[str, str], committed_batch: int | None) -> dict[str, str]:
        """SAMZA-2787: replace every committed snapshot that has deleted blobs. Returns ``{store: new
        snapshot id}`` (empty when nothing was deleted); the caller records the new ids in the task
        checkpoint at once and then calls :meth:`recovery_committed`.

        The committed snapshot's cleanup runs first (as at every task start); when it meets a deleted
        blob the store is restored from the deleted-but-readable blobs (or the local checkpoint dir)
        and a fresh full snapshot is uploaded. Blobs gone for good (purged) stop the task with a
        :class:`RuntimeStateError` naming the snapshot, the task and what to do.
        """
        from sparza.blobstore import DeletedError
        from sparza.state.backup import SnapshotUnavailableError

        replaced: dict[str, str] = {}
        for name in self.names:
            expected = committed.get(name)
            if expected is None or not self.backed_up[name] or expected.startswith(LOCAL_SNAPSHOT_PREFIX):
                continue
            try:
                self._ensure_cleaned(name, expected)
                continue
            except (DeletedError, SnapshotUnavailableError) as exc:
                cause: Exception = exc
            live = self.store_dir(name)
            self._marker(name).unlink(missing_ok=True)
            local_checkpoint = self._checkpoint_dir(name, committed_batch) if committed_batch is not None else None
            try:
                with self.metrics.timer("stores", "restore-ms").time():
                    restored = self._backup_client().restore(
                        expected, live, checkpoint_dir=local_checkpoint if local_checkpoint is not None
                        and local_checkpoint.is_dir() else None, fresh_snapshot=True)
            except SnapshotUnavailableError as exc:
                raise RuntimeStateError(
                    f"store '{name}' of task '{self.task}' cannot be restored: its committed snapshot {expected} "
                    f"(batch {committed_batch}) refers to blob {exc.blob_id}, which is gone from the blob store "
                    f"(purged after it was deleted: {cause}). Its state is lost unless you bring that blob back "
                    "(restore it from a backup of the blob store, or undelete it if the Azure account keeps "
                    "soft-deleted blobs) and rerun. Otherwise stop the job, delete the task checkpoint of "
                    f"'{self.task}' (see `sparza checkpoints show`) so the task rebuilds its stores from its "
                    "inputs' oldest offsets (outputs it already wrote will be written again), or check "
                    "`sparza snapshots verify` of an older snapshot id") from exc
            new_id = str(restored.index_blob_id)
            _log.warning("store '%s' of task '%s': the committed snapshot %s (batch %s) had deleted blobs (%s); "
                         "restored it from the deleted blobs and committed a fresh snapshot %s (SAMZA-2787 "
                         "recovery, state is exact)", name, self.task, expected, committed_batch, cause, new_id)
            self.metrics.counter("stores", "deleted-snapshot-recoveries").inc()
            replaced[name] = new_id
        return replaced

    def finish_cleanup(self, committed: dict[str, str]) -> None:
        """Finish the cleanup of the committed snapshots (TTL removed, what they replaced deleted). A batch that
        failed during its cleanup and then runs again is skipped as a replay, so nothing else would: its
        snapshot would keep its TTL and gc would delete committed state. A deleted blob is left to the
        SAMZA-2787 recovery of the task's next restore."""
        from sparza.blobstore import DeletedError
        from sparza.state.backup import SnapshotUnavailableError

        for name in self.names:
            try:
                self._ensure_cleaned(name, committed.get(name))
            except (DeletedError, SnapshotUnavailableError) as exc:
                _log.warning("store '%s' of task '%s': the cleanup of snapshot %s waits for the next restore: %s",
                             name, self.task, committed.get(name), exc)

    def recovery_committed(self, batch: int, ids: dict[str, str]) -> None:
        """The task checkpoint now names the fresh snapshots :meth:`recover_deleted` returned: make
        them permanent (the old deleted blobs are let go) and mark the restored dirs as committed."""
        for name, snapshot in ids.items():
            with self.metrics.timer("stores", "cleanup-ms").time():
                self._backup_client().cleanup(snapshot)
            from sparza.state.backup import base_of

            _CLEANED[self._cleaned_key(name)] = base_of(snapshot)
            self._write_marker(name, batch, snapshot)

    def _write_marker(self, name: str, batch: int, snapshot: str) -> None:
        marker = self._marker(name)
        tmp = marker.with_name(marker.name + ".tmp")
        tmp.write_text(json.dumps({"batch": batch, "snapshot": snapshot}))
        os.replace(tmp, marker)

    def _prepare_dir(self, name: str, expected: str | None, committed_batch: int | None, *,
                     reuse_live: bool = True) -> None:
        self._ensure_cleaned(name, expected)
        live = self.store_dir(name)
        if reuse_live and expected is not None and self._read_marker(name) == expected and live.is_dir():
            self.metrics.counter("stores", "reused-local").inc()
            return
        if expected is None and not live.exists():
            return
        shutil.rmtree(live, ignore_errors=True)
        if expected is None:
            return  # first batch of this task: start empty (the old dir held an uncommitted attempt)
        live.parent.mkdir(parents=True, exist_ok=True)
        if expected.startswith(LOCAL_SNAPSHOT_PREFIX):
            batch = int(expected[len(LOCAL_SNAPSHOT_PREFIX):].split(":")[0])
            source = self._checkpoint_dir(name, batch)
            if not source.is_dir():
                raise RuntimeStateError(
                    f"store '{name}' of task '{self.task}' is kept locally only and its committed state "
                    f"({source}) is gone; set stores.{name}.backup.factories: blobstore to survive host loss, "
                    "or delete the task checkpoint to start over")
            from sparza.state.backup import materialize_store_dir

            materialize_store_dir(source, live)
            self.metrics.counter("stores", "restored-local").inc()
            return
        local_checkpoint = self._checkpoint_dir(name, committed_batch) if committed_batch is not None else None
        restored = self._backup_client().restore(expected, live,
                                                 checkpoint_dir=local_checkpoint if local_checkpoint and
                                                 local_checkpoint.is_dir() else None)
        if restored.index_blob_id != expected:
            # The backup replaced a snapshot whose blobs were deleted: the next upload diffs against it.
            self.replaced[name] = str(restored.index_blob_id)
        self.metrics.counter("stores", "restored-from-blob-store" if not restored.reused_local
                             else "reused-local-checkpoint").inc()

    def snapshot(self, batch: int, previous: dict[str, str]) -> dict[str, str]:
        """Flush, checkpoint and (for backed-up stores) upload every store; close them. Returns the ids."""
        ids: dict[str, str] = {}
        for name in self.names:
            self.handles[name].flush_cache()
            store = self._open[name]
            store.flush()
            target = self._checkpoint_dir(name, batch)
            with self.metrics.timer("stores", "checkpoint-ms").time():
                store.checkpoint(target)
            self._checkpoint_dirs[name] = target
            if self.resident and isinstance(store, SupportsReadView):
                # The store as checkpointed, for live queries once this commit lands: it stays open here, and a
                # snapshot of it costs no file open (opening each commit's checkpoint dir per read did).
                stale = self._pending_views.pop(name, None)  # of a batch that never committed
                if stale is not None:
                    stale.close()
                self._pending_views[name] = store.read_view()
            if self.backed_up[name]:
                replaced = self.replaced.pop(name, None)
                prev = replaced or previous.get(name)
                if prev is not None and prev.startswith(LOCAL_SNAPSHOT_PREFIX):
                    prev = None
                delta = self._delta_id(name, store, prev if replaced is None else None)
                if delta is not None:
                    from sparza.state.backup import write_snapshot_marker

                    write_snapshot_marker(target, delta)  # this dir holds exactly that id's state
                    ids[name] = delta
                    self.metrics.counter("stores", "delta-commits").inc()
                    continue
                self._pending_changes[name] = {}
                with self.metrics.timer("stores", "upload-ms").time():
                    ids[name] = str(self._backup_client().upload(name, target, prev_index_id=prev))
                self.metrics.counter("stores", "file-snapshot-commits").inc()
            elif self._is_memory(name):
                # Unique per snapshot: a kept memory store is reused only for the very snapshot it holds.
                ids[name] = f"{LOCAL_SNAPSHOT_PREFIX}{batch}{_MEMORY_TAG}{uuid.uuid4().hex[:12]}"
            else:
                ids[name] = f"{LOCAL_SNAPSHOT_PREFIX}{batch}"
        for name in [n for n in self._open if self.resident or self._is_memory(n)]:
            self._to_keep[name] = self._open.pop(name)
            if not self.resident:
                self.handles[name]._bind(None)
        self._close_open()
        return ids

    def _delta_id(self, name: str, store: Any, prev: str | None) -> str | None:
        """The id of this commit's state as ``prev``'s file snapshot with the writes since, when the store recorded
        every write since ``prev`` and they fit ``stores.<store>.backup.delta.max.bytes``; else None (upload)."""
        from sparza.state.kv import TracksChanges

        changes = store.take_changes() if isinstance(store, TracksChanges) else None
        limit = self.delta_max_bytes[name]
        tracked = self._tracked.get(name)
        if changes is None or not limit or prev is None or tracked is None or tracked[0] != prev:
            return None
        from sparza.state.backup import base_of, changes_size, merge_changes, snapshot_id

        merged = merge_changes(tracked[1], changes)
        if changes_size(merged) > limit:
            return None
        self._pending_changes[name] = merged
        return snapshot_id(base_of(prev), merged)

    def mark_committed(self, batch: int, ids: dict[str, str]) -> None:
        """After the task checkpoint named ``ids`` is written: each store's marker (its dir holds that commit), the
        first half of the commit's cleanup step; :meth:`clean_up` is the second."""
        for name, store in self._to_keep.items():
            self._kept[name] = (ids[name], store)
            pending = self._pending_changes.pop(name, None)
            if pending is not None:
                self._tracked[name] = (ids[name], pending)  # its record now starts at this commit
        self._to_keep.clear()
        self._pending_changes.clear()
        for name, snapshot in ids.items():
            self._write_marker(name, batch, snapshot)
            self._committed[name] = (batch, self._checkpoint_dir(name, batch))
            view = self._pending_views.pop(name, None)
            previous = self._views.get(name)
            if view is not None:
                self._views[name] = (batch, view)
            else:
                self._views.pop(name, None)  # the last view must not answer for this commit
            if previous is not None:
                previous[1].close()  # waits for a read of it still running
        self._drop_views(self._pending_views)

    def clean_up(self, batch: int, ids: dict[str, str]) -> None:
        """After :meth:`mark_committed`: the blob-store cleanup of each backed-up snapshot (its TTL removed, what
        the previous one no longer needs deleted) and the old local checkpoints."""
        for name, snapshot in ids.items():
            if self.backed_up[name]:
                from sparza.state.backup import base_of

                # A commit that carried its writes in the id has nothing to clean: its file snapshot was cleaned.
                if _CLEANED.get(self._cleaned_key(name)) != base_of(snapshot):
                    with self.metrics.timer("stores", "cleanup-ms").time():
                        self._backup_client().cleanup(snapshot)
                    _CLEANED[self._cleaned_key(name)] = base_of(snapshot)
            self._remove_old_checkpoints(name, keep=batch)

    def _remove_old_checkpoints(self, name: str, keep: int) -> None:
        live = self.store_dir(name)
        if not live.parent.is_dir():
            return
        prefix = live.name + "-"
        for entry in live.parent.iterdir():
            if entry.name.startswith(prefix) and entry.is_dir():
                suffix = entry.name[len(prefix):]
                if suffix.isdigit() and int(suffix) != keep:
                    shutil.rmtree(entry, ignore_errors=True)

    def committed_view(self, name: str) -> tuple[int, Any] | None:
        """``(batch, view)``: a read-only store of store ``name`` as this process last committed it, for point reads
        (``get``), while the store stays open here (a resident task's RocksDB store); None otherwise (read
        :meth:`committed_dir` instead). Read by live queries from another thread: a view whose store was closed
        since raises :class:`~sparza.state.kv.api.StoreClosedError`."""
        found = self._views.get(name)
        return found if found is not None and found[1].is_open else None

    @staticmethod
    def _drop_views(views: dict[str, Any]) -> None:
        for view in list(views.values()):
            with contextlib.suppress(Exception):
                view.close()
        views.clear()

    def committed_dir(self, name: str) -> tuple[int, Path] | None:
        """``(batch, dir)``: the local checkpoint dir of store ``name`` as this process last committed it (None
        before its first commit here). Read by live queries from another thread: the dir may be replaced (and the old
        one deleted) by the next commit at any time."""
        return self._committed.get(name)

    def open_committed(self, name: str, directory: Path) -> Any:
        """Store ``name`` opened read-only from a committed checkpoint ``directory`` (the caller closes it)."""
        from sparza.state.kv import open_store

        return open_store(name, self.job.config, self.task, self.job.task_store_base_dir, read_only=True,
                          directory=directory)

    def read_committed(self, name: str, batch: int) -> list[tuple[Any, Any]]:
        """Every entry of store ``name`` as committed by ``batch`` (deserialized, in key order), read from that
        batch's local checkpoint; the live store is not touched. For tests and tools (``sparza.testing.TestRunner``)."""
        from sparza.state.kv import open_store

        if name not in self.handles:
            raise RuntimeStateError(f"task '{self.task}' has no store '{name}'; its stores are: "
                                    f"{', '.join(self.names) or 'none'}")
        source = self._checkpoint_dir(name, batch)
        if not source.is_dir():
            raise RuntimeStateError(f"store '{name}' of task '{self.task}' has no local checkpoint of batch {batch} "
                                    f"at {source} (only the last committed batch is kept)")
        store = open_store(name, self.job.config, self.task, self.job.task_store_base_dir, read_only=True,
                           directory=source)
        try:
            return list(store.all())
        finally:
            store.close()

    def close_committed(self) -> None:
        """Close the stores kept open after their commit (their dirs stay marked committed, so the next open,
        in this process or another, reuses them); memory stores are dropped (their snapshot has them).

        A :meth:`preopen` running in another thread is waited for (a container never does that: it releases a
        task once its restore returned), so what it opened is closed here too."""
        with self._restore_lock:
            for name, (_snapshot, store) in list(self._kept.items()):
                with contextlib.suppress(Exception):
                    store.close()
                self.handles[name]._bind(None)
            self._kept.clear()

    def close(self) -> None:
        """Close the open stores and drop uncommitted memory stores (idempotent); handles then refuse
        use until the next batch."""
        for store in self._to_keep.values():
            with contextlib.suppress(Exception):
                store.close()
        self._to_keep.clear()
        self._close_open()

    def _close_open(self) -> None:
        for name, store in list(self._open.items()):
            with contextlib.suppress(Exception):
                store.close()
            self.handles[name]._bind(None)
        self._open.clear()
