"""What ``sparza rewind`` and ``sparza savepoint`` refuse, each with a message naming the problem and what to do
(no Spark: a Delta input in a temp dir, checkpoints written by hand)."""

from __future__ import annotations

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
