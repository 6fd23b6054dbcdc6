"""Partitioned adjunct stores with real Delta streams, RocksDB and blob stores (local and Azurite)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from adjunct_harness import AdjunctHarness, BatchFeeder

from sparza.blobstore import BlobStoreManager
from sparza.blobstore.azure import AzureBlobStoreManager
from sparza.devservers.storage import AzuriteProcess
from sparza.state.adjunct import AdjunctStoreReadOnlyError, RecoveryAction, UnknownAdjunctStoreError
from sparza.state.kv import StoreReadOnlyError
from sparza.streams import SystemStreamPartition

P0 = SystemStreamPartition("d", "customers", 0)


def _config(h: AdjunctHarness, **extra: str):
    return h.config(**{
        "task.inputs": "d.orders,d.customers",
        "stores.customers.adstore.input": "d.customers",
        "stores.customers.key.serde": "string",
        "stores.customers.msg.serde": "json",
        "stores.customers.backup.factories": "blobstore",
        **extra,
    })


@pytest.fixture
def streams(harness: AdjunctHarness) -> None:
    harness.create("customers", 2)
    harness.create("orders", 2)


@pytest.mark.usefixtures("streams")
def test_cdc_insert_update_delete_visible_in_the_same_batch(harness: AdjunctHarness, feeder: BatchFeeder,
                                                            work_dir: Path) -> None:
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    view = manager.get_store("customers")
    assert view.get("c1") is None

    harness.write("customers", 0, [("c1", {"name": "ann"}), ("c2", {"name": "bob"})])
    harness.write("customers", 1, [("c9", {"name": "other partition"})])
    assert feeder.feed(manager, [P0]) == 2
    # Batch 1: applied before the main messages of batch 1, so already visible.
    assert view.get("c1") == {"name": "ann"} and view.get("c2") == {"name": "bob"}
    assert view.get("c9") is None  # partition 1 belongs to Partition 1
    entry1 = manager.commit(1)
    json.dumps(entry1)  # goes into the task checkpoint as JSON

    harness.write("customers", 0, [("c1", {"name": "ann v2"}), ("c2", None)])
    feeder.feed(manager, [P0])
    assert view.get("c1") == {"name": "ann v2"}
    assert view.get("c2") is None  # null value = delete
    assert dict(view.all()) == {"c1": {"name": "ann v2"}}
    entry2 = manager.commit(2)
    assert entry2["stores"]["customers"]["offsets"][str(P0)] == harness.read(P0)[-1].offset
    assert entry2["stores"]["customers"]["applied"] == 4
    manager.close()


@pytest.mark.usefixtures("streams")
def test_writes_raise_a_clear_error(harness: AdjunctHarness, work_dir: Path) -> None:
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    view = manager.get_store("customers")
    for call in (lambda: view.put("k", 1), lambda: view.delete("k"), lambda: view.put_all({"k": 1}),
                 lambda: view.delete_all(["k"]), lambda: view.checkpoint(work_dir / "x")):
        with pytest.raises(AdjunctStoreReadOnlyError) as err:
            call()
        assert isinstance(err.value, StoreReadOnlyError)
        assert "d.customers" in str(err.value) and "read-only" in str(err.value)
    with pytest.raises(UnknownAdjunctStoreError, match="customers"):
        manager.get_store("nope")
    manager.close()


@pytest.mark.usefixtures("streams")
def test_main_messages_are_not_adjunct(harness: AdjunctHarness, work_dir: Path) -> None:
    harness.write("orders", 0, [("o1", {"customer": "c1"})])
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    order = harness.read(SystemStreamPartition("d", "orders", 0))[0]
    assert manager.on_envelope(order) is False
    manager.close()


@pytest.mark.usefixtures("streams")
def test_custom_extractor_projects_and_skips(harness: AdjunctHarness, feeder: BatchFeeder, work_dir: Path) -> None:
    config = _config(harness, **{"stores.customers.adstore.key.value.extractor.factory":
                                 "adjunct_helpers.ProjectingExtractorFactory",
                                 "stores.customers.msg.serde": "string"})
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    harness.write("customers", 0, [("x", {"id": 1, "name": "ann", "secret": "s"}), ("y", {"no_id": True}),
                                   ("1", None)])
    harness.write("customers", 0, [("x", {"id": 2, "name": "bob"})])
    feeder.feed(manager, [P0])
    view = manager.get_store("customers")
    assert dict(view.all()) == {"2": "bob"}  # 1 put then deleted by key "1"; no-id record skipped
    assert manager.status()["customers"]["skipped"] == 1
    manager.close()


@pytest.mark.usefixtures("streams")
def test_replayed_messages_are_applied_once(harness: AdjunctHarness, work_dir: Path) -> None:
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    harness.write("customers", 0, [("c1", {"n": 1}), ("c1", {"n": 2})])
    envelopes = harness.read(P0)
    for env in envelopes + envelopes:  # an overlapping re-read delivers them twice
        manager.on_envelope(env)
    status = manager.status()["customers"]
    assert status["applied"] == 2 and status["skipped"] == 2
    assert manager.get_store("customers").get("c1") == {"n": 2}
    manager.close()


def _two_batches(harness: AdjunctHarness, feeder: BatchFeeder, manager) -> dict:
    harness.write("customers", 0, [(f"c{i}", {"i": i}) for i in range(50)])
    feeder.feed(manager, [P0])
    manager.commit(1)
    harness.write("customers", 0, [("c0", None), ("c1", {"i": "one"})])
    feeder.feed(manager, [P0])
    return manager.commit(2)


@pytest.mark.usefixtures("streams")
def test_restart_on_the_same_host_reuses_the_local_copy(harness: AdjunctHarness, feeder: BatchFeeder,
                                                        work_dir: Path) -> None:
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    entry = _two_batches(harness, feeder, manager)
    manager.close()
    again = harness.manager("Partition 0", _config(harness), work_dir / "host-a", entry=entry)
    assert again.status()["customers"]["recovery"] == RecoveryAction.CONTINUE_LOCAL.value
    view = again.get_store("customers")
    assert view.get("c0") is None and view.get("c1") == {"i": "one"} and view.get("c49") == {"i": 49}
    again.close()


@pytest.mark.usefixtures("streams")
def test_copy_ahead_of_the_checkpoint_is_not_reused(harness: AdjunctHarness, feeder: BatchFeeder,
                                                    work_dir: Path) -> None:
    """A crash after the store commit of batch 3 but before its task checkpoint: restart from the
    checkpoint of batch 2 must not keep batch 3's data (validity judged by the checkpoint)."""
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    entry2 = _two_batches(harness, feeder, manager)
    harness.write("customers", 0, [("c2", {"i": "uncommitted"})])
    feeder.feed(manager, [P0])
    manager.commit(3)  # the runtime crashed before writing this entry
    manager.close()
    again = harness.manager("Partition 0", _config(harness), work_dir / "host-a", entry=entry2)
    assert again.status()["customers"]["recovery"] == RecoveryAction.RESTORE_SNAPSHOT.value
    assert again.get_store("customers").get("c2") == {"i": 2}
    # The replay of batch 3 applies the message again.
    replay = BatchFeeder(harness)
    replay.next[P0] = entry2["stores"]["customers"]["offsets"][str(P0)]
    replay.feed(again, [P0])
    assert again.get_store("customers").get("c2") == {"i": "uncommitted"}
    again.close()


def _new_host_restore(harness: AdjunctHarness, feeder: BatchFeeder, work_dir: Path,
                      blob_store: BlobStoreManager) -> None:
    config = _config(harness)
    manager = harness.manager("Partition 0", config, work_dir / "host-a", blob_store)
    entry = _two_batches(harness, feeder, manager)
    manager.close()
    shutil.rmtree(work_dir / "host-a")  # the host is gone

    moved = harness.manager("Partition 0", config, work_dir / "host-b", blob_store, entry=entry)
    assert moved.status()["customers"]["recovery"] == RecoveryAction.RESTORE_SNAPSHOT.value
    # Restored from the blob store, not re-read: nothing needs catching up, and the data is there.
    until = {P0: harness.upcoming("customers")[0]}
    assert moved.catch_up(harness.reader(), until) == 0
    view = moved.get_store("customers")
    assert view.get("c0") is None and view.get("c1") == {"i": "one"} and len(list(view.all())) == 49
    moved.commit(3)
    moved.close()


@pytest.mark.usefixtures("streams")
def test_new_host_restores_from_the_local_blob_store(harness: AdjunctHarness, feeder: BatchFeeder,
                                                     work_dir: Path, local_blob_store: BlobStoreManager) -> None:
    _new_host_restore(harness, feeder, work_dir, local_blob_store)


@pytest.mark.azurite
@pytest.mark.usefixtures("streams")
def test_new_host_restores_from_azure_blob_storage(harness: AdjunctHarness, feeder: BatchFeeder, work_dir: Path,
                                                   azurite: AzuriteProcess, unique_name: str) -> None:
    with AzureBlobStoreManager(unique_name, {"azure.storage.connect": azurite.connection_string}) as blob_store:
        _new_host_restore(harness, feeder, work_dir, blob_store)


@pytest.mark.usefixtures("streams")
def test_no_backup_lost_copy_forces_bootstrap_and_catch_up_rereads(harness: AdjunctHarness, feeder: BatchFeeder,
                                                                   work_dir: Path) -> None:
    """Seed table, bootstrap stream, no store found, no snapshot: re-create and read from the oldest."""
    config = _config(harness, **{"stores.customers.backup.factories": "",
                                 "systems.d.streams.customers.samza.bootstrap": "true"})
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    entry = _two_batches(harness, feeder, manager)
    assert entry["stores"]["customers"]["versions"] == {"0": None}
    manager.close()
    shutil.rmtree(work_dir / "host-a")
    again = harness.manager("Partition 0", config, work_dir / "host-b", entry=entry)
    assert again.status()["customers"]["recovery"] == RecoveryAction.CREATE_BOOTSTRAP.value
    assert again.get_store("customers").get("c5") is None
    applied = again.catch_up(harness.reader(), {P0: harness.upcoming("customers")[0]})
    assert applied == 52
    view = again.get_store("customers")
    assert view.get("c0") is None and view.get("c1") == {"i": "one"} and view.get("c5") == {"i": 5}
    again.close()


@pytest.mark.usefixtures("streams")
def test_no_backup_not_bootstrap_continues_from_last_offset(harness: AdjunctHarness, feeder: BatchFeeder,
                                                            work_dir: Path) -> None:
    config = _config(harness, **{"stores.customers.backup.factories": ""})
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    entry = _two_batches(harness, feeder, manager)
    manager.close()
    shutil.rmtree(work_dir / "host-a")
    again = harness.manager("Partition 0", config, work_dir / "host-b", entry=entry)
    assert again.status()["customers"]["recovery"] == RecoveryAction.CREATE_CONTINUE.value
    assert again.catch_up(harness.reader(), {P0: harness.upcoming("customers")[0]}) == 0
    harness.write("customers", 0, [("c7", {"i": "new"})])
    feeder.feed(again, [P0])
    assert dict(again.get_store("customers").all()) == {"c7": {"i": "new"}}
    again.close()


@pytest.mark.usefixtures("streams")
def test_memory_store_with_reset_offset_rebuilds_from_oldest(harness: AdjunctHarness, feeder: BatchFeeder,
                                                             work_dir: Path) -> None:
    config = _config(harness, **{"stores.customers.factory": "memory", "stores.customers.backup.factories": "",
                                 "systems.d.streams.customers.samza.reset.offset": "true"})
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    entry = _two_batches(harness, feeder, manager)
    manager.close()
    again = harness.manager("Partition 0", config, work_dir / "host-a", entry=entry)
    assert again.status()["customers"]["recovery"] == RecoveryAction.CREATE_BOOTSTRAP.value
    assert again.catch_up(harness.reader(), {P0: harness.upcoming("customers")[0]}) == 52
    assert again.get_store("customers").get("c49") == {"i": 49}
    again.close()


@pytest.mark.usefixtures("streams")
def test_commit_releases_the_store_for_another_worker_process(harness: AdjunctHarness, feeder: BatchFeeder,
                                                              work_dir: Path) -> None:
    """Spark may run the task's next batch in another Python worker: after commit the RocksDB lock
    is free, and the other worker continues from the local copy."""
    first = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    entry = _two_batches(harness, feeder, first)  # ``first`` stays alive, as a cached instance would
    second = harness.manager("Partition 0", _config(harness), work_dir / "host-a", entry=entry)
    assert second.status()["customers"]["recovery"] == RecoveryAction.CONTINUE_LOCAL.value
    harness.write("customers", 0, [("c3", {"i": "three"})])
    feeder.feed(second, [P0])
    assert second.get_store("customers").get("c3") == {"i": "three"}
    second.commit(3)
    second.close()
    first.close()


@pytest.mark.usefixtures("streams")
def test_restore_to_the_state_already_held_keeps_a_memory_store(harness: AdjunctHarness, feeder: BatchFeeder,
                                                                work_dir: Path) -> None:
    """The runtime may call restore before every batch: a memory store must keep its data then, and
    still be rebuilt when the entry is not the state it holds (a failed batch)."""
    config = _config(harness, **{"stores.customers.factory": "memory", "stores.customers.backup.factories": ""})
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    entry = _two_batches(harness, feeder, manager)
    manager.restore(entry)
    assert manager.get_store("customers").get("c7") == {"i": 7}
    harness.write("customers", 0, [("c8", {"i": "failed batch"})])
    feeder.feed(manager, [P0])
    manager.restore(entry)  # the batch failed: back to the committed entry
    assert manager.status()["customers"]["recovery"] == RecoveryAction.CREATE_CONTINUE.value
    assert manager.get_store("customers").get("c7") is None  # memory data is gone (seed: not persistent)
    manager.close()


@pytest.mark.usefixtures("streams")
def test_a_closed_manager_can_be_restored_and_reused(harness: AdjunctHarness, feeder: BatchFeeder,
                                                     work_dir: Path) -> None:
    """The runtime closes the manager after a failed batch and restores it for the next one."""
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    entry = _two_batches(harness, feeder, manager)
    manager.close()
    manager.restore(entry)
    harness.write("customers", 0, [("c9", {"i": "nine"})])
    feeder.feed(manager, [P0])
    entry3 = manager.commit(3)
    assert entry3["stores"]["customers"]["versions"]["0"] != entry["stores"]["customers"]["versions"]["0"]
    assert manager.get_store("customers").get("c9") == {"i": "nine"}
    manager.close()


@pytest.mark.usefixtures("streams")
def test_committed_snapshot_outlives_the_ttl_while_the_job_is_stopped(harness: AdjunctHarness, feeder: BatchFeeder,
                                                                      work_dir: Path,
                                                                      local_blob_store: BlobStoreManager) -> None:
    from sparza.blobstore import collect_garbage, system_clock_ms

    manager = harness.manager("Partition 0", _config(harness), work_dir / "host-a")
    harness.write("customers", 0, [("c1", {"name": "ann"}), ("c2", {"name": "bob"})])
    feeder.feed(manager, [P0])
    entry = manager.commit(1)
    manager.committed(1)  # what the runtime calls once the task checkpoint holding ``entry`` is written
    manager.close()
    # Stopped longer than blob.store.ttl.days while the daily gc runs, then a new host.
    collect_garbage(local_blob_store, now_ms=system_clock_ms() + 31 * 86_400_000)
    shutil.rmtree(work_dir / "host-a")
    moved = harness.manager("Partition 0", _config(harness), work_dir / "host-b", entry=entry)
    assert moved.status()["customers"]["recovery"] == RecoveryAction.RESTORE_SNAPSHOT.value
    assert dict(moved.get_store("customers").all()) == {"c1": {"name": "ann"}, "c2": {"name": "bob"}}
    moved.close()
