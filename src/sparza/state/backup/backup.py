"""The facade the runtime and users call: upload, cleanup, restore and read snapshots of the
stores of one task (SEP-003's ``BlobStoreBackupManager`` + ``BlobStoreRestoreManager``).

Commit lifecycle of a store, each step idempotent:

1. the caller flushes the store and makes a RocksDB checkpoint into a directory named by the
   checkpoint id (see :class:`~sparza.state.backup.manager.StoreBackupManager`);
2. :meth:`StateBackup.upload` diffs it against the previous index, uploads new files in parallel
   (each new blob carries a TTL), uploads the new index (with a TTL) and returns its blob id;
3. the caller writes that id into the task checkpoint;
4. :meth:`StateBackup.cleanup` removes the TTL of every blob the new index references, then of the
   index, deletes the blobs of removed files and the previous index.

A crash before 3 leaves only TTL-tagged blobs (gc removes them); a crash during 4 is repaired by
running ``cleanup`` again (at task start, as Samza does). ``cleanup`` must run only once the
checkpoint naming the index is durable: it deletes the previous snapshot.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import sys
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sparza.blobstore.api import (
    INDEX_PAYLOAD_PATH,
    BlobNotFoundError,
    BlobStoreManager,
    Clock,
    DeletedError,
    Metadata,
    system_clock_ms,
)
from sparza.config import LIST, ByteSize, Int, define_check, define_key
from sparza.config.shared import JOB_ID, JOB_NAME
from sparza.host import fsync_dir
from sparza.metrics import MetricsRegistry
from sparza.state.backup.delta import apply_changes, base_of, changes_of, snapshot_id
from sparza.state.backup.diff import SNAPSHOT_MARKER, are_same_dir, dir_diff
from sparza.state.backup.errors import ChecksumMismatchError, SnapshotUnavailableError
from sparza.state.backup.index import SnapshotIndex, SnapshotMetadata
from sparza.state.backup.metrics import BackupMetrics, RestoreMetrics
from sparza.state.backup.transfer import SnapshotTransfer

__all__ = [
    "BACKUP_FACTORIES",
    "DELTA_MAX_BYTES",
    "INDEX_CACHE_ENTRIES",
    "CleanupResult",
    "RestoreResult",
    "StateBackup",
    "VerifyResult",
    "check_backup_config",
    "materialize_store_dir",
    "read_snapshot_marker",
    "write_snapshot_marker",
]

_PKG = "sparza.state.backup"
_TRANSFER_THREADS = define_key("blob.store.transfer.threads", 4, "parallel file uploads/downloads per task backup or "
                               "restore", _PKG, kind=Int(min_value=1))
_CHUNK_SIZE = define_key("blob.store.file.chunk.size", "128MB", "files bigger than this are uploaded as several blobs",
                         _PKG, kind=ByteSize(min_value=1 << 20))
BACKUP_FACTORIES = define_key("stores.<store>.backup.factories", "", "blobstore: back the store up to the blob store "
                              "at every commit (SEP-003); empty: local only.", _PKG, kind=LIST)
"""``stores.<store>.backup.factories``."""
DELTA_MAX_BYTES = define_key("stores.<store>.backup.delta.max.bytes", "256KB",
                             "A commit whose writes since the store's last file snapshot (keys and values, last write "
                             "per key) fit in this many bytes carries them in the task checkpoint and uploads no "
                             "blob; past it the commit uploads the changed files. 0: every commit uploads files.",
                             _PKG, kind=ByteSize(min_value=0))
"""``stores.<store>.backup.delta.max.bytes`` (:mod:`sparza.state.backup.delta`)."""

log = logging.getLogger(__name__)
PROGRESS_MIN_FILES = 8
"""Restores of more files than this show a progress bar when stderr is a terminal."""
INDEX_CACHE_ENTRIES = 32
"""Snapshot indexes a :class:`StateBackup` keeps in memory (the most recently used): a task's stores need the
previous index of each, so a few per store; an index not kept is read from the blob store again."""


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did. ``index_blob_id`` is the snapshot the store now matches: a new one when
    the old snapshot had deleted blobs (``recovered``): record it in the next task checkpoint and
    ``cleanup`` it after that checkpoint is durable."""

    index_blob_id: str
    checkpoint_id: str
    reused_local: bool
    files: int
    bytes: int
    recovered: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class CleanupResult:
    """Blobs made permanent and blobs deleted by one cleanup."""

    ttl_removed: int
    deleted: int


@dataclass(frozen=True)
class VerifyResult:
    """A snapshot checked end to end: every blob downloaded and every file's CRC32 compared."""

    index_blob_id: str
    files: int
    bytes: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def write_snapshot_marker(directory: Path, index_blob_id: str) -> None:
    """Record in ``directory`` which snapshot index it holds (atomically)."""
    tmp = directory / f".sparza-tmp-{SNAPSHOT_MARKER}"
    tmp.write_text(index_blob_id, encoding="utf-8")
    os.replace(tmp, directory / SNAPSHOT_MARKER)


def read_snapshot_marker(directory: Path) -> str | None:
    """The snapshot index blob id recorded in ``directory``, if any."""
    try:
        return (directory / SNAPSHOT_MARKER).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _link_or_copy(src: Path, dst: Path) -> None:
    if src.name.endswith((".sst", ".blob")):
        try:
            os.link(src, dst)  # immutable: share the inode with the checkpoint
            return
        except OSError:
            pass
    shutil.copy2(src, dst)


def materialize_store_dir(checkpoint_dir: Path, store_dir: Path) -> None:
    """Make ``store_dir`` a writable copy of ``checkpoint_dir``: immutable SST files hard-linked,
    mutable files (MANIFEST, CURRENT, OPTIONS, WAL) copied, so the checkpoint stays intact for a
    later reuse. Built in a temp dir and renamed into place."""
    tmp = store_dir.with_name(f".sparza-tmp-{store_dir.name}")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(checkpoint_dir, tmp, copy_function=lambda s, d: _link_or_copy(Path(s), Path(d)))
    if store_dir.exists():
        shutil.rmtree(store_dir)
    os.replace(tmp, store_dir)
    fsync_dir(store_dir.parent)


class StateBackup:
    """Backup and restore of the stores of task ``task_name`` of job ``job_name``/``job_id``.

    Thread-safe for different stores. ``threads`` parallel transfers, files over ``chunk_size``
    bytes split into several blobs. ``progress``: True/False, or None for a bar only when stderr
    is a terminal and the restore has more than a few files.
    """

    def __init__(self, blob_store: BlobStoreManager, job_name: str, job_id: str, task_name: str, *,
                 threads: int = 4, chunk_size: int = 128 << 20, metrics: MetricsRegistry | None = None,
                 clock: Clock = system_clock_ms, progress: bool | None = None) -> None:
        self.blob_store = blob_store
        self.job_name = job_name
        self.job_id = job_id
        self.task_name = task_name
        self.clock = clock
        self.progress = progress
        self.registry = metrics or MetricsRegistry()
        self.backup_metrics = BackupMetrics(self.registry)
        self.restore_metrics = RestoreMetrics(self.registry)
        self._executor = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="sparza-backup")
        self._transfer = SnapshotTransfer(blob_store, self._executor, chunk_size=chunk_size)
        # Indexes never change, but every commit writes a new one: a plain dict kept every index of the task's
        # life (bench/endurance.py: ~0.5 MiB a minute per worker). Only the newest few are read again (the
        # previous snapshot of each store, at its next upload and cleanup), so the oldest are dropped.
        self._index_cache: OrderedDict[str, SnapshotIndex] = OrderedDict()
        self._lock = threading.Lock()
        # What this object knows without asking the blob store, one entry per store (bounded): the blobs the
        # newest upload of a store put (they carry a TTL, nothing deleted them), and the snapshot whose cleanup
        # last completed (its blobs are permanent and not deleted).
        self._fresh: dict[str, tuple[str, frozenset[str]]] = {}
        self._permanent: dict[str, str] = {}

    @classmethod
    def from_config(cls, blob_store: BlobStoreManager, config: Mapping[str, str], task_name: str, *,
                    metrics: MetricsRegistry | None = None, progress: bool | None = None) -> StateBackup:
        """A backup for ``task_name`` with ``job.name``, ``job.id``, ``blob.store.transfer.threads`` and
        ``blob.store.file.chunk.size`` from ``config``."""
        # "job": a backup used as a library, outside any job (tools, tests), still names its blobs' owner.
        return cls(blob_store, JOB_NAME.get(config) or "job", JOB_ID.get(config), task_name,
                   threads=_TRANSFER_THREADS.get(config), chunk_size=_CHUNK_SIZE.get(config), metrics=metrics,
                   progress=progress)

    def _meta(self, store_name: str, path: str, size: int = -1) -> Metadata:
        return Metadata(path, size, self.job_name, self.job_id, self.task_name, store_name)

    # --- index -------------------------------------------------------------------------------
    def read_index(self, index_blob_id: str, *, get_deleted: bool = False) -> SnapshotIndex:
        """The snapshot index stored under ``index_blob_id`` (cached: indexes never change).

        Raises :class:`DeletedError` when the index was deleted (unless ``get_deleted``) and
        :class:`SnapshotUnavailableError` when it does not exist at all. A snapshot id that carries writes
        (:mod:`sparza.state.backup.delta`) gives the index of its file snapshot.
        """
        index_blob_id = base_of(index_blob_id)
        with self._lock:
            cached = self._index_cache.get(index_blob_id)
            if cached is not None:
                self._index_cache.move_to_end(index_blob_id)
        if cached is not None and get_deleted:
            return cached
        buf = io.BytesIO()
        with self.restore_metrics.get_snapshot_index_ms.time():
            try:
                self.blob_store.get(index_blob_id, buf, self._meta("", INDEX_PAYLOAD_PATH), get_deleted)
            except BlobNotFoundError as exc:
                raise SnapshotUnavailableError(index_blob_id, "snapshot index") from exc
        index = SnapshotIndex.from_bytes(buf.getvalue())
        self._cache_index(index_blob_id, index)
        return index

    def _cache_index(self, index_blob_id: str, index: SnapshotIndex) -> None:
        """Keep ``index`` among the :data:`INDEX_CACHE_ENTRIES` most recently used."""
        with self._lock:
            self._index_cache[index_blob_id] = index
            self._index_cache.move_to_end(index_blob_id)
            while len(self._index_cache) > INDEX_CACHE_ENTRIES:
                self._index_cache.popitem(last=False)

    def _read_index_lenient(self, index_blob_id: str) -> tuple[SnapshotIndex, bool]:
        try:
            return self.read_index(index_blob_id), False
        except DeletedError:
            log.warning("snapshot index %s was deleted; reading the deleted blob (SAMZA-2787 recovery)",
                        index_blob_id)
            self.restore_metrics.deleted_recoveries.inc()
            return self.read_index(index_blob_id, get_deleted=True), True

    def read_file(self, index_blob_id: str, name: str, *, get_deleted: bool = True) -> bytes | None:
        """The bytes of the file ``name`` at the top of snapshot ``index_blob_id`` (None when the snapshot has no
        such file), CRC-checked: one small file without restoring the snapshot, e.g. the store's recorded format
        (``STORE-FORMAT.json``) that a new version of a job checks against its config before it starts."""
        index = self.read_index(index_blob_id, get_deleted=get_deleted)
        file = index.dir_index.file(name)
        if file is None:
            return None
        buf = io.BytesIO()
        meta = self._meta(index.metadata.store_name, name)
        for blob in sorted(file.blobs, key=lambda b: b.offset):
            try:
                self.blob_store.get(blob.blob_id, buf, meta, get_deleted)
            except BlobNotFoundError as exc:
                raise SnapshotUnavailableError(blob.blob_id, f"file blob of {name}") from exc
        data = buf.getvalue()
        if len(data) != file.size or zlib.crc32(data) != file.checksum:
            raise ChecksumMismatchError(name, file.checksum, zlib.crc32(data), file.size, len(data))
        return data

    # --- upload ------------------------------------------------------------------------------
    def upload(self, store_name: str, checkpoint_dir: str | Path, prev_index_id: str | None = None, *,
               checkpoint_id: str | None = None, full: bool = False) -> str:
        """Back up ``checkpoint_dir`` incrementally against ``prev_index_id`` and return the new
        index's blob id. ``checkpoint_id`` defaults to the part of the dir name after the last
        ``-`` (``<store dir>-<id>``). ``full=True`` uploads every file again and lists all of the
        previous snapshot's files as removed (used to replace a snapshot with deleted blobs)."""
        cp_dir = Path(checkpoint_dir)
        if not cp_dir.is_dir():
            raise FileNotFoundError(f"checkpoint dir {cp_dir} does not exist")
        cid = checkpoint_id if checkpoint_id is not None else cp_dir.name.rsplit("-", 1)[-1]
        prev_index_id = base_of(prev_index_id) if prev_index_id else prev_index_id
        m = self.backup_metrics
        start = time.perf_counter()
        prev: SnapshotIndex | None = None
        if prev_index_id:
            try:
                # Content is all the diff needs (cached; a deleted index still has it).
                prev = self.read_index(prev_index_id, get_deleted=True)
            except SnapshotUnavailableError:
                log.warning("previous snapshot index %s is gone: uploading %s in full", prev_index_id, store_name)
        with m.store_timer(store_name, "dir-diff-ms").time():
            diff = dir_diff(cp_dir, None if (prev is None or full) else prev.dir_index)
        if full and prev is not None:
            diff.files_removed = list(prev.dir_index.files_present) + list(prev.dir_index.files_removed)
            diff.sub_dirs_removed = list(prev.dir_index.sub_dirs_present) + list(prev.dir_index.sub_dirs_removed)
        added = diff.walk_added()
        retained = diff.walk_retained()
        bytes_added = sum(p.stat().st_size for p in added)
        for name, value in diff.counts().items():
            m.store(store_name, name).inc(value)
        m.files_to_upload.inc(len(added))
        m.bytes_to_upload.inc(bytes_added)
        m.store(store_name, "bytes-to-upload").inc(bytes_added)
        m.files_to_retain.inc(len(retained))
        m.bytes_to_retain.inc(sum(f.size for f in retained))
        m.store(store_name, "bytes-to-remove").inc(sum(f.size for f in diff.walk_removed()))

        def uploaded(f: object) -> None:
            m.files_uploaded.inc()
            m.bytes_uploaded.inc(getattr(f, "size", 0))

        with m.store_timer(store_name, "upload-ms").time():
            dir_index = self._transfer.put_dir(diff, cp_dir, self._meta(store_name, ""), on_file=uploaded)
        index = SnapshotIndex(self.clock(), SnapshotMetadata(cid, self.job_name, self.job_id, self.task_name,
                                                             store_name), dir_index, prev_index_id)
        data = index.to_bytes()
        index_id = self.blob_store.put(io.BytesIO(data), self._meta(store_name, INDEX_PAYLOAD_PATH, len(data)))
        self._cache_index(index_id, index)
        kept = {b.blob_id for b in prev.dir_index.present_blobs()} if prev is not None and not full else set()
        with self._lock:
            self._fresh[store_name] = (index_id, frozenset(b.blob_id for b in dir_index.present_blobs()
                                                           if b.blob_id not in kept))
        write_snapshot_marker(cp_dir, index_id)
        elapsed = time.perf_counter() - start
        m.upload_ms.update(elapsed * 1000)
        if added:
            m.avg_file_size_bytes.set(bytes_added // len(added))
        m.upload_rate.set(int(bytes_added / elapsed) if elapsed > 0 else 0)
        log.info("backed up %s/%s checkpoint %s: %d files (%d bytes) uploaded, %d retained -> %s",
                 self.task_name, store_name, cid, len(added), bytes_added, len(retained), index_id)
        return index_id

    # --- cleanup -----------------------------------------------------------------------------
    def make_permanent(self, index_blob_id: str) -> int:
        """Remove the TTL of every file blob of the snapshot, then of its index, and delete nothing:
        the half of :meth:`cleanup` that may run as soon as the checkpoint naming the snapshot is
        durable, even while readers may still use the snapshot it replaced. Idempotent; raises
        :class:`DeletedError` when a blob of the snapshot was deleted. Returns the blobs touched."""
        index_blob_id = base_of(index_blob_id)
        return self._make_permanent(index_blob_id, self.read_index(index_blob_id))

    def _make_permanent(self, index_blob_id: str, index: SnapshotIndex) -> int:
        store = index.metadata.store_name
        meta = self._meta(store, "")
        ttl = self._transfer.for_each(lambda b: self.blob_store.remove_ttl(b, meta),
                                      (b.blob_id for b in index.dir_index.present_blobs()), ignore_deleted=False)
        self.blob_store.remove_ttl(index_blob_id, self._meta(store, INDEX_PAYLOAD_PATH))
        self.backup_metrics.blobs_ttl_removed.inc(ttl + 1)
        return ttl + 1

    def _known_state(self, index_blob_id: str, index: SnapshotIndex) -> frozenset[str] | None:
        """The blobs of snapshot ``index_blob_id`` still carrying their TTL, when this object knows them without
        asking: its newest upload of the store, diffed against the snapshot whose cleanup completed here."""
        store = index.metadata.store_name
        with self._lock:
            fresh = self._fresh.get(store)
            permanent = self._permanent.get(store)
        prev = index.prev_snapshot_index_blob_id
        if fresh is None or fresh[0] != index_blob_id or (prev and prev != permanent):
            return None
        return fresh[1]

    def cleanup(self, index_blob_id: str) -> CleanupResult:
        """After the checkpoint naming ``index_blob_id`` is durable: make the snapshot permanent
        (remove TTL of its file blobs, then of the index), delete the blobs of files it removed and
        the previous index. Idempotent: run it again after a crash, or at task start.

        Right after this object uploaded the snapshot, on top of the one it last cleaned up, only the new
        blobs are touched, one request each (:meth:`~sparza.blobstore.BlobStoreManager.remove_fresh_ttl`,
        :meth:`~sparza.blobstore.BlobStoreManager.delete_known`); otherwise every blob is checked."""
        index_blob_id = base_of(index_blob_id)
        store_of = self._store_of(index_blob_id)
        with self._lock:
            if store_of is not None and self._permanent.get(store_of) == index_blob_id:
                return CleanupResult(0, 0)  # this object completed it: nothing left to do
        index = self.read_index(index_blob_id)
        store = index.metadata.store_name
        meta = self._meta(store, "")
        fresh = self._known_state(index_blob_id, index)
        with self.backup_metrics.cleanup_ms.time():
            if fresh is None:
                ttl = self._make_permanent(index_blob_id, index) - 1
            else:
                ttl = self._transfer.for_each(lambda b: self.blob_store.remove_fresh_ttl(b, meta), sorted(fresh),
                                              ignore_deleted=False)
                self.blob_store.remove_fresh_ttl(index_blob_id, self._meta(store, INDEX_PAYLOAD_PATH))
                self.backup_metrics.blobs_ttl_removed.inc(ttl + 1)
            delete = self.blob_store.delete if fresh is None else self.blob_store.delete_known
            removed = [b.blob_id for b in index.dir_index.removed_blobs()]
            deleted = self._transfer.for_each(lambda b: delete(b, meta), removed, ignore_deleted=True)
            prev = index.prev_snapshot_index_blob_id
            if prev and prev != index_blob_id:
                try:
                    delete(prev, self._meta(store, INDEX_PAYLOAD_PATH))
                    deleted += 1
                except DeletedError:
                    pass
        self.backup_metrics.blobs_deleted.inc(deleted)
        self.backup_metrics.files_removed.inc(len(removed))
        with self._lock:
            self._permanent[store] = index_blob_id
            if self._fresh.get(store, ("",))[0] == index_blob_id:
                del self._fresh[store]
        return CleanupResult(ttl + 1, deleted)

    def _store_of(self, index_blob_id: str) -> str | None:
        with self._lock:
            cached = self._index_cache.get(index_blob_id)
        return cached.metadata.store_name if cached is not None else None

    def delete_snapshot(self, index_blob_id: str) -> int:
        """Delete a whole snapshot (its files and its index): for stores no longer configured.
        Blobs already deleted are skipped. Returns the blobs deleted."""
        index_blob_id = base_of(index_blob_id)
        try:
            index, _ = self._read_index_lenient(index_blob_id)
        except SnapshotUnavailableError:
            return 0
        meta = self._meta(index.metadata.store_name, "")
        blobs = [b.blob_id for b in index.dir_index.present_blobs()] + \
                [b.blob_id for b in index.dir_index.removed_blobs()]
        n = self._transfer.for_each(lambda b: self.blob_store.delete(b, meta), blobs, ignore_deleted=True)
        n += self._transfer.for_each(lambda b: self.blob_store.delete(b, meta), [index_blob_id], ignore_deleted=True)
        return n

    # --- restore -----------------------------------------------------------------------------
    def _progress_on(self, files: int) -> bool:
        if self.progress is not None:
            return self.progress
        return files > PROGRESS_MIN_FILES and sys.stderr.isatty()

    def restore(self, index_blob_id: str, store_dir: str | Path, checkpoint_dir: str | Path | None = None, *,
                reupload_deleted: bool = True, fresh_snapshot: bool = False) -> RestoreResult:
        """Make ``store_dir`` hold the snapshot ``index_blob_id``.

        With ``checkpoint_dir`` (the local checkpoint dir of the snapshot's checkpoint id): when it
        matches the index (names, sizes, permissions, checksums of mutable files) nothing is
        downloaded; otherwise the snapshot is downloaded into it. ``store_dir`` is then rebuilt
        from it (SST files hard-linked). Without it, the snapshot is downloaded straight into
        ``store_dir``. Downloads go to a temp dir, are fsynced and fully checksum-verified before
        they are swapped in, so a failed restore never leaves a half-written store.

        Deleted blobs (SAMZA-2787) are read anyway and a fresh snapshot is uploaded: the result's
        ``index_blob_id`` then differs from the argument (``reupload_deleted=False`` skips the
        upload: tools that only read, such as ``sparza snapshots restore``). ``fresh_snapshot=True``
        uploads the fresh snapshot even when nothing deleted was read, because the caller knows some
        blob of the snapshot is deleted (its cleanup failed with :class:`DeletedError`) and the local
        checkpoint dir was reused. Blobs that are gone for good raise :class:`SnapshotUnavailableError`.
        """
        start = time.perf_counter()
        store = Path(store_dir)
        cp = Path(checkpoint_dir) if checkpoint_dir is not None else None
        snapshot = index_blob_id
        index_blob_id = base_of(snapshot)
        changes = changes_of(snapshot)
        index, recovered = self._read_index_lenient(index_blob_id)
        store_name = index.metadata.store_name
        rm = self.restore_metrics
        # Reuse needs the marker too: another attempt of the same checkpoint id (say, on a host that
        # lost the task) can leave SST files with the same names and sizes but other content. A dir of a
        # snapshot with writes was checkpointed by the commit that named it (the id says exactly what it holds).
        marker = read_snapshot_marker(cp) if cp is not None else None
        if cp is not None and changes and marker == snapshot:
            rm.local_reuses.inc()
            with rm.store_timer(store_name, "post-restore-ms").time():
                materialize_store_dir(cp, store)
            files, nbytes, reused = 0, 0, True
            changes = {}
        elif cp is not None and marker == index_blob_id and are_same_dir(cp, index.dir_index):
            rm.local_reuses.inc()
            with rm.store_timer(store_name, "post-restore-ms").time():
                materialize_store_dir(cp, store)
            files, nbytes, reused = 0, 0, True
        else:
            target = cp if cp is not None else store
            deleted_blobs: list[str] = []
            with rm.store_timer(store_name, "restore-ms").time():
                stats = self._download(index_blob_id, index, target, deleted_blobs.append)
            if deleted_blobs:
                rm.deleted_recoveries.inc(len(deleted_blobs))
                recovered = True
            if cp is not None:
                with rm.store_timer(store_name, "post-restore-ms").time():
                    materialize_store_dir(cp, store)
            files, nbytes, reused = stats[0], stats[1], False
        result_id = index_blob_id
        recovered = recovered or fresh_snapshot
        if recovered and reupload_deleted:
            # The snapshot refers to deleted blobs that gc will purge: replace it with a fresh one. Uploaded before
            # the writes an id carries are applied: they stay in the id (a reused dir holds them already).
            source = cp if cp is not None else store
            result_id = self.upload(store_name, source, index_blob_id, checkpoint_id=index.metadata.checkpoint_id,
                                    full=True)
            log.warning("snapshot %s of %s had deleted blobs: uploaded a fresh snapshot %s; record it in the "
                        "task checkpoint", index_blob_id, store_name, result_id)
        if changes:
            with rm.store_timer(store_name, "apply-changes-ms").time():
                apply_changes(store, changes)
        result_id = snapshot_id(result_id, changes) if result_id != index_blob_id else snapshot
        if changes:
            write_snapshot_marker(store, result_id)
        elapsed = time.perf_counter() - start
        rm.restore_ms.update(elapsed * 1000)
        if nbytes and elapsed > 0:
            rm.restore_rate.set(int(nbytes / elapsed))
        return RestoreResult(result_id, index.metadata.checkpoint_id, reused, files, nbytes, recovered, elapsed)

    def _download(self, index_blob_id: str, index: SnapshotIndex, target: Path, on_deleted: object
                  ) -> tuple[int, int]:
        rm = self.restore_metrics
        total_files = index.dir_index.file_count()
        total_bytes = index.dir_index.total_size()
        rm.files_to_restore.inc(total_files)
        rm.bytes_to_restore.inc(total_bytes)
        tmp = target.with_name(f".sparza-tmp-restore-{target.name}")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        progress = None
        task = None
        if self._progress_on(total_files):
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            # On stderr: stdout stays clean for whatever the caller prints.
            progress = Progress(TextColumn(f"restoring {index.metadata.store_name}"), BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(), transient=False,
                                console=Console(stderr=True))
            progress.start()
            task = progress.add_task("restore", total=total_bytes)

        def on_file(n: int) -> None:
            rm.files_restored.inc()
            rm.bytes_restored.inc(n)
            if progress is not None and task is not None:
                progress.advance(task, n)

        try:
            stats = self._transfer.restore_dir(index.dir_index, tmp, self._meta(index.metadata.store_name, ""),
                                               on_deleted=on_deleted, on_file=on_file)  # type: ignore[arg-type]
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if progress is not None:
                progress.stop()
        write_snapshot_marker(tmp, index_blob_id)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        fsync_dir(target.parent)
        return stats.files, stats.bytes

    # --- verify ------------------------------------------------------------------------------
    def verify(self, index_blob_id: str) -> VerifyResult:
        """Download every file of the snapshot into a temp dir and check sizes and CRC32s; report
        problems instead of raising (for ``sparza snapshots verify``)."""
        import tempfile

        problems: list[str] = []
        try:
            index, recovered = self._read_index_lenient(index_blob_id)
        except SnapshotUnavailableError as exc:
            return VerifyResult(index_blob_id, 0, 0, (str(exc),))
        if recovered:
            problems.append(f"snapshot index {index_blob_id} is deleted")
        files = nbytes = 0
        with tempfile.TemporaryDirectory(prefix="sparza-verify-") as tmp:
            for rel, f in index.dir_index.walk_present():
                dest = Path(tmp) / "file"

                def deleted(blob_id: str, rel: str = rel) -> None:
                    problems.append(f"{rel}: blob {blob_id} is deleted")

                try:
                    n = self._transfer.get_file(f, dest, self._meta(index.metadata.store_name, rel), rel,
                                                get_deleted=False, on_deleted=deleted)
                    files += 1
                    nbytes += n
                except Exception as exc:
                    problems.append(f"{rel}: {exc}")
                finally:
                    dest.unlink(missing_ok=True)
        return VerifyResult(index_blob_id, files, nbytes, tuple(problems))

    def close(self) -> None:
        """Stop the transfer threads (the blob store is the caller's to close)."""
        self._executor.shutdown(wait=True)

    def __enter__(self) -> StateBackup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_backup_config(config: Mapping[str, str]) -> None:
    """Raise :class:`~sparza.errors.ConfigError` when ``blob.store.transfer.threads`` or
    ``blob.store.file.chunk.size`` is out of range (checked before anything runs)."""
    _TRANSFER_THREADS.get(config)
    _CHUNK_SIZE.get(config)


define_check(_PKG, check_backup_config)
