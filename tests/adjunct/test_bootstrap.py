"""Bootstrap progress: checkpointed, so a restart mid-bootstrap resumes instead of starting over."""

from __future__ import annotations

import shutil
from pathlib import Path

from adjunct_harness import AdjunctHarness, BatchFeeder

from sparza.state.adjunct import RecoveryAction
from sparza.streams import SystemStreamPartition

P0 = SystemStreamPartition("d", "customers", 0)


def test_restart_mid_bootstrap_resumes_from_the_checkpointed_progress(harness: AdjunctHarness,
                                                                      feeder: BatchFeeder, work_dir: Path) -> None:
    harness.create("customers", 1)
    harness.create("orders", 1)
    config = harness.config(**{
        "task.inputs": "d.orders,d.customers",
        "stores.customers.adstore.input": "d.customers",
        "stores.customers.backup.factories": "blobstore",
        "systems.d.streams.customers.samza.bootstrap": "true",
    })
    for chunk in range(4):
        harness.write("customers", 0, [(f"c{chunk}-{i}", f"v{i}") for i in range(100)])

    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    feeder.feed(manager, [P0], limit=150)  # batch 1 reads part of the stream (task.max.batch.messages)
    entry = manager.commit(1)
    progress = entry["stores"]["customers"]["bootstrap"]
    assert progress["done"] is False and progress["targets"] == {str(P0): harness.read(P0)[-1].offset}
    assert not manager.bootstrap_complete()
    manager.close()
    shutil.rmtree(work_dir / "host-a")  # and the host dies

    resumed = harness.manager("Partition 0", config, work_dir / "host-b", entry=entry)
    assert resumed.status()["customers"]["recovery"] == RecoveryAction.RESTORE_SNAPSHOT.value
    assert len(list(resumed.get_store("customers").all())) == 150
    # The runtime resumes after the committed offset; only the remaining 250 are read.
    assert feeder.feed(resumed, [P0]) == 250
    entry2 = resumed.commit(2)
    assert entry2["stores"]["customers"]["bootstrap"]["done"] is True
    assert entry2["stores"]["customers"]["applied"] == 400
    assert resumed.bootstrap_complete()
    resumed.close()


def test_empty_bootstrap_stream_is_bootstrapped_at_once(harness: AdjunctHarness, work_dir: Path) -> None:
    harness.create("customers", 1)
    harness.create("orders", 1)
    config = harness.config(**{
        "task.inputs": "d.orders,d.customers",
        "stores.customers.adstore.input": "d.customers",
        "systems.d.streams.customers.samza.bootstrap": "true",
    })
    manager = harness.manager("Partition 0", config, work_dir / "host-a")
    assert manager.commit(1)["stores"]["customers"]["bootstrap"]["done"] is True
    manager.close()
