"""Host-local copies of published broadcast snapshots, shared by every task on the host.

Samza's ContainerStorageManager in Spark terms: a Spark executor host runs several tasks, possibly
in several Python worker processes, and they all read the same broadcast store. Each published
snapshot is downloaded once per host into ``<container dir>/<store>/<snapshot key>`` and opened
read-only by every task (RocksDB read-only opens take no lock), so four tasks keep one copy on disk.

Concurrency between processes uses ``flock`` on a lock file per snapshot:

* a reader holds a shared lock for as long as it has the snapshot open;
* the first reader to find the directory missing takes the exclusive lock, downloads into a temp
  directory and renames it into place (atomic), so no reader ever opens a partial copy;
* garbage collection deletes a snapshot directory only when it can take the exclusive lock
  without waiting, i.e. when no task on the host has it open; it renames the directory away before
  deleting it, so a crash during deletion leaves no partial copy under the real name.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import IO

from sparza.config import Config
from sparza.host import pid_alive
from sparza.state.adjunct.errors import BroadcastSnapshotError
from sparza.state.adjunct.slot import open_raw_store
from sparza.state.adjunct.snapshots import SnapshotStore
from sparza.state.kv import KeyValueStore, safe_dir_name

__all__ = ["ContainerSnapshotCache", "SnapshotLease", "directory_size_bytes"]

_log = logging.getLogger(__name__)


def _key(snapshot_id: str) -> str:
    return "s-" + hashlib.sha1(snapshot_id.encode("utf-8")).hexdigest()[:20]


class SnapshotLease:
    """A task's read-only handle on one host-local snapshot; :meth:`release` closes and unlocks it."""

    def __init__(self, snapshot_id: str, path: Path, store: KeyValueStore, lock_file: IO[bytes]) -> None:
        self.snapshot_id = snapshot_id
        self.path = path
        self.store = store
        self._lock_file: IO[bytes] | None = lock_file

    def release(self) -> None:
        """Close the store and drop the shared lock (idempotent)."""
        self.store.close()
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None


class ContainerSnapshotCache:
    """Snapshots of the broadcast stores of one job on this host, under ``root``."""

    def __init__(self, root: str | Path, config: Config) -> None:
        self.root = Path(root)
        self.config = config
        self.downloads = 0
        """Snapshots this process downloaded (tests and benchmarks read it)."""

    def store_root(self, store_name: str) -> Path:
        """The directory holding the snapshots of ``store_name``."""
        return self.root / safe_dir_name(store_name)

    def acquire(self, store_name: str, snapshot_id: str, snapshots: SnapshotStore) -> SnapshotLease:
        """Open the snapshot read-only, downloading it first when this host has no copy yet."""
        parent = self.store_root(store_name)
        parent.mkdir(parents=True, exist_ok=True)
        key = _key(snapshot_id)
        path = parent / key
        lock_file = open(parent / f"{key}.lock", "a+b")  # noqa: SIM115 - held for the lease's lifetime
        try:
            self._lock_shared_copy(lock_file, path, snapshot_id, snapshots)
            store = open_raw_store(store_name, self.config, key, self.root, read_only=True)
        except BaseException:
            lock_file.close()
            raise
        return SnapshotLease(snapshot_id, path, store, lock_file)

    def _lock_shared_copy(self, lock_file: IO[bytes], path: Path, snapshot_id: str, snapshots: SnapshotStore) -> None:
        """Return holding a shared lock on a complete local copy, downloading it if no process has.

        Never upgrades a shared lock to an exclusive one and never blocks on the exclusive lock:
        readers keep their shared lock for a whole batch, so a process that waited for exclusivity
        while others read would wait for ever (and, with a barrier between readers, deadlock).
        """
        while True:
            if (path / "CURRENT").exists():
                fcntl.flock(lock_file, fcntl.LOCK_SH)  # waits only while a download holds it exclusively
                if (path / "CURRENT").exists():
                    return
                fcntl.flock(lock_file, fcntl.LOCK_UN)  # collected between the check and the lock: retry
                continue
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.02)  # another process downloads (or collects) it right now
                continue
            try:
                if not (path / "CURRENT").exists():
                    self._download(snapshot_id, path, snapshots)
            except BaseException:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
                raise
            fcntl.flock(lock_file, fcntl.LOCK_SH)  # downgrade: readers may share it from now on
            return

    def _download(self, snapshot_id: str, path: Path, snapshots: SnapshotStore) -> None:
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            snapshots.restore(snapshot_id, tmp)
            if path.exists():  # a partial leftover cannot exist (rename is atomic); be safe anyway
                shutil.rmtree(path)
            os.rename(tmp, path)
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BroadcastSnapshotError(path.parent.name, f"cannot download snapshot {snapshot_id} to "
                                         f"{path}: {exc}") from exc
        self.downloads += 1
        _log.info("downloaded broadcast snapshot %s to %s", snapshot_id, path)

    def collect(self, store_name: str, keep: set[str]) -> list[Path]:
        """Delete this store's host-local snapshots that no task on the host has open, except the
        snapshot ids in ``keep``. Returns the directories removed."""
        parent = self.store_root(store_name)
        if not parent.is_dir():
            return []
        keep_keys = {_key(s) for s in keep}
        removed: list[Path] = []
        for child in parent.iterdir():
            if child.name.startswith(".") and ".tmp-" in child.name:
                self._remove_stale_tmp(child)
                continue
            if not child.is_dir() or child.name in keep_keys:
                continue
            with open(parent / f"{child.name}.lock", "a+b") as lock_file:
                try:
                    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a task on this host still reads it
                trash = parent / f".{child.name}.tmp-gc-{uuid.uuid4().hex[:8]}"
                os.rename(child, trash)
                shutil.rmtree(trash, ignore_errors=True)
                removed.append(child)
        return removed

    def _remove_stale_tmp(self, path: Path) -> None:
        # Temp dirs of a download that crashed; a live download's temp dir belongs to a live pid.
        pid_text = path.name.split(".tmp-", 1)[1].split("-", 1)[0]
        if pid_text.isdigit() and pid_alive(int(pid_text)):
            return
        shutil.rmtree(path, ignore_errors=True)


def directory_size_bytes(path: str | Path) -> int:
    """Bytes on disk under ``path``, counting hard-linked files once (what ``du`` reports)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total
