"""One store of one task: the per-batch commit lifecycle and restore as one call each.

Local directories, for store ``s`` of task ``t`` under ``base`` (``job.logged.store.base.dir``):

* store dir: ``<base>/<s>/<t>`` (the live RocksDB, :func:`sparza.state.kv.store_dir`);
* checkpoint dir of checkpoint id ``c``: ``<base>/<s>/<t>-<c>`` (Samza's ``<storeDir>-<id>``).

What each call creates and deletes locally:

* :meth:`StoreBackupManager.commit` creates ``<t>-<c>`` (replacing a leftover of a crashed attempt
  with the same id) and deletes nothing;
* :meth:`StoreBackupManager.cleanup` deletes every ``<t>-<other id>`` and temp dirs of this store
  and task, keeping only ``<t>-<c>``;
* :meth:`StoreBackupManager.restore` replaces the store dir, and creates or refreshes ``<t>-<c>``
  for the snapshot's checkpoint id ``c``; it deletes nothing else.

Use checkpoint ids that are safe in a file name (the runtime uses the batch id).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sparza.state.backup.backup import CleanupResult, RestoreResult, StateBackup
from sparza.state.kv.api import KeyValueStore

__all__ = ["StoreBackupManager"]


class StoreBackupManager:
    """Backs up and restores the store ``store_name`` living in ``store_dir`` through ``backup``."""

    def __init__(self, backup: StateBackup, store_name: str, store_dir: str | Path) -> None:
        self.backup = backup
        self.store_name = store_name
        self.store_dir = Path(store_dir)

    def checkpoint_dir(self, checkpoint_id: str) -> Path:
        """The local checkpoint dir of ``checkpoint_id``: ``<store dir>-<id>``."""
        if not checkpoint_id or "/" in checkpoint_id or checkpoint_id in (".", ".."):
            raise ValueError(f"checkpoint id {checkpoint_id!r} is not usable in a dir name")
        return self.store_dir.with_name(f"{self.store_dir.name}-{checkpoint_id}")

    def local_checkpoint_dirs(self) -> list[Path]:
        """Every local checkpoint dir of this store and task."""
        parent = self.store_dir.parent
        if not parent.is_dir():
            return []
        prefix = self.store_dir.name + "-"
        return sorted(p for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix))

    def commit(self, store: KeyValueStore, checkpoint_id: str, prev_index_id: str | None) -> str:
        """Flush ``store``, checkpoint it into :meth:`checkpoint_dir` and upload it incrementally
        against ``prev_index_id``; returns the new index blob id for the task checkpoint."""
        store.flush()
        cp = store.checkpoint(self.checkpoint_dir(checkpoint_id))
        return self.backup.upload(self.store_name, cp, prev_index_id, checkpoint_id=checkpoint_id)

    def cleanup(self, index_blob_id: str, checkpoint_id: str | None = None) -> CleanupResult:
        """After the task checkpoint with ``index_blob_id`` is durable: make it permanent, delete
        what it replaced, and delete every local checkpoint dir except ``checkpoint_id``'s (taken
        from the index when omitted)."""
        result = self.backup.cleanup(index_blob_id)
        keep_id = checkpoint_id or self.backup.read_index(index_blob_id, get_deleted=True).metadata.checkpoint_id
        keep = self.checkpoint_dir(keep_id)
        for path in self.local_checkpoint_dirs():
            if path != keep:
                shutil.rmtree(path, ignore_errors=True)
        for tmp in self.store_dir.parent.glob(f".sparza-tmp-*{self.store_dir.name}*"):
            shutil.rmtree(tmp, ignore_errors=True)
        return result

    def restore(self, index_blob_id: str) -> RestoreResult:
        """Rebuild the store dir from the snapshot, reusing the local checkpoint dir of its
        checkpoint id when it matches. The store must be closed. When ``result.index_blob_id``
        differs from ``index_blob_id`` (deleted blobs were recovered), record the new id in the next
        task checkpoint and ``cleanup`` it afterwards."""
        index = self.backup.read_index(index_blob_id, get_deleted=True)
        cp = self.checkpoint_dir(index.metadata.checkpoint_id)
        return self.backup.restore(index_blob_id, self.store_dir, cp)
