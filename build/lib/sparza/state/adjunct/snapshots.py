"""Snapshots of adjunct stores in the blob store, through the SEP-003 backup (``sparza.state.backup``).

A thin adapter over :class:`~sparza.state.backup.StateBackup` with the calls adjunct stores make;
it exists so the adjunct code names one narrow seam with the backup package.
"""

from __future__ import annotations

from pathlib import Path

from sparza.blobstore import BlobStoreManager
from sparza.state.backup import StateBackup

__all__ = ["SnapshotStore"]


class SnapshotStore:
    """Upload, restore, clean up and delete snapshots of the stores of one (job, task)."""

    def __init__(self, blob_store: BlobStoreManager, job_name: str, job_id: str, task_name: str) -> None:
        self.blob_store = blob_store
        self.job_name = job_name
        self.job_id = job_id
        self.task_name = task_name
        self._client: StateBackup | None = None

    @property
    def _backup(self) -> StateBackup:
        # Created on use (and again after ``close``): a closed manager may be restored and reused.
        if self._client is None:
            self._client = StateBackup(self.blob_store, self.job_name, self.job_id, self.task_name, threads=2,
                                       progress=False)
        return self._client

    def upload(self, slot_name: str, checkpoint_dir: Path, prev_index_id: str | None, checkpoint_id: str) -> str:
        """Upload a checkpoint dir (only the files not in ``prev_index_id``); returns the new index id."""
        return self._backup.upload(slot_name, checkpoint_dir, prev_index_id, checkpoint_id=checkpoint_id)

    def make_permanent(self, index_id: str) -> None:
        """Remove the TTL of every blob of ``index_id`` and delete nothing (idempotent): run once the
        task checkpoint naming the snapshot is durable, so a committed snapshot never expires."""
        self._backup.make_permanent(index_id)

    def cleanup(self, index_id: str) -> None:
        """Make ``index_id`` permanent and delete its predecessor and the files it dropped (idempotent)."""
        self._backup.cleanup(index_id)

    def restore(self, index_id: str, store_dir: Path) -> str:
        """Rebuild ``store_dir`` from the snapshot ``index_id`` (checksums verified). Returns the
        snapshot id to record from now on: a different one when deleted blobs had to be re-uploaded."""
        return self._backup.restore(index_id, store_dir).index_blob_id

    def delete_snapshot(self, index_id: str) -> None:
        """Delete every blob of the snapshot and its index (a discarded dataset version)."""
        self._backup.delete_snapshot(index_id)

    def close(self) -> None:
        """Stop the transfer threads (idempotent; the next call starts them again)."""
        if self._client is not None:
            self._client.close()
            self._client = None
