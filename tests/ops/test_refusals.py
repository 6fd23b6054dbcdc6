"""What ``sparza rewind`` and ``sparza savepoint`` refuse, each with a message naming the problem and what to do
(no Spark: a Delta input in a temp dir, checkpoints written by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparza.cli import app
from sparza.config import Config
from sparza.coordination.jobclaim import JobClaim
from sparza.engine.checkpoint import TaskCheckpoint, checkpoint_store_from_config
from sparza.ops import (
    RewindError,
    RewindTarget,
    SavepointError,
    create_savepoint,
    delete_savepoint,
    plan_rewind,
    stopped_job,
)
from sparza.ops.stopped import JobRunningError
from sparza.systems import StreamSpec, get_system_factory


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


def test_a_savepoint_of_a_job_whose_committed_snapshot_was_purged_is_refused_and_leaves_nothing_permanent(
        tmp_path: Path) -> None:
    """Found by the soak (seed 107845149): a savepoint taken right after a job's committed snapshot blobs were purged
    failed with the backup's bare SnapshotUnavailableError (no savepoint, task or store named; its advice is a run's),
    and the copies it had made of the tasks before were already permanent: blobs nothing names that gc never removes.
    It must be refused as a SavepointError saying what to do, leave only TTL-tagged copies (gc removes them), and
    succeed once the blob is back. Oracle: the counts of the input, counted here."""
    from collections import Counter

    from sparza.blobstore import blob_store_manager_from_config, collect_garbage
    from sparza.clock import system_clock_ms
    from sparza.ops import find_savepoint, list_savepoints
    from sparza.state.backup import StateBackup
    from sparza.testing import TestMessage, TestRunner

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
        config = runner.config
        oracle = {f"Partition {p}": Counter(k for i, k in enumerate(keys) if i % 2 == p) for p in (0, 1)}
        index = runner.checkpoints()["Partition 1"].stores["counts"]
        blob = tmp_path / "job" / "blobstore" / index
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
            collect_garbage(blobs, now_ms=system_clock_ms() + 60 * 86_400_000, deleted_retention_ms=0)
            assert list(blobs.list_blobs("_savepoint-first/")) == []

        blob.write_bytes(saved[0])  # brought back, as the refusal says; the same name is free
        sidecar.write_text(saved[1])
        create_savepoint(config, "first")
        with blob_store_manager_from_config(config) as blobs:
            collect_garbage(blobs, now_ms=system_clock_ms() + 60 * 86_400_000, deleted_retention_ms=0)
            savepoint = find_savepoint(blobs, "first")
            assert savepoint is not None and sorted(savepoint.tasks) == ["Partition 0", "Partition 1"]
            for task, cp in savepoint.tasks.items():  # every copy survives gc and holds the task's counts
                backup = StateBackup(blobs, "", "", task)
                try:
                    backup.restore(cp.stores["counts"], tmp_path / "restored" / task)
                finally:
                    backup.close()
        from rocksdict import AccessType, Options, Rdict

        for task, expected in oracle.items():
            db = Rdict(str(tmp_path / "restored" / task), options=Options(raw_mode=True),
                       access_type=AccessType.read_only())
            try:
                counts = {k.decode(): json.loads(v) for k, v in db.items()}
            finally:
                db.close()
            assert counts == dict(expected), task
