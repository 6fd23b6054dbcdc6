"""What a rewind or a savepoint restore leaves behind in a job: store snapshots no checkpoint refers to any more,
and, in the micro-batch mode, Spark's offset log holding the old positions."""

from __future__ import annotations

import shutil
from pathlib import Path

from sparza.blobstore import BlobStoreManager
from sparza.engine.jobconfig import JobConfig
from sparza.state.backup import StateBackup

__all__ = ["LOCAL_SNAPSHOT_PREFIX", "drop_snapshots", "remove_stale_spark_dir"]

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



def remove_stale_spark_dir(job: JobConfig) -> list[str]:
    """Remove the job's local Spark offset log (micro-batch mode), which no longer matches its rewritten task
    checkpoints; returns a note saying so (none when there was none)."""
    spark_dir = _stale_spark_dir(job)
    if spark_dir is None:
        return []
    shutil.rmtree(spark_dir, ignore_errors=True)
    return [f"Spark's offset log {spark_dir} removed (offsets come from the task checkpoints)"]


def _stale_spark_dir(job: JobConfig) -> Path | None:
    """The micro-batch mode's Spark offset log of the job's processors, when local: it still holds the old
    positions, and a run would refuse to start against the rewound checkpoints."""
    from sparza.config.registry import OptionalKey, find_key

    declared = find_key("job.spark.checkpoint.dir")  # declared by sparza.engine.jobconfig
    base = declared.get(job.config) if isinstance(declared, OptionalKey) else None
    path = Path(base) if base else Path(job.store_base_dir) / "_spark" / job.job_key
    if "://" in str(path) and not str(path).startswith("file:"):
        return None
    path = Path(str(path).removeprefix("file:"))
    return path if path.exists() else None
