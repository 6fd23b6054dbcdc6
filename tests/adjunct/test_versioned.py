"""Versioned bounded datasets: an end-of-dataset marker seals a version; the switch is atomic."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from adjunct_harness import AdjunctHarness, BatchFeeder

from sparza.blobstore import BlobStoreManager
from sparza.config import Config
from sparza.state.adjunct import RecoveryAction, TaskAdjunctManager
from sparza.streams import SystemStreamPartition

P0 = SystemStreamPartition("d", "model", 0)
V1 = {"a": "1", "b": "1"}
V2 = {"a": "2", "c": "2"}


@pytest.fixture
def config(harness: AdjunctHarness) -> Config:
    harness.create("model", 1)
    harness.create("events", 1)
    return harness.config(**{
        "task.inputs": "d.events,d.model",
        "stores.model.adstore.input": "d.model",
        "stores.model.adstore.versioned": "true",
        "stores.model.key.serde": "string",
        "stores.model.msg.serde": "string",
        "stores.model.backup.factories": "blobstore",
    })


def _contents(manager: TaskAdjunctManager) -> dict[str, Any]:
    return dict(manager.get_store("model").all())


def _blob_ids(blob_store: BlobStoreManager, needle: str) -> set[str]:
    return {b.blob_id for b in blob_store.list_blobs() if needle in b.blob_id and b.deleted_at_ms is None}


def test_version_switches_at_the_batch_boundary_and_never_mixes(
        harness: AdjunctHarness, feeder: BatchFeeder, work_dir: Path, config: Any,
        local_blob_store: BlobStoreManager) -> None:
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    seen: list[dict[str, Any]] = []

    def look(_: object) -> None:
        seen.append(_contents(manager))

    # Batch 1: version 1 arrives complete, with its marker. Served only from batch 2.
    harness.write("model", 0, list(V1.items()))
    harness.seal("model", 0, "v1")
    feeder.feed(manager, [P0], each=look)
    assert _contents(manager) == {}
    manager.commit(1)
    assert _contents(manager) == V1

    # Batches 2 and 3: version 2 trickles in; version 1 is served throughout, never a mix.
    harness.write("model", 0, [("a", "2")])
    feeder.feed(manager, [P0], each=look)
    assert _contents(manager) == V1
    manager.commit(2)
    assert _contents(manager) == V1
    harness.write("model", 0, [("c", "2")])
    harness.seal("model", 0, "v2")
    feeder.feed(manager, [P0], each=look)
    assert _contents(manager) == V1
    manager.commit(3)
    assert _contents(manager) == V2
    assert all(view in ({}, V1, V2) for view in seen), seen
    status = manager.status()["model"]
    assert status["serving_version"] == 2 and status["building_version"] == 3

    # The discarded version is gone locally, and from the blob store one commit later.
    assert not (work_dir / "host-a" / "model" / "Partition_0.v1").exists()
    assert _blob_ids(local_blob_store, "model.v1")
    manager.commit(4)
    assert not _blob_ids(local_blob_store, "model.v1")
    manager.close()


def test_two_markers_in_one_batch_serve_the_last_version(harness: AdjunctHarness, feeder: BatchFeeder,
                                                         work_dir: Path, config: Any) -> None:
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    harness.write("model", 0, list(V1.items()))
    harness.seal("model", 0)
    harness.write("model", 0, list(V2.items()))
    harness.seal("model", 0)
    feeder.feed(manager, [P0])
    manager.commit(1)
    assert _contents(manager) == V2
    assert sorted(p.name for p in (work_dir / "host-a" / "model").iterdir()) == ["Partition_0.v2", "Partition_0.v3"]
    manager.close()


def test_restart_while_building_keeps_both_versions(harness: AdjunctHarness, feeder: BatchFeeder, work_dir: Path,
                                                    config: Any) -> None:
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    harness.write("model", 0, list(V1.items()))
    harness.seal("model", 0)
    feeder.feed(manager, [P0])
    manager.commit(1)
    harness.write("model", 0, [("a", "2")])
    feeder.feed(manager, [P0])
    entry = manager.commit(2)
    manager.close()
    shutil.rmtree(work_dir / "host-a")

    moved = harness.manager("Partition 0", config, work_dir / "host-b", entry=entry)
    assert moved.status()["model"]["recovery"] == RecoveryAction.RESTORE_SNAPSHOT.value
    assert _contents(moved) == V1
    harness.write("model", 0, [("c", "2")])
    harness.seal("model", 0)
    feeder.feed(moved, [P0])
    moved.commit(3)
    assert _contents(moved) == V2  # "a"=2 came from the restored building version
    moved.close()


def test_a_version_over_two_partitions_is_sealed_when_both_sent_their_marker(
        harness: AdjunctHarness, feeder: BatchFeeder, work_dir: Path) -> None:
    harness.create("model", 2)
    harness.create("events", 1)
    config = harness.config(**{
        "task.inputs": "d.events",
        "task.broadcast.inputs": "d.model#[0-1]",
        "stores.model.adstore.input": "d.model",
        "stores.model.adstore.versioned": "true",
        "stores.model.key.serde": "string",
        "stores.model.msg.serde": "string",
    })
    ssps = [SystemStreamPartition("d", "model", 0), SystemStreamPartition("d", "model", 1)]

    def serving(manager: TaskAdjunctManager) -> dict[str, str]:
        store = manager.manager("model").builder.serving_store()  # type: ignore[attr-defined]
        return {k.decode(): v.decode() for k, v in store.all()}

    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    # Batch 1: version 1 in both partitions, each with its marker: served whole.
    harness.write("model", 0, [("a", "1")])
    harness.seal("model", 0)
    harness.write("model", 1, [("b", "1")])
    harness.seal("model", 1)
    feeder.feed(manager, ssps)
    manager.commit(1)
    assert serving(manager) == {"a": "1", "b": "1"}

    # Batch 2: partition 0 ends version 2 and starts version 3; partition 1 has version 2 without a marker.
    harness.write("model", 0, [("a", "2")])
    harness.seal("model", 0)
    harness.write("model", 0, [("a", "3")])
    harness.write("model", 1, [("b", "2")])
    feeder.feed(manager, ssps)
    entry = manager.commit(2)
    assert serving(manager) == {"a": "1", "b": "1"}  # version 1 still, whole
    manager.close()

    # A new host between the two markers keeps partition 0's progress.
    shutil.rmtree(work_dir / "host-a")
    moved = harness.manager("Partition 0", config, work_dir / "host-b", entry=entry)
    harness.seal("model", 1)
    feeder.feed(moved, ssps)
    moved.commit(3)
    assert serving(moved) == {"a": "2", "b": "2"}  # a=3 came after partition 0's marker: version 3

    harness.write("model", 1, [("b", "3")])
    harness.seal("model", 0)
    harness.seal("model", 1)
    feeder.feed(moved, ssps)
    moved.commit(4)
    assert serving(moved) == {"a": "3", "b": "3"}
    moved.close()
