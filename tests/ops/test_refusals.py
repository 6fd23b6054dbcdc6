"""What ``sparza rewind`` and ``sparza savepoint`` refuse, each with a message naming the problem and what to do
(no Spark: a Delta input in a temp dir, checkpoints written by hand, or a keyed count run by the in-process
TestRunner)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparza.blobstore import BlobStoreManager, blob_store_manager_from_config, collect_garbage
from sparza.cli import app
from sparza.clock import system_clock_ms
from sparza.config import Config
from sparza.coordination.jobclaim import JobClaim
from sparza.engine.checkpoint import TaskCheckpoint, checkpoint_store_from_config
from sparza.ops import (
    RewindError,
    RewindTarget,
    SavepointError,
    apply_rewind,
    create_savepoint,
    delete_savepoint,
    find_savepoint,
    list_savepoints,
    plan_rewind,
    restore_savepoint,
    stopped_job,
)
from sparza.ops.stopped import JobRunningError
from sparza.state.backup import StateBackup
from sparza.state.backup.delta import base_of
from sparza.systems import StreamSpec, get_system_factory
from sparza.testing import TestMessage, TestRunner


@pytest.fixture
def job(tmp_path: Path) -> tuple[Config, Path]:
    config = Config({"job.name": "refuse", "job.id": "1", "task.class": "examples.keyed_count.task.KeyedCountTask",
                     "task.inputs": "delta.events", "job.logged.store.base.dir": str(tmp_path / "state"),
                     "systems.delta.samza.factory": "delta", "systems.delta.delta.root": str(tmp_path / "streams"),
                     "stores.counts.factory": "rocksdb", "stores.counts.key.serde": "string",
                     "stores.counts.msg.serde": "json", "blob.store.manager.factory": "local",
                     "blob.store.local.root": str(tmp_path / "blobs")})
    get_system_factory(config, "delta").get_admin("delta", config).create_stream(StreamSpec("events", 2))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(config.items())))
    return config, path


def test_savepoints_are_refused_with_a_reason(job: tuple[Config, Path]) -> None:
    config, _ = job
    with pytest.raises(SavepointError, match="savepoint name 'no/slash'"):
        create_savepoint(config, "no/slash")
    with pytest.raises(SavepointError, match="no committed task checkpoint"):
        create_savepoint(config, "first")
    store = checkpoint_store_from_config(config, "refuse-1")
    store.write(TaskCheckpoint("Partition 0", 3, 0, {"delta.events#0": "1:0"}, {"counts": "local:3"}), None)
    with pytest.raises(SavepointError, match="kept on the executors' disks only"):
        create_savepoint(config, "first")
    claim = JobClaim(store.claim_backend(), "refuse-1", "4")  # type: ignore[attr-defined]
    claim.acquire()
    try:
        with pytest.raises(JobRunningError, match="is running in processor 4 .*stop it first"):
            create_savepoint(config, "first")
    finally:
        claim.release()
    from sparza.blobstore import blob_store_manager_from_config

    with blob_store_manager_from_config(config) as blobs, pytest.raises(SavepointError, match="no savepoint gone"):
        delete_savepoint(blobs, "gone")


def test_rewinds_are_refused_with_a_reason(job: tuple[Config, Path]) -> None:
    config, path = job
    with stopped_job(config) as stopped:
        with pytest.raises(RewindError, match="state 'sideways': keep, reset or savepoint:<name>"):
            plan_rewind(stopped, RewindTarget("oldest"), state="sideways")
        with pytest.raises(RewindError, match="has no task 'Partition 9'.*Partition 0, Partition 1"):
            plan_rewind(stopped, RewindTarget("oldest"), tasks=["Partition 9"])
        with pytest.raises(RewindError, match="never committed"):
            plan_rewind(stopped, RewindTarget("oldest"))
    runner = CliRunner()
    none = runner.invoke(app, ["rewind", "--config", str(path)])
    assert none.exit_code == 2 and "exactly one of --to-time" in none.output
    two = runner.invoke(app, ["rewind", "--config", str(path), "--to-oldest", "--to-newest"])
    assert two.exit_code == 2 and "exactly one of --to-time" in two.output
    bad = runner.invoke(app, ["rewind", "--config", str(path), "--to-time", "teatime"])
    assert bad.exit_code == 2 and "ISO-8601" in bad.output
    assert runner.invoke(app, ["savepoint", "list", "--config", str(path)]).output.strip() == "no savepoints"


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[TestRunner, dict[str, Counter[str]]]]:
    """A keyed count of 2 tasks, run in process (its store backed up to the runner's local blob store), and the
    oracle: each task's counts, counted here from the input."""
    keys = [f"k{i % 5}" for i in range(23)]
    with TestRunner({"job.name": "purged", "job.id": "1", "task.class": "examples.keyed_count.task.KeyedCountTask",
                     "stores.counts.factory": "rocksdb", "stores.counts.key.serde": "string",
                     "stores.counts.msg.serde": "json", "stores.counts.backup.factories": "blobstore",
                     "systems.delta.streams.counts.samza.key.serde": "string",
                     "systems.delta.streams.counts.samza.msg.serde": "json"},
                    work_dir=tmp_path / "job") as runner:
        runner.add_input("delta.events", [TestMessage(b"m", key=k.encode(), partition=i % 2)
                                          for i, k in enumerate(keys)], partitions=2)
        runner.add_output("delta.counts")
        runner.run()
        yield runner, {f"Partition {p}": Counter(k for i, k in enumerate(keys) if i % 2 == p) for p in (0, 1)}


def _far_gc(config: Config) -> None:
    """``sparza gc`` long after every TTL and deleted retention passed."""
    with blob_store_manager_from_config(config) as blobs:
        collect_garbage(blobs, now_ms=system_clock_ms() + 60 * 86_400_000, deleted_retention_ms=0)


def test_a_savepoint_of_a_job_whose_committed_snapshot_was_purged_is_refused_and_leaves_nothing_permanent(
        counted: tuple[TestRunner, dict[str, Counter[str]]], tmp_path: Path) -> None:
    """Found by the soak (seed 107845149): a savepoint taken right after a job's committed snapshot blobs were purged
    failed with the backup's bare SnapshotUnavailableError (no savepoint, task or store named; its advice is a run's),
    and the copies it had made of the tasks before were already permanent: blobs nothing names that gc never removes.
    It must be refused as a SavepointError saying what to do, leave only TTL-tagged copies (gc removes them), and
    succeed once the blob is back (every copy then holds the oracle's counts, after gc too)."""
    runner, oracle = counted
    config = runner.config
    index = base_of(runner.checkpoints()["Partition 1"].stores["counts"])
    blob = runner.work_dir / "blobstore" / index
    sidecar = blob.with_name(blob.name + ".meta.json")
    saved = blob.read_bytes(), sidecar.read_text()
    with blob_store_manager_from_config(config) as blobs:
        blobs.purge(index)  # gone for good, as after gc ran past the deleted retention
    with pytest.raises(SavepointError) as refused:
        create_savepoint(config, "first")
    message = str(refused.value)
    for part in ("savepoint first cannot be taken", "store 'counts' of task 'Partition 1'", index,
                 "gone from the blob store", "Bring that blob back", "delete the task checkpoint of 'Partition 1'",
                 "No savepoint was made"):
        assert part in message, message
    with blob_store_manager_from_config(config) as blobs:
        assert list_savepoints(blobs) == []
        copies = list(blobs.list_blobs("_savepoint-first/"))
        assert copies, "Partition 0's copy was made before Partition 1's snapshot was found gone"
        assert all(info.expires_at_ms is not None for info in copies), [i.blob_id for i in copies]
    _far_gc(config)
    with blob_store_manager_from_config(config) as blobs:
        assert list(blobs.list_blobs("_savepoint-first/")) == []

    blob.write_bytes(saved[0])  # brought back, as the refusal says; the same name is free
    sidecar.write_text(saved[1])
    create_savepoint(config, "first")
    _far_gc(config)
    with blob_store_manager_from_config(config) as blobs:
        savepoint = find_savepoint(blobs, "first")
        assert savepoint is not None and sorted(savepoint.tasks) == ["Partition 0", "Partition 1"]
        for task, cp in savepoint.tasks.items():
            assert _restored_counts(blobs, cp.stores["counts"], task, tmp_path / "restored") == dict(oracle[task])


def _restored_counts(blobs: BlobStoreManager, index: str, task: str, into: Path) -> dict[str, int]:
    """A counts snapshot restored through the backup's public API and read with rocksdict (raw: the json serde)."""
    from rocksdict import AccessType, Options, Rdict

    backup = StateBackup(blobs, "", "", task)
    try:
        backup.restore(index, into / task)
    finally:
        backup.close()
    db = Rdict(str(into / task), options=Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        return {k.decode(): json.loads(v) for k, v in db.items()}
    finally:
        db.close()


@pytest.mark.parametrize("use", ["restore", "rewind"])
def test_a_damaged_savepoint_is_refused_before_the_job_changes(counted: tuple[TestRunner, dict[str, Counter[str]]],
                                                               use: str) -> None:
    """A savepoint whose copy of one task's store was purged: restoring it (or rewinding to its state) wrote the
    checkpoints of the tasks before that one from the savepoint, then failed with the backup's bare error, leaving
    the job half restored and unjournaled. It must be refused naming the savepoint, the task, the store and the
    blob, with every task checkpoint as it was, and leave no permanent copy that nothing names."""
    runner, _ = counted
    config = runner.config
    savepoint = create_savepoint(config, "sp")
    before = runner.checkpoints()
    with blob_store_manager_from_config(config) as blobs:
        blobs.purge(base_of(savepoint.tasks["Partition 1"].stores["counts"]))
        job_blobs = {info.blob_id for info in blobs.list_blobs("purged-1/")}
    with pytest.raises(SavepointError) as refused:
        if use == "restore":
            restore_savepoint(config, "sp", force=True)
        else:
            with stopped_job(config) as stopped:
                offsets = {ssp: o for cp in stopped.checkpoints.read_all().values() for ssp, o in cp.offsets.items()}
                apply_rewind(stopped, plan_rewind(stopped, RewindTarget("offsets", offsets=offsets),
                                                  state="savepoint:sp", tables="keep"))
    message = str(refused.value)
    for part in (f"savepoint sp cannot be {'restored' if use == 'restore' else 'used for the rewind'}",
                 "store 'counts' of task 'Partition 1'", "gone from the blob store", "No task checkpoint of the job "
                 "was changed"):
        assert part in message, message
    assert runner.checkpoints() == before
    with blob_store_manager_from_config(config) as blobs:
        new = [info for info in blobs.list_blobs("purged-1/") if info.blob_id not in job_blobs]
        assert new and all(info.expires_at_ms is not None for info in new), [i.blob_id for i in new]
