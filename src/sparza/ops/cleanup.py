"""What a rewind or a savepoint restore leaves behind in a job: store snapshots no checkpoint refers to any more.

Spark's offset log (micro-batch mode) is left alone: every start plans from the task checkpoints, so an
offset log with the old positions is only Spark's bookkeeping (see ``sparza.runtime.driver.source``)."""

from __future__ import annotations

from sparza.blobstore import BlobStoreManager
from sparza.engine.jobconfig import JobConfig
from sparza.state.backup import StateBackup

__all__ = ["LOCAL_SNAPSHOT_PREFIX", "drop_snapshots"]

LOCAL_SNAPSHOT_PREFIX = "local:"
"""How a checkpoint names a store snapshot kept only on an executor's disk (not backed up): no blobs."""


def drop_snapshots(blob_store: BlobStoreManager, job: JobConfig, snapshots: list[tuple[str, str]]) -> None:
    """Delete the snapshots (task, index id) no checkpoint refers to any more (local-only ones have no blobs)."""
    for task, index in snapshots:
        if index.startswith(LOCAL_SNAPSHOT_PREFIX):
            continue
        backup = StateBackup(blob_store, job.name, job.job_id, task)
        try:
            backup.delete_snapshot(index)
        finally:
            backup.close()
