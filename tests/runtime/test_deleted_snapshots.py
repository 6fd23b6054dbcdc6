"""Deleted snapshot blobs through `sparza run` are recovered, as Samza does since SAMZA-2787.

A committed snapshot's blobs (index and files) are marked deleted and the local state is gone (a
new host): the job must restore from the deleted blobs, commit a fresh snapshot at once, carry on
with exact state and say so. When the blobs were purged for good it must stop with a message that
names the snapshot, the task and what to do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import (
    committed_snapshots,
    delete_snapshots,
    expected_counts,
    final_counts,
    run_sparza,
    snapshot_blobs,
    write_config,
)

from sparza.blobstore import blob_store_manager_from_config, collect_garbage
from sparza.config import Config
from sparza.state.backup import StateBackup
from sparza.state.backup.delta import base_of

# Three Spark runs per test: on a loaded 2-core machine one run can take minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
RUN_TIMEOUT = 900

KEYS = 7
DAY_MS = 86_400_000


def _job(make_job, backend: str, request: pytest.FixtureRequest, unique_name: str, work_dir: Path) -> Config:
    overrides = {"metrics.reporter.jsonl.path": str(work_dir / "metrics.jsonl")}
    if backend == "azure":
        azurite = request.getfixturevalue("azurite")
        overrides.update({"blob.store.manager.factory": "azure", "blob.store.azure.container": unique_name,
                          "azure.storage.connect": azurite.connection_string})
    return make_job(**overrides)


def _lose_local_state(config: Config) -> None:
    shutil.rmtree(config["job.logged.store.base.dir"])


def _metric_total(path: Path, name: str) -> int:
    """The newest value of every ``<task>:<group>`` counter ``name`` in the JSON-lines report, summed."""
    latest: dict[str, int] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for group, metrics in record.get("metrics", record).items():
            if isinstance(metrics, dict) and name in metrics:
                latest[group] = int(metrics[name])
    return sum(latest.values())


@pytest.mark.parametrize("backend", ["local", "azure"])
def test_deleted_snapshot_blobs_are_recovered_and_recommitted(make_job, work_dir, request, unique_name, backend):
    config = _job(make_job, backend, request, unique_name, work_dir)
    path = write_config(config, work_dir / "job.yaml")
    append_messages(config, 600, KEYS, commit_size=200)
    first = run_sparza("run", "--config", str(path), "--once", "--master", "local[2]", timeout=RUN_TIMEOUT)
    assert first.returncode == 0, first.stderr

    deleted = delete_snapshots(config)
    assert len(deleted) == 2
    _lose_local_state(config)
    append_messages(config, 300, KEYS, start=600, commit_size=300)

    second = run_sparza("run", "--config", str(path), "--once", "--master", "local[2]", timeout=RUN_TIMEOUT)
    assert second.returncode == 0, second.stderr
    counts, rows = final_counts(config)
    assert counts == expected_counts(900, KEYS)
    assert rows == 900
    # Said so in the log and counted in a metric, once per task.
    assert second.stderr.count("deleted blobs") >= 2, second.stderr
    assert _metric_total(work_dir / "metrics.jsonl", "deleted-snapshot-recoveries") == 2

    # The checkpoints name new snapshots, every blob of which is permanent: gc far in the future (past the
    # TTL and the deleted-blob retention) purges the deleted ones and keeps everything the job needs.
    now = committed_snapshots(config)
    for task, index_id in now.items():
        assert base_of(index_id) not in deleted[task]
    manager = blob_store_manager_from_config(config)
    try:
        report = collect_garbage(manager, now_ms=2**41 + 400 * DAY_MS)
        purged = set(report.removed)
        for task, blobs in deleted.items():
            assert set(blobs) <= purged, f"task {task}: deleted blobs not purged"
        for task, index_id in now.items():
            assert not ({base_of(index_id), *snapshot_blobs(config, task, index_id)} & purged)
    finally:
        manager.close()

    # The new snapshots are whole without the purged blobs: every blob downloads and every CRC matches.
    manager = blob_store_manager_from_config(config)
    try:
        for task, index_id in now.items():
            verified = StateBackup(manager, "kc", "1", task).verify(index_id)
            assert verified.ok and verified.files > 0, verified.problems
    finally:
        manager.close()


def test_purged_snapshot_fails_naming_snapshot_task_and_remedy(make_job, work_dir, request, unique_name):
    config = _job(make_job, "local", request, unique_name, work_dir)
    path = write_config(config, work_dir / "job.yaml")
    append_messages(config, 300, KEYS, commit_size=300)
    first = run_sparza("run", "--config", str(path), "--once", "--master", "local[2]", timeout=RUN_TIMEOUT)
    assert first.returncode == 0, first.stderr
    snapshots = committed_snapshots(config)
    delete_snapshots(config)
    manager = blob_store_manager_from_config(config)
    try:
        collect_garbage(manager, now_ms=2**41)  # past the retention: the deleted blobs are purged
    finally:
        manager.close()
    _lose_local_state(config)
    append_messages(config, 300, KEYS, start=300, commit_size=300)  # a batch to run: it must restore first

    result = run_sparza("run", "--config", str(path), "--once", "--master", "local[2]", timeout=RUN_TIMEOUT)
    assert result.returncode != 0
    # The last line says it all (not a Spark stack trace): which store, task and snapshot, and what to do.
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors, result.stderr
    err = errors[-1]
    assert "RuntimeStateError" in err and "store 'counts'" in err, result.stderr
    assert any(f"task '{t}'" in err and snapshots[t] in err for t in snapshots), err
    assert "undelete" in err and "delete the task checkpoint" in err, err
