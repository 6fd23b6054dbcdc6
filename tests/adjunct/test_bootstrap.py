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


class _MarkerAtTheEnd:
    """Real offsets and comparisons, but the newest offset of each partition is one that is never
    delivered, as a Kafka transaction's commit marker is (newest = upcoming - 1 = the marker)."""

    def __init__(self, real, hidden: dict[int, str]) -> None:
        self._real = real
        self._hidden = hidden

    def compare(self, system: str, a: str, b: str) -> int:
        return self._real.compare(system, a, b)

    def offset_key(self, system: str, offset: str):
        return self._real.offset_key(system, offset)

    def newest_offsets(self, stream):
        return dict(self._hidden)


def test_a_bootstrap_whose_newest_offset_is_never_delivered_completes_once_read_past_it(
        harness: AdjunctHarness, work_dir: Path) -> None:
    """Found with the Kafka demo: a CDC topic loaded in transactions ends on a commit marker, which no
    consumer ever sees, so "applied up to the newest offset" never became true and the store stayed
    "bootstrapping" for ever. The runtime now says how far each batch read (``read_through``)."""
    from sparza.state.adjunct import AdminStreamAccess, TaskAdjunctManager

    harness.create("customers", 1)
    harness.create("orders", 1)
    config = harness.config(**{"task.inputs": "d.orders,d.customers", "stores.customers.adstore.input": "d.customers",
                               "systems.d.streams.customers.samza.bootstrap": "true"})
    harness.write("customers", 0, [(f"c{i}", f"v{i}") for i in range(10)])
    delivered = harness.read(P0)[:-1]          # the last record plays the marker: never delivered
    marker = harness.read(P0)[-1].offset
    access = _MarkerAtTheEnd(AdminStreamAccess(config), {0: marker})
    for tell in (False, True):
        manager = TaskAdjunctManager("Partition 0", config, work_dir / f"host-{tell}", harness.blob_store, "adj", "1",
                                     access=access)
        manager.restore(None)
        for env in delivered:
            assert manager.on_envelope(env)
        if tell:
            manager.read_through({P0: harness.upcoming("customers")[0]})
        entry = manager.commit(1)
        assert entry["stores"]["customers"]["bootstrap"]["done"] is tell
        manager.close()
