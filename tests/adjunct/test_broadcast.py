"""Broadcast adjunct stores: one builder, a published snapshot per batch, one copy per host."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path
from typing import Any

import pytest
from adjunct_harness import AdjunctHarness, BatchFeeder, read_broadcast_in_process

from sparza.blobstore import BlobStoreManager
from sparza.blobstore.azure import AzureBlobStoreManager
from sparza.config import Config
from sparza.devservers.storage import AzuriteProcess
from sparza.state.adjunct import RecoveryAction, TaskAdjunctManager, directory_size_bytes
from sparza.streams import SystemStreamPartition

RATES = [SystemStreamPartition("d", "rates", 0), SystemStreamPartition("d", "rates", 1)]
TASKS = [f"Partition {i}" for i in range(4)]


@pytest.fixture
def config(harness: AdjunctHarness) -> Config:
    harness.create("rates", 2)
    harness.create("orders", 4)
    return harness.config(**{
        "task.inputs": "d.orders",
        "task.broadcast.inputs": "d.rates#[0-1]",
        "stores.rates.adstore.input": "d.rates",
        "stores.rates.key.serde": "string",
        "stores.rates.msg.serde": "json",
    })


def _contents(manager: TaskAdjunctManager) -> dict[str, Any]:
    return dict(manager.get_store("rates").all())


def _batch(harness: AdjunctHarness, feeders: dict[str, BatchFeeder], managers: dict[str, TaskAdjunctManager],
           batch: int) -> dict[str, dict[str, Any]]:
    """One batch of every task: begin, feed the broadcast SSPs, look (what main messages would see), commit."""
    seen = {}
    for task, manager in managers.items():
        manager.begin_batch(batch)
        feeders[task].feed(manager, RATES)
        seen[task] = _contents(manager)
    for manager in managers.values():
        manager.commit(batch)
    return seen


def test_every_task_reads_the_snapshot_published_before_its_batch(harness: AdjunctHarness, work_dir: Path,
                                                                  config: Any) -> None:
    host = work_dir / "host-a"
    managers = {t: harness.manager(t, config, host) for t in TASKS}
    feeders = {t: BatchFeeder(harness) for t in TASKS}

    harness.write("rates", 0, [("usd", 1.0), ("eur", 0.9)])
    harness.write("rates", 1, [("gbp", 0.8)])
    seen1 = _batch(harness, feeders, managers, 1)
    assert all(s == {} for s in seen1.values())  # nothing published before batch 1, builder included

    harness.write("rates", 0, [("usd", 1.1), ("eur", None)])
    seen2 = _batch(harness, feeders, managers, 2)
    v1 = {"usd": 1.0, "eur": 0.9, "gbp": 0.8}
    assert all(s == v1 for s in seen2.values()), seen2  # batch 1's changes, in every task alike

    seen3 = _batch(harness, feeders, managers, 3)
    assert all(s == {"usd": 1.1, "gbp": 0.8} for s in seen3.values()), seen3
    assert managers["Partition 0"].status()["rates"]["builder"] is True
    assert managers["Partition 1"].status()["rates"]["builder"] is False
    assert managers["Partition 3"].status()["rates"]["reading"]["batch"] == 2

    # Four tasks on one host: one local copy of the snapshot, downloaded once.
    container = host / "_container" / "rates"
    snapshot_dirs = [p for p in container.iterdir() if p.is_dir()]
    assert len(snapshot_dirs) == 1, snapshot_dirs
    assert sum(m.container_cache.downloads for m in managers.values()) == 2  # the publications of batches 1, 2
    assert not (host / "rates" / "Partition_1").exists()  # readers keep no store of their own
    assert directory_size_bytes(container) > 0
    for manager in managers.values():
        manager.close()


def test_tasks_on_two_hosts_see_the_same_version(harness: AdjunctHarness, work_dir: Path, config: Any) -> None:
    managers = {t: harness.manager(t, config, work_dir / ("host-a" if i < 2 else "host-b"))
                for i, t in enumerate(TASKS)}
    feeders = {t: BatchFeeder(harness) for t in TASKS}
    for batch in range(1, 5):
        harness.write("rates", batch % 2, [("k", batch), (f"only{batch}", batch)])
        seen = _batch(harness, feeders, managers, batch)
        assert len({repr(sorted(s.items())) for s in seen.values()}) == 1, seen
    assert seen["Partition 3"] == {"k": 3, "only1": 1, "only2": 2, "only3": 3}
    for manager in managers.values():
        manager.close()


def test_builder_moves_to_a_new_host_and_restores_its_store(harness: AdjunctHarness, work_dir: Path,
                                                            config: Any) -> None:
    builder = harness.manager("Partition 0", config, work_dir / "host-a")
    reader = harness.manager("Partition 1", config, work_dir / "host-c")
    feeders = {"Partition 0": BatchFeeder(harness), "Partition 1": BatchFeeder(harness)}
    harness.write("rates", 0, [(f"k{i}", i) for i in range(20)])
    _batch(harness, feeders, {"Partition 0": builder, "Partition 1": reader}, 1)
    entry = builder.commit(2)
    reader.commit(2)
    builder.close()
    shutil.rmtree(work_dir / "host-a")

    moved = harness.manager("Partition 0", config, work_dir / "host-b", entry=entry)
    assert moved.status()["rates"]["recovery"] == RecoveryAction.RESTORE_SNAPSHOT.value
    harness.write("rates", 1, [("k0", 999)])
    feeders["Partition 0"].feed(moved, RATES)
    moved.commit(3)
    reader.begin_batch(4)
    moved.begin_batch(4)
    expected = {f"k{i}": i for i in range(20)} | {"k0": 999}
    assert _contents(reader) == expected and _contents(moved) == expected
    moved.close()
    reader.close()


def test_old_publications_and_snapshots_are_cleaned_up(harness: AdjunctHarness, work_dir: Path, config: Any,
                                                       local_blob_store: BlobStoreManager) -> None:
    builder = harness.manager("Partition 0", config, work_dir / "host-a")
    feeder = BatchFeeder(harness)
    for batch in range(1, 7):
        harness.write("rates", 0, [(f"k{batch}", batch)])
        builder.begin_batch(batch)
        feeder.feed(builder, RATES)
        assert _contents(builder) == {f"k{i}": i for i in range(1, batch)}
        builder.commit(batch)
    live = [b.blob_id for b in local_blob_store.list_blobs() if b.deleted_at_ms is None]
    publications = [b for b in live if "adjunct-publication" in b]
    indexes = [b for b in live if "snapshot-index" in b]
    assert len(publications) == 2  # the newest and the one readers of the current batch may use
    assert len(indexes) == 2
    builder.close()


def test_four_processes_on_one_host_download_one_copy(harness: AdjunctHarness, work_dir: Path, config: Any,
                                                      local_blob_store: BlobStoreManager) -> None:
    """Four executor processes open the broadcast store at the same moment: the lock file makes
    exactly one of them download the snapshot; all read the same data from the one copy."""
    builder = harness.manager("Partition 0", config, work_dir / "builder-host")
    harness.write("rates", 0, [(f"k{i}", i) for i in range(200)])
    BatchFeeder(harness).feed(builder, RATES)
    builder.commit(1)
    builder.close()

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    host = work_dir / "host-shared"
    procs = [ctx.Process(target=read_broadcast_in_process,
                         args=(dict(config), task, str(host), str(work_dir / "blobstore"), 2, barrier, results))
             for task in TASKS]
    for proc in procs:
        proc.start()
    try:
        got = [results.get(timeout=400) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=120)
            if proc.is_alive():
                proc.kill()
    assert all(proc.exitcode == 0 for proc in procs)
    expected = {f"k{i}": i for i in range(200)}
    assert all(contents == expected for _, contents, _ in got)
    assert sum(downloads for _, _, downloads in got) == 1
    assert len([p for p in (host / "_container" / "rates").iterdir() if p.is_dir()]) == 1


@pytest.mark.azurite
def test_broadcast_through_azure_blob_storage(harness: AdjunctHarness, work_dir: Path, config: Config,
                                              azurite: AzuriteProcess, unique_name: str) -> None:
    """Publications and snapshots in Azure (Azurite): a builder on one host, readers on another."""
    with AzureBlobStoreManager(unique_name, {"azure.storage.connect": azurite.connection_string}) as blob_store:
        managers = {t: harness.manager(t, config, work_dir / ("host-a" if t == "Partition 0" else "host-b"),
                                       blob_store) for t in TASKS[:3]}
        feeders = {t: BatchFeeder(harness) for t in managers}
        harness.write("rates", 0, [("usd", 1.0)])
        _batch(harness, feeders, managers, 1)
        harness.write("rates", 1, [("usd", 2.0), ("chf", 0.95)])
        seen2 = _batch(harness, feeders, managers, 2)
        seen3 = _batch(harness, feeders, managers, 3)
        assert all(s == {"usd": 1.0} for s in seen2.values()), seen2
        assert all(s == {"usd": 2.0, "chf": 0.95} for s in seen3.values()), seen3
        assert len([p for p in (work_dir / "host-b" / "_container" / "rates").iterdir() if p.is_dir()]) == 1
        for manager in managers.values():
            manager.close()


def test_a_closed_broadcast_manager_can_be_restored_and_reused(harness: AdjunctHarness, work_dir: Path,
                                                               config: Config) -> None:
    builder = harness.manager("Partition 0", config, work_dir / "host-a")
    feeder = BatchFeeder(harness)
    harness.write("rates", 0, [("usd", 1.0)])
    feeder.feed(builder, RATES)
    entry = builder.commit(1)
    builder.close()
    builder.restore(entry)
    builder.begin_batch(2)
    assert _contents(builder) == {"usd": 1.0}
    harness.write("rates", 1, [("chf", 0.9)])
    feeder.feed(builder, RATES)
    builder.commit(2)
    builder.begin_batch(3)
    assert _contents(builder) == {"usd": 1.0, "chf": 0.9}
    builder.close()


def test_deleted_publications_are_still_read_and_purged_ones_stop_a_task_that_read_them(
        harness: AdjunctHarness, work_dir: Path, config: Any, local_blob_store: BlobStoreManager) -> None:
    """Every publication blob tombstoned (an operator's
    mistake, SAMZA-2787) and the host's state lost: the readers must not find no publication and serve an
    empty store, so that a join drops every message without a word. A deleted publication is read anyway; a
    purged one stops a task that read it before instead of serving nothing."""
    from sparza.blobstore.api import Metadata
    from sparza.state.adjunct import BroadcastSnapshotError

    tasks = TASKS[:2]
    managers = {t: harness.manager(t, config, work_dir / "host-a") for t in tasks}
    feeders = {t: BatchFeeder(harness) for t in tasks}
    harness.write("rates", 0, [("usd", 1.0)])
    _batch(harness, feeders, managers, 1)
    entries = {}
    for task, manager in managers.items():                   # batch 2 reads batch 1's publication
        manager.begin_batch(2)
        assert _contents(manager) == {"usd": 1.0}
        entries[task] = manager.commit(2)
    for manager in managers.values():
        manager.close()
    publications = [i.blob_id for i in local_blob_store.list_blobs() if "adjunct-publication" in i.blob_id
                    and i.deleted_at_ms is None]
    assert publications
    for blob_id in publications:
        local_blob_store.delete(blob_id, Metadata(payload_path=blob_id))
    shutil.rmtree(work_dir / "host-a")                       # and the host's copies with them
    reader = harness.manager("Partition 1", config, work_dir / "host-b")
    reader.restore(entries["Partition 1"])
    reader.begin_batch(3)
    assert _contents(reader) == {"usd": 1.0}
    reader.close()
    for blob_id in publications:
        local_blob_store.purge(blob_id)
    reader = harness.manager("Partition 1", config, work_dir / "host-c")
    reader.restore(entries["Partition 1"])
    reader.begin_batch(3)
    with pytest.raises(BroadcastSnapshotError, match="that task 'Partition 1' read before is gone from the blob"):
        _contents(reader)
    reader.close()


def _publications(blob_store: BlobStoreManager) -> list[str]:
    return sorted(b.blob_id.rsplit("/", 1)[1].rsplit(".", 1)[0] for b in blob_store.list_blobs()
                  if "adjunct-publication" in b.blob_id and b.deleted_at_ms is None)


def test_a_fenced_builder_does_not_replace_what_a_newer_generation_published(
        harness: AdjunctHarness, work_dir: Path, config: Any, local_blob_store: BlobStoreManager) -> None:
    """Processor A (generation 1) pauses before its batch-1 commit; processor B (generation 2) takes the task
    over and commits batch 1; A wakes and commits (publishing before the checkpoint that fences it): B's
    publication stays, and every task reads B's snapshot."""
    feeder_a, feeder_b = BatchFeeder(harness), BatchFeeder(harness)
    a = harness.manager("Partition 0", config, work_dir / "host-a")
    b = harness.manager("Partition 0", config, work_dir / "host-b")
    harness.write("rates", 0, [("usd", 1.0)])
    feeder_a.feed(a, RATES)
    feeder_b.feed(b, RATES)
    b.commit(1, 2)
    a.commit(1, 1)
    assert _publications(local_blob_store) == ["000000000001.g2.json"]
    reader = harness.manager("Partition 1", config, work_dir / "host-c")
    reader.restore(None)
    reader.begin_batch(2)
    assert _contents(reader) == {"usd": 1.0}
    for manager in (a, b, reader):
        manager.close()


def test_a_new_generation_removes_what_a_fenced_builder_published(
        harness: AdjunctHarness, work_dir: Path, config: Any, local_blob_store: BlobStoreManager) -> None:
    """A (generation 1) published batches 1 and 2, then was fenced at batch 2's checkpoint: its batch-2
    snapshot is never committed and gc would purge it. B (generation 2) resumes from batch 1's checkpoint:
    its first publication removes A's, so no reader opens the uncommitted snapshot."""
    feeder = BatchFeeder(harness)
    a = harness.manager("Partition 0", config, work_dir / "host-a")
    harness.write("rates", 0, [("usd", 1.0)])
    feeder.feed(a, RATES)
    entry = a.commit(1, 1)                                     # committed
    harness.write("rates", 1, [("chf", 0.9)])
    a.begin_batch(2)
    feeder.feed(a, RATES)
    a.commit(3, 1)                                             # published, then fenced: never committed
    assert _publications(local_blob_store) == ["000000000001.g1.json", "000000000003.g1.json"]
    b = harness.manager("Partition 0", config, work_dir / "host-b", entry=entry)
    harness.write("rates", 0, [("gbp", 0.8)])
    b.begin_batch(2)
    BatchFeeder(harness).feed(b, RATES)
    b.commit(2, 2)
    assert _publications(local_blob_store) == ["000000000002.g2.json"]
    for manager in (a, b):
        manager.close()


class _LastOffsetNeverDelivered:
    """Real offsets and comparisons, but each partition's newest offset is one never delivered (as a Kafka
    transaction's commit marker): a bootstrap completes only once a batch reads past it."""

    def __init__(self, real: Any, hidden: dict[int, str]) -> None:
        self._real = real
        self._hidden = hidden

    def compare(self, system: str, a: str, b: str) -> int:
        return self._real.compare(system, a, b)

    def offset_key(self, system: str, offset: str) -> Any:
        return self._real.offset_key(system, offset)

    def newest_offsets(self, stream: Any) -> dict[int, str]:
        return dict(self._hidden)


def test_a_bootstrap_that_completes_in_a_batch_that_changes_nothing_is_published_bootstrapped(
        harness: AdjunctHarness, work_dir: Path, config: Any, local_blob_store: BlobStoreManager) -> None:
    """The builder applied every delivered message in batch 1 (published, not bootstrapped: the newest offset is a
    marker never delivered); batch 2 only reads past the marker. Nothing changed in the store, but the bootstrap
    completed: the builder publishes again, bootstrapped, or a container-mode job's tasks wait for ever (their main
    input waits for a bootstrapped publication). A restart of the builder does not publish a third time."""
    from sparza.state.adjunct import AdminStreamAccess, broadcast_bootstrap_published

    boot = config.with_overrides({"systems.d.streams.rates.samza.bootstrap": "true"})
    harness.write("rates", 0, [("usd", 1.0), ("eur", 0.9)])
    delivered = harness.read(RATES[0])[:-1]        # the last record plays the marker: never delivered
    marker = harness.read(RATES[0])[-1].offset
    access = _LastOffsetNeverDelivered(AdminStreamAccess(boot), {0: marker, 1: None})
    builder = TaskAdjunctManager("Partition 0", boot, work_dir / "host-a", local_blob_store, "adj", "1", access=access)
    builder.restore(None)
    builder.begin_batch(1)
    for envelope in delivered:
        assert builder.on_envelope(envelope)
    builder.commit(1)
    assert not broadcast_bootstrap_published(boot, RATES[0].system_stream, local_blob_store, "adj", "1")
    builder.begin_batch(2)
    builder.read_through({RATES[0]: harness.upcoming("rates")[0]})
    entry = builder.commit(2)
    assert entry["stores"]["rates"]["builder"]["bootstrap"]["done"] is True
    assert broadcast_bootstrap_published(boot, RATES[0].system_stream, local_blob_store, "adj", "1")
    assert _publications(local_blob_store) == ["000000000001.g0.json", "000000000002.g0.json"]
    builder.close()
    again = TaskAdjunctManager("Partition 0", boot, work_dir / "host-a", local_blob_store, "adj", "1", access=access)
    again.restore(entry)
    again.begin_batch(3)
    again.commit(3)
    assert _publications(local_blob_store) == ["000000000001.g0.json", "000000000002.g0.json"]
    again.close()
