"""Task checkpoint stores: atomic, version-conditional and generation-fenced, locally and on Azurite."""

from __future__ import annotations

import dataclasses

import pytest

from sparza.runtime import (
    AzureCheckpointStore,
    CheckpointConflictError,
    CheckpointFencedError,
    Intent,
    LocalCheckpointStore,
    TaskCheckpoint,
)


def _cp(batch: int, generation: int = 0, task: str = "Partition 0") -> TaskCheckpoint:
    return TaskCheckpoint(task=task, batch=batch, generation=generation, offsets={"delta.in#0": f"{batch}:0"},
                          stores={"counts": f"index-{batch}"}, control={"version": 1})


def _exercise(store) -> None:
    assert store.read("Partition 0") is None
    tag1 = store.write(_cp(1), None)
    got = store.read("Partition 0")
    assert got is not None and got.etag == tag1 and got.checkpoint == _cp(1)
    # A writer that read nothing (or an old version) cannot overwrite.
    with pytest.raises(CheckpointConflictError):
        store.write(_cp(2), None)
    tag2 = store.write(_cp(2), tag1)
    with pytest.raises(CheckpointConflictError):
        store.write(_cp(3), tag1)
    # A newer generation takes over; the old generation is fenced off even with a fresh tag.
    tag3 = store.write(_cp(3, generation=2), tag2)
    with pytest.raises(CheckpointFencedError) as err:
        store.write(_cp(4, generation=1), tag3)
    assert err.value.stored_generation == 2
    store.write(_cp(1, task="Partition 1"), None)
    assert sorted(store.read_all()) == ["Partition 0", "Partition 1"]
    assert store.read_all()["Partition 0"].batch == 3


def test_local_checkpoint_store(tmp_path):
    _exercise(LocalCheckpointStore(tmp_path, "job-1"))
    assert not list(tmp_path.glob("job-1/.tmp-*"))


@pytest.mark.azurite
def test_azure_checkpoint_store(azure_account, unique_name):
    container = azure_account.blob_service_client().get_container_client(unique_name)
    _exercise(AzureCheckpointStore(container, "job-1"))


def test_checkpoints_show_prints_every_task(tmp_path):
    import json

    import yaml
    from tests.runtime.helpers import job_values
    from typer.testing import CliRunner

    from sparza.cli import app

    values = job_values(tmp_path)
    store = LocalCheckpointStore(tmp_path / "blobstore" / "checkpoints", "kc-1")
    store.write(_cp(4), None)
    store.write(_cp(5, task="Partition 1"), None)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(values))
    result = CliRunner().invoke(app, ["checkpoints", "show", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert "Partition 0" in result.output and "Partition 1" in result.output and "index-5" in result.output
    shown = json.loads(CliRunner().invoke(app, ["checkpoints", "show", "--config", str(path), "--json"]).output)
    assert shown["Partition 1"]["batch"] == 5 and shown["Partition 0"]["offsets"] == {"delta.in#0": "4:0"}


def test_drop_intent_forgets_an_uncommitted_flush_and_memory_stores_upgrade(make_job, work_dir):
    import dataclasses

    from tests.runtime.helpers import run_sparza, write_config

    from sparza.engine.checkpoint import checkpoint_store_from_config
    from sparza.engine.jobconfig import JobConfig
    from sparza.engine.stores import TaskStores
    from sparza.metrics import MetricsRegistry

    config = make_job(**{"stores.counts.factory": "memory"})
    store = checkpoint_store_from_config(config, "kc-1")
    intent = Intent(batch=3, planned_at_ms=1, starts={"delta.events#0": "1:0"}, ends={"delta.events#0": "1:5"})
    store.write(dataclasses.replace(_cp(2), stores={"counts": "local:2"}, pending=intent), None)
    assert '"version":2' in store.read("Partition 0").checkpoint.to_json().decode()  # older readers refuse it
    path = str(write_config(config, work_dir / "job.yaml"))
    result = run_sparza("checkpoints", "drop-intent", "--config", path, "--task", "Partition 0", timeout=60)
    assert result.returncode == 0, result.stderr
    after = store.read("Partition 0").checkpoint
    assert after.open_intent() is None and after.batch == 2
    again = run_sparza("checkpoints", "drop-intent", "--config", path, "--task", "Partition 0", timeout=60)
    assert again.returncode == 1 and "no uncommitted flush" in again.stderr
    # That checkpoint names a memory store snapshot from before memory stores were snapshotted:
    # the store starts empty (as it always did then) instead of failing the task.
    stores = TaskStores(JobConfig.from_config(config), "Partition 0", MetricsRegistry())
    stores.open(dict(after.stores), after.batch)
    assert list(stores.handles["counts"].all()) == []
    assert stores.metrics.snapshot()["stores"]["legacy-memory-started-empty"] == 1
    stores.close()


def _fence_exercise(store) -> None:
    from sparza.engine.checkpoint import Intent, stamp_generation

    # The old holder (epoch 1) read its checkpoints; a new holder then claims the job at epoch 2.
    tag = store.write(dataclasses.replace(_cp(1, generation=1), pending=Intent(2, 5, {}, {})), None)
    stamp_generation(store, ["Partition 0", "Partition 1"], 2)
    stamped = store.read("Partition 0").checkpoint
    assert stamped.generation == 2 and stamped.batch == 1 and stamped.pending is not None  # content kept
    fresh = store.read("Partition 1").checkpoint
    assert fresh.generation == 2 and not fresh.committed  # a task that never committed is fenced too
    # The old holder's intent or checkpoint writes are refused, whatever version tag it presents.
    with pytest.raises(CheckpointFencedError):
        store.write(_cp(2, generation=1), tag)
    with pytest.raises(CheckpointFencedError):
        store.write(_cp(1, generation=1, task="Partition 1"), None)
    assert {t: cp.generation for t, cp in store.read_all().items()} == {"Partition 0": 2, "Partition 1": 2}
    # Stamping never lowers a generation.
    stamp_generation(store, ["Partition 0"], 1)
    assert store.read("Partition 0").checkpoint.generation == 2


def test_a_claim_epoch_stamped_on_every_task_fences_the_previous_holder(tmp_path):
    store = LocalCheckpointStore(tmp_path, "job-1")
    _fence_exercise(store)
    claim = store.claim_backend()
    assert claim.read() is None and not str(claim.describe()).endswith(".json")  # never read as a task


@pytest.mark.azurite
def test_a_claim_epoch_fences_the_previous_holder_on_azure(azure_account, unique_name):
    container = azure_account.blob_service_client().get_container_client(unique_name)
    _fence_exercise(AzureCheckpointStore(container, "job-1"))


def test_an_intent_names_the_systems_its_batch_flushes_and_older_intents_name_none() -> None:
    """A task started where an intent is open fences the systems it names (TaskInstance.restore_stores)."""
    import json

    from sparza.engine.checkpoint import Intent, TaskCheckpoint

    intent = Intent(3, 1, {"kafka.events#0": "5"}, {"kafka.events#0": "9"}, systems=("kafka", "out"))
    cp = dataclasses.replace(_cp(2), pending=intent)
    read = TaskCheckpoint.from_json(cp.to_json())
    assert read.open_intent() == intent and read.open_intent().systems == ("kafka", "out")
    body = json.loads(cp.to_json())
    del body["pending"]["systems"]  # as sparza wrote intents before
    assert TaskCheckpoint.from_json(json.dumps(body).encode()).open_intent().systems == ()
    # A committed checkpoint names the systems its batch wrote (its next instance opens them first), still in the
    # format older readers read (version 1: they ignore the field).
    done = dataclasses.replace(_cp(3), outputs=("kafka",))
    assert TaskCheckpoint.from_json(done.to_json()).outputs == ("kafka",)
    assert '"version":1' in done.to_json().decode()
