"""Read-only views over typed data, a replaced store manager, and the host-local snapshot cache's locks."""

from __future__ import annotations

from pathlib import Path

from adjunct_harness import AdjunctHarness, BatchFeeder
from adjunct_helpers import CountingManagerFactory

from sparza.blobstore import BlobStoreManager
from sparza.config import Config
from sparza.state.adjunct import ContainerSnapshotCache, SnapshotStore
from sparza.state.kv import RocksDbStore
from sparza.streams import SystemStreamPartition

P0 = SystemStreamPartition("d", "customers", 0)


def _config(harness: AdjunctHarness, **extra: str) -> Config:
    return harness.config(**{"task.inputs": "d.orders,d.customers", "stores.customers.adstore.input": "d.customers",
                             "stores.customers.key.serde": "string", "stores.customers.msg.serde": "json", **extra})


def test_view_reads_typed_values_with_range_and_get_all(harness: AdjunctHarness, feeder: BatchFeeder,
                                                        work_dir: Path) -> None:
    harness.create("customers", 1)
    harness.create("orders", 1)
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host")
    harness.write("customers", 0, [(f"k{i}", {"i": i}) for i in range(10)])
    feeder.feed(manager, [P0])
    view = manager.get_store("customers")
    assert view.get_all(["k1", "k3", "zz"]) == {"k1": {"i": 1}, "k3": {"i": 3}}
    assert [k for k, _ in view.range("k2", "k5")] == ["k2", "k3", "k4"]
    assert "k9" in view and "k10" not in view
    manager.close()


def test_manager_factory_replaces_the_built_in_manager(harness: AdjunctHarness, feeder: BatchFeeder,
                                                       work_dir: Path) -> None:
    harness.create("customers", 1)
    harness.create("orders", 1)
    CountingManagerFactory.processed.clear()
    config = _config(harness, **{"stores.customers.adstore.manager.factory": "adjunct_helpers.CountingManagerFactory"})
    manager = harness.manager("Partition 0", config, work_dir / "host")
    harness.write("customers", 0, [("a", {"x": 1}), ("b", {"x": 2})])
    feeder.feed(manager, [P0])
    assert CountingManagerFactory.processed == {"customers": 2}
    assert manager.get_store("customers").get("b") == {"x": 2}
    manager.close()


def _snapshot(blob_store: BlobStoreManager, work_dir: Path, name: str, value: bytes) -> str:
    store = RocksDbStore(work_dir / "src" / name)
    store.put(b"k", value)
    checkpoint = store.checkpoint(work_dir / "src" / f"{name}-cp")
    store.close()
    snapshots = SnapshotStore(blob_store, "adj", "1", "Partition 0")
    index = snapshots.upload("rates", checkpoint, None, name)
    snapshots.close()
    return index


def test_cache_keeps_a_snapshot_while_any_task_has_it_open(work_dir: Path, local_blob_store: BlobStoreManager) -> None:
    s1 = _snapshot(local_blob_store, work_dir, "one", b"1")
    s2 = _snapshot(local_blob_store, work_dir, "two", b"2")
    snapshots = SnapshotStore(local_blob_store, "adj", "1", "Partition 0")
    config = Config({"stores.rates.factory": "rocksdb"})
    cache_a = ContainerSnapshotCache(work_dir / "container", config)  # two tasks of one host
    cache_b = ContainerSnapshotCache(work_dir / "container", config)
    lease_a = cache_a.acquire("rates", s1, snapshots)
    lease_b1 = cache_b.acquire("rates", s1, snapshots)
    assert cache_a.downloads + cache_b.downloads == 1
    lease_b1.release()
    lease_b2 = cache_b.acquire("rates", s2, snapshots)
    assert cache_b.collect("rates", keep={s2}) == []  # task A still reads s1
    assert lease_a.store.get(b"k") == b"1" and lease_b2.store.get(b"k") == b"2"
    lease_a.release()
    removed = cache_b.collect("rates", keep={s2})
    assert [p.name for p in removed] == [lease_a.path.name]
    assert not lease_a.path.exists() and lease_b2.path.exists()
    lease_b2.release()
    snapshots.close()
