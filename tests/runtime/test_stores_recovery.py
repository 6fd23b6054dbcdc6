"""TaskStores' SAMZA-2787 recovery without Spark: deleted snapshot blobs are replaced, purged ones named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.runtime.helpers import job_values

from sparza.blobstore import blob_store_manager_from_config, collect_garbage
from sparza.blobstore.api import INDEX_PAYLOAD_PATH, Metadata
from sparza.config import Config
from sparza.engine import stores as stores_module
from sparza.engine.errors import RuntimeStateError
from sparza.engine.jobconfig import JobConfig
from sparza.engine.stores import TaskStores
from sparza.metrics import MetricsRegistry
from sparza.state.backup import StateBackup

TASK = "Partition 0"


def _committed_store(work_dir: Path) -> tuple[JobConfig, str]:
    config = Config(job_values(work_dir))
    job = JobConfig.from_config(config)
    stores = TaskStores(job, TASK, MetricsRegistry())
    stores.open({}, None)
    stores.handles["counts"].put_all({"a": 1, "b": 2})
    ids = stores.snapshot(1, {})
    stores.mark_committed(1, ids)
    stores.clean_up(1, ids)
    stores.close()
    return job, ids["counts"]


def _delete_snapshot(config: Config, index_id: str) -> None:
    manager = blob_store_manager_from_config(config)
    try:
        index = StateBackup(manager, "kc", "1", TASK).read_index(index_id)
        for blob in index.dir_index.present_blobs():
            manager.delete(blob.blob_id, Metadata("", -1, "kc", "1", TASK, "counts"))
        manager.delete(index_id, Metadata(INDEX_PAYLOAD_PATH, -1, "kc", "1", TASK, "counts"))
    finally:
        manager.close()


def _new_host(job: JobConfig) -> TaskStores:
    shutil.rmtree(job.task_store_base_dir)
    stores_module._CLEANED.clear()  # a new process
    return TaskStores(job, TASK, MetricsRegistry())


def test_deleted_blobs_are_replaced_by_a_fresh_permanent_snapshot(work_dir: Path) -> None:
    job, index_id = _committed_store(work_dir)
    _delete_snapshot(job.config, index_id)
    stores = _new_host(job)
    replaced = stores.recover_deleted({"counts": index_id}, 1)
    assert set(replaced) == {"counts"} and replaced["counts"] != index_id
    assert stores.metrics.snapshot()["stores"]["deleted-snapshot-recoveries"] == 1
    stores.recovery_committed(1, replaced)
    manager = blob_store_manager_from_config(job.config)
    try:
        collect_garbage(manager, now_ms=2**41)  # far past the TTL and the deleted-blob retention
    finally:
        manager.close()
    stores_module._CLEANED.clear()
    again = _new_host(job)
    assert again.recover_deleted(replaced, 1) == {}  # nothing deleted any more
    again.open(replaced, 1)
    assert dict(again.handles["counts"].all()) == {"a": 1, "b": 2}
    again.close()


def test_purged_blobs_fail_naming_store_task_snapshot_and_remedy(work_dir: Path) -> None:
    job, index_id = _committed_store(work_dir)
    _delete_snapshot(job.config, index_id)
    manager = blob_store_manager_from_config(job.config)
    try:
        collect_garbage(manager, now_ms=2**41)
    finally:
        manager.close()
    stores = _new_host(job)
    with pytest.raises(RuntimeStateError) as info:
        stores.recover_deleted({"counts": index_id}, 1)
    message = str(info.value)
    assert "store 'counts'" in message and f"task '{TASK}'" in message and index_id in message
    assert "undelete" in message and "delete the task checkpoint" in message
