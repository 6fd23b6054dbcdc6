"""The seed's backup and restore flows against real RocksDB and each blob store backend."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.state import helpers

from sparza.blobstore import BlobStoreManager, ManualClock, collect_garbage
from sparza.state.backup import (
    ChecksumMismatchError,
    SnapshotUnavailableError,
    StateBackup,
    StoreBackupManager,
    are_same_dir,
    crc32_file,
)

DAY_MS = 86_400_000


@pytest.fixture
def backup(blob_store: BlobStoreManager, clock: ManualClock) -> StateBackup:
    sb = StateBackup(blob_store, "job", "1", "Partition 0", threads=3, chunk_size=256 << 10, clock=clock)
    yield sb
    sb.close()


def _manager(backup: StateBackup, root: Path) -> StoreBackupManager:
    return StoreBackupManager(backup, "counts", root / "counts" / "Partition_0")


def _blob_ids(store: BlobStoreManager) -> dict[str, tuple[int | None, int | None]]:
    return {i.blob_id: (i.expires_at_ms, i.deleted_at_ms) for i in store.list_blobs()}


def _referenced(backup: StateBackup, index_id: str) -> set[str]:
    index = backup.read_index(index_id)
    return {b.blob_id for b in index.dir_index.present_blobs()} | {index_id}


def test_backup_of_a_new_store_then_restore_on_a_new_host(backup: StateBackup, blob_store: BlobStoreManager,
                                                           tmp_path: Path) -> None:
    mgr = _manager(backup, tmp_path / "host1")
    store = helpers.open_rocks(mgr.store_dir)
    data = helpers.fill(store, 0, 3000)
    index_id = mgr.commit(store, "1", None)
    store.close()
    index = backup.read_index(index_id)
    assert index.metadata.checkpoint_id == "1" and index.metadata.store_name == "counts"
    assert index.metadata.task_name == "Partition 0" and index.prev_snapshot_index_blob_id is None
    names = {f.file_name for f in index.dir_index.files_present}
    assert "CURRENT" in names and any(n.endswith(".sst") for n in names)
    # Before cleanup every new blob carries a TTL; after it, every referenced blob is permanent.
    assert all(exp is not None for exp, _ in _blob_ids(blob_store).values())
    mgr.cleanup(index_id, "1")
    states = _blob_ids(blob_store)
    assert all(states[b] == (None, None) for b in _referenced(backup, index_id))

    new_host = _manager(backup, tmp_path / "host2")  # empty dir: everything is downloaded
    result = new_host.restore(index_id)
    assert not result.reused_local and result.files == len(names) and result.index_blob_id == index_id
    assert helpers.contents(new_host.store_dir) == data
    assert are_same_dir(new_host.checkpoint_dir("1"), index.dir_index, compare_immutable_checksums=True)
    reopened = helpers.open_rocks(new_host.store_dir)  # the restored store is writable
    reopened.put(b"new", b"v")
    reopened.close()


def test_incremental_backup_and_restore_after_puts_deletes_and_compaction(
        backup: StateBackup, blob_store: BlobStoreManager, tmp_path: Path, clock: ManualClock) -> None:
    mgr = _manager(backup, tmp_path / "host1")
    store = helpers.open_rocks(mgr.store_dir)
    expected = helpers.fill(store, 0, 4000)
    first = mgr.commit(store, "1", None)
    mgr.cleanup(first, "1")
    first_files = {f.file_name: f for f in backup.read_index(first).dir_index.files_present}

    # Batch 2: a few puts and deletes -> only new SSTs and changed metadata files are uploaded.
    expected.update(helpers.fill(store, 4000, 100, seed=2))
    store.delete_all([b"k%08d" % i for i in range(10)])
    for i in range(10):
        expected.pop(b"k%08d" % i)
    uploaded_before = backup.backup_metrics.bytes_uploaded.count
    second = mgr.commit(store, "2", first)
    second_index = backup.read_index(second)
    assert second_index.prev_snapshot_index_blob_id == first
    retained = [f for f in second_index.dir_index.files_present if f.file_name in first_files
                and f.blobs == first_files[f.file_name].blobs]
    assert any(f.file_name.endswith(".sst") for f in retained)  # old SSTs are not uploaded again
    assert backup.backup_metrics.bytes_uploaded.count - uploaded_before < sum(f.size for f in first_files.values())
    mgr.cleanup(second, "2")
    assert [p.name for p in mgr.local_checkpoint_dirs()] == ["Partition_0-2"]  # older checkpoint dirs deleted

    # Batch 3: a full compaction rewrites every SST: the old ones are listed as removed.
    store.compact()
    third = mgr.commit(store, "3", second)
    third_index = backup.read_index(third)
    removed = {f.file_name for f in third_index.dir_index.files_removed}
    assert any(n.endswith(".sst") for n in removed)
    result = mgr.cleanup(third, "3")
    assert result.deleted >= len(removed)
    store.close()

    states = _blob_ids(blob_store)
    referenced = _referenced(backup, third)
    assert all(states[b] == (None, None) for b in referenced)
    # Everything else is a tombstone (removed files, previous indexes): gc purges them, nothing else.
    assert all(states[b][1] is not None for b in set(states) - referenced)
    clock.advance(days=31)
    collect_garbage(blob_store, clock=clock)
    assert set(_blob_ids(blob_store)) == referenced

    new_host = _manager(backup, tmp_path / "host2")
    new_host.restore(third)
    assert helpers.contents(new_host.store_dir) == expected


def test_restore_reuses_a_matching_local_checkpoint(backup: StateBackup, blob_store: BlobStoreManager,
                                                    tmp_path: Path) -> None:
    mgr = _manager(backup, tmp_path)
    store = helpers.open_rocks(mgr.store_dir)
    data = helpers.fill(store, 0, 2000)
    index_id = mgr.commit(store, "7", None)
    mgr.cleanup(index_id, "7")
    store.put(b"uncommitted", b"x")  # the live store moved on after the checkpoint
    store.close()

    result = mgr.restore(index_id)
    assert result.reused_local and result.files == 0
    assert helpers.contents(mgr.store_dir) == data  # the store dir always restarts from the snapshot
    assert backup.restore_metrics.local_reuses.count == 1

    # A checkpoint dir that differs from the snapshot is not trusted: full restore into it.
    cp = mgr.checkpoint_dir("7")
    (cp / "CURRENT").write_text("MANIFEST-999999\n")
    result = mgr.restore(index_id)
    assert not result.reused_local and result.files > 0
    assert helpers.contents(mgr.store_dir) == data
    assert (cp / "CURRENT").read_text() != "MANIFEST-999999\n"


def test_restore_of_empty_files_nested_and_empty_dirs(backup: StateBackup, tmp_path: Path) -> None:
    src = tmp_path / "cp-1"
    (src / "a" / "b" / "c").mkdir(parents=True)
    (src / "empty-dir" / "empty-sub").mkdir(parents=True)
    (src / "empty-file").write_bytes(b"")
    (src / "a" / "file").write_bytes(b"1" * 10)
    (src / "a" / "b" / "c" / "deep").write_bytes(b"deep")
    (src / "a" / "b" / "c" / "deep-empty").write_bytes(b"")
    index_id = backup.upload("files", src, None, checkpoint_id="1")
    dest = tmp_path / "restored"
    backup.restore(index_id, dest)
    got = sorted(p.relative_to(dest).as_posix() + ("/" if p.is_dir() else "") for p in dest.rglob("*")
                 if p.name != "SNAPSHOT-INDEX-ID")  # the marker naming the snapshot the dir holds
    assert got == ["a/", "a/b/", "a/b/c/", "a/b/c/deep", "a/b/c/deep-empty", "a/file", "empty-dir/",
                   "empty-dir/empty-sub/", "empty-file"]
    assert (dest / "a" / "b" / "c" / "deep").read_bytes() == b"deep"
    assert (dest / "empty-file").stat().st_size == 0


def test_multi_blob_files_are_restored_in_order(backup: StateBackup, tmp_path: Path) -> None:
    src = tmp_path / "cp-1"
    src.mkdir()
    big = bytes(i % 251 for i in range(256 << 10)) * 3 + b"tail"  # 3 full chunks and a short one
    (src / "big.sst").write_bytes(big)
    index_id = backup.upload("files", src, None)
    blobs = backup.read_index(index_id).dir_index.files_present[0].blobs
    assert [b.offset for b in blobs] == [0, 256 << 10, 512 << 10, 768 << 10]
    dest = tmp_path / "restored"
    backup.restore(index_id, dest)
    assert (dest / "big.sst").read_bytes() == big
    assert crc32_file(dest / "big.sst") == backup.read_index(index_id).dir_index.files_present[0].checksum


def test_missing_index_and_file_blobs(backup: StateBackup, blob_store: BlobStoreManager, tmp_path: Path,
                                      clock: ManualClock) -> None:
    src = tmp_path / "cp-1"
    src.mkdir()
    (src / "f").write_bytes(b"content")
    index_id = backup.upload("files", src, None)
    with pytest.raises(SnapshotUnavailableError, match="snapshot index"):
        backup.restore("job-1/Partition_0/files/snapshot-index.nope", tmp_path / "x")
    file_blob = backup.read_index(index_id).dir_index.files_present[0].blobs[0].blob_id
    blob_store.purge(file_blob)  # gone for good: not even get_deleted finds it
    with pytest.raises(SnapshotUnavailableError, match="file blob"):
        backup.restore(index_id, tmp_path / "x")
    assert not (tmp_path / "x").exists()  # nothing half-restored was swapped in
    verify = backup.verify(index_id)
    assert not verify.ok and "f" in verify.problems[0]


def test_checksum_mismatch_is_detected(backup: StateBackup, blob_store: BlobStoreManager, tmp_path: Path) -> None:
    src = tmp_path / "cp-1"
    src.mkdir()
    (src / "f").write_bytes(b"content")
    index_id = backup.upload("files", src, None)
    index = backup.read_index(index_id)
    # Corrupt the stored bytes behind the blob store's back (same length, different content).
    blob_id = index.dir_index.files_present[0].blobs[0].blob_id
    from sparza.blobstore import LocalBlobStoreManager

    if isinstance(blob_store, LocalBlobStoreManager):
        (blob_store.root / blob_id).write_bytes(b"CONTENT")
    else:
        import io

        blob_store._client.upload_blob(blob_id, io.BytesIO(b"CONTENT"), overwrite=True)
    dest = tmp_path / "restored"
    dest.mkdir()
    (dest / "old").write_text("previous store")
    with pytest.raises(ChecksumMismatchError) as err:
        backup.restore(index_id, dest)
    assert err.value.path == "f" and err.value.expected_crc == index.dir_index.files_present[0].checksum
    assert (dest / "old").read_text() == "previous store"  # the old dir is untouched
    assert not backup.verify(index_id).ok


def test_deleted_blobs_are_recovered_and_a_fresh_snapshot_uploaded(
        backup: StateBackup, blob_store: BlobStoreManager, tmp_path: Path, clock: ManualClock) -> None:
    mgr = _manager(backup, tmp_path / "host1")
    store = helpers.open_rocks(mgr.store_dir)
    data = helpers.fill(store, 0, 1500)
    index_id = mgr.commit(store, "4", None)
    mgr.cleanup(index_id, "4")
    store.close()
    # SAMZA-2787: something deleted the committed snapshot's blobs (index and one SST).
    index = backup.read_index(index_id)
    sst = next(f for f in index.dir_index.files_present if f.file_name.endswith(".sst"))
    from sparza.blobstore import Metadata

    blob_store.delete(sst.blobs[0].blob_id, Metadata("x"))
    blob_store.delete(index_id, Metadata("snapshot-index"))

    fresh_backup = StateBackup(blob_store, "job", "1", "Partition 0", clock=clock)  # a new process: no cache
    try:
        host2 = StoreBackupManager(fresh_backup, "counts", tmp_path / "host2" / "counts" / "Partition_0")
        result = host2.restore(index_id)
        assert result.recovered and result.index_blob_id != index_id and result.checkpoint_id == "4"
        assert helpers.contents(host2.store_dir) == data
        # The runtime records the new id, then cleans it up: the old snapshot goes away entirely.
        host2.cleanup(result.index_blob_id, "4")
        clock.advance(days=2)
        collect_garbage(blob_store, clock=clock)
        assert set(_blob_ids(blob_store)) == _referenced(fresh_backup, result.index_blob_id)
        host3 = StoreBackupManager(fresh_backup, "counts", tmp_path / "host3" / "counts" / "Partition_0")
        assert not host3.restore(result.index_blob_id).recovered
        assert helpers.contents(host3.store_dir) == data
    finally:
        fresh_backup.close()


def test_verify_a_good_snapshot(backup: StateBackup, tmp_path: Path) -> None:
    src = tmp_path / "cp-1"
    (src / "sub").mkdir(parents=True)
    (src / "a").write_bytes(b"a" * 1000)
    (src / "sub" / "b").write_bytes(b"b")
    result = backup.verify(backup.upload("files", src, None))
    assert result.ok and result.files == 2 and result.bytes == 1001


def test_restore_deletes_store_dir_content_not_in_snapshot(backup: StateBackup, tmp_path: Path) -> None:
    src = tmp_path / "cp-1"
    src.mkdir()
    (src / "f").write_bytes(b"1")
    index_id = backup.upload("files", src, None)
    dest = tmp_path / "store"
    (dest / "stale-dir").mkdir(parents=True)
    (dest / "stale").write_bytes(b"old")
    backup.restore(index_id, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["SNAPSHOT-INDEX-ID", "f"]
    assert (dest / "SNAPSHOT-INDEX-ID").read_text() == index_id
    shutil.rmtree(dest)


def test_metrics_count_what_was_uploaded_and_restored(backup: StateBackup, tmp_path: Path) -> None:
    src = tmp_path / "cp-1"
    src.mkdir()
    (src / "a.sst").write_bytes(b"a" * 1000)
    (src / "CURRENT").write_bytes(b"c" * 10)
    first = backup.upload("files", src, None)
    (src / "b.sst").write_bytes(b"b" * 500)
    (src / "CURRENT").write_bytes(b"d" * 10)  # mutable file changed: uploaded again
    second = backup.upload("files", src, first)
    backup.cleanup(second)
    snap = backup.registry.snapshot()
    up = snap["BlobStoreBackupManagerMetrics"]
    assert up["files-uploaded"] == 4 and up["bytes-uploaded"] == 1000 + 10 + 500 + 10
    assert up["files-to-retain"] == 1 and up["bytes-to-retain"] == 1000
    assert up["files-removed"] == 1 and up["blobs-deleted"] == 2  # old CURRENT + first index
    assert up["files-to-upload"] == 4
    assert up["upload-ms"]["count"] == 2 and up["files-dir-diff-ms"]["count"] == 2
    backup.restore(second, tmp_path / "restored")
    down = backup.registry.snapshot()["BlobStoreRestoreManagerMetrics"]
    assert down["files-restored"] == 3 and down["bytes-restored"] == 1510 and down["files-to-restore"] == 3


def test_restore_with_a_progress_bar(backup: StateBackup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    src = tmp_path / "cp-1"
    src.mkdir()
    for i in range(12):
        (src / f"{i:06d}.sst").write_bytes(bytes([i]) * 3000)
    index_id = backup.upload("files", src, None)
    backup.progress = True
    result = backup.restore(index_id, tmp_path / "restored")
    assert result.files == 12 and result.bytes == 36000
    assert "restoring files" in capsys.readouterr().err


def test_delete_snapshot_of_a_store_removed_from_config(backup: StateBackup, blob_store: BlobStoreManager,
                                                       tmp_path: Path, clock: ManualClock) -> None:
    src = tmp_path / "cp-1"
    src.mkdir()
    (src / "a.sst").write_bytes(b"a" * 100)
    first = backup.upload("old-store", src, None)
    backup.cleanup(first)
    (src / "b.sst").write_bytes(b"b" * 100)
    second = backup.upload("old-store", src, first)
    backup.cleanup(second)
    assert backup.delete_snapshot(second) == 3  # a.sst, b.sst and the index
    assert backup.delete_snapshot(second) == 0  # idempotent
    clock.advance(days=2)
    collect_garbage(blob_store, clock=clock)
    assert list(blob_store.list_blobs()) == []


def test_state_backup_from_config(blob_store: BlobStoreManager, tmp_path: Path) -> None:
    from sparza.errors import ConfigError

    with StateBackup.from_config(blob_store, {"job.name": "wc", "job.id": "2", "blob.store.file.chunk.size": "1MB",
                                              "blob.store.transfer.threads": "2"}, "Partition 1") as backup:
        src = tmp_path / "cp-9"
        src.mkdir()
        (src / "big.sst").write_bytes(b"x" * ((1 << 20) + 1))
        index = backup.read_index(backup.upload("s", src))
        assert (index.metadata.job_name, index.metadata.job_id, index.metadata.task_name) == ("wc", "2", "Partition 1")
        assert index.metadata.checkpoint_id == "9" and len(index.dir_index.files_present[0].blobs) == 2
    with pytest.raises(ConfigError, match="blob.store.transfer.threads"):
        StateBackup.from_config(blob_store, {"blob.store.transfer.threads": "0"}, "t")


def test_cleanup_deletes_blobs_of_removed_sub_dirs(backup: StateBackup, blob_store: BlobStoreManager,
                                                   tmp_path: Path) -> None:
    src = tmp_path / "cp-1"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "keep").write_bytes(b"k")
    (src / "sub" / "x").write_bytes(b"x")
    (src / "sub" / "deeper" / "y").write_bytes(b"y")
    first = backup.upload("s", src, None)
    backup.cleanup(first)
    sub_blobs = {b.blob_id for b in backup.read_index(first).dir_index.sub_dir("sub").present_blobs()}
    shutil.rmtree(src / "sub")
    second = backup.upload("s", src, first)
    assert [d.dir_name for d in backup.read_index(second).dir_index.sub_dirs_removed] == ["sub"]
    backup.cleanup(second)
    states = _blob_ids(blob_store)
    assert len(sub_blobs) == 2 and all(states[b][1] is not None for b in sub_blobs)  # tombstoned
    assert states[first][1] is not None


def test_several_stores_of_one_task(backup: StateBackup, tmp_path: Path) -> None:
    managers = [StoreBackupManager(backup, name, tmp_path / name / "Partition_0") for name in ("a", "b")]
    expected = {}
    ids = {}
    for i, mgr in enumerate(managers):
        store = helpers.open_rocks(mgr.store_dir)
        expected[mgr.store_name] = helpers.fill(store, i * 1000, 500, seed=i)
        ids[mgr.store_name] = mgr.commit(store, "1", None)
        store.close()
    for mgr in managers:
        mgr.cleanup(ids[mgr.store_name], "1")
        shutil.rmtree(mgr.store_dir.parent)  # host lost
    for mgr in managers:
        mgr.restore(ids[mgr.store_name])
        assert helpers.contents(mgr.store_dir) == expected[mgr.store_name]
        assert backup.read_index(ids[mgr.store_name]).metadata.store_name == mgr.store_name


def test_a_checkpoint_dir_of_another_attempt_is_not_reused(backup: StateBackup, tmp_path: Path) -> None:
    from sparza.state.backup import SNAPSHOT_MARKER, read_snapshot_marker

    cp = tmp_path / "store-5"
    cp.mkdir()
    (cp / "000001.sst").write_bytes(b"attempt A")
    attempt_a = backup.upload("s", cp)
    assert read_snapshot_marker(cp) == attempt_a
    # Another attempt of checkpoint 5 (elsewhere) committed a snapshot with the same names and sizes.
    other = tmp_path / "elsewhere" / "store-5"
    other.mkdir(parents=True)
    (other / "000001.sst").write_bytes(b"attempt B")
    attempt_b = backup.upload("s", other)
    result = backup.restore(attempt_b, tmp_path / "store", cp)
    assert not result.reused_local  # same names and sizes, but the marker says it is attempt A's
    assert (tmp_path / "store" / "000001.sst").read_bytes() == b"attempt B"
    assert (cp / SNAPSHOT_MARKER).read_text() == attempt_b
    assert backup.restore(attempt_b, tmp_path / "store", cp).reused_local


def test_a_long_life_of_commits_keeps_a_bounded_index_cache(backup: StateBackup, blob_store: BlobStoreManager,
                                                            tmp_path: Path) -> None:
    """Every commit writes a new snapshot index; a task's StateBackup lives as long as its worker, so the cache
    of indexes must not keep them all (bench/endurance.py: ~0.5 MiB a minute). Commits stay incremental, old
    indexes are still readable from the blob store, and the last snapshot restores exactly (oracle: the puts)."""
    from sparza.state.backup.backup import INDEX_CACHE_ENTRIES

    mgr = _manager(backup, tmp_path / "host1")
    store = helpers.open_rocks(mgr.store_dir)
    expected = helpers.fill(store, 0, 3000)
    ids: list[str] = []
    prev = None
    full = 0
    for n in range(1, 3 * INDEX_CACHE_ENTRIES + 2):
        expected.update(helpers.fill(store, 3000 + n * 7, 7, seed=n))
        before = backup.backup_metrics.bytes_uploaded.count
        prev = mgr.commit(store, str(n), prev)
        mgr.cleanup(prev, str(n))
        ids.append(prev)
        sent = backup.backup_metrics.bytes_uploaded.count - before
        if n == 1:
            full = sent
        else:  # incremental: each commit sends what changed, far less than the whole store
            assert sent < full / 2
        assert len(backup._index_cache) <= INDEX_CACHE_ENTRIES
    store.close()
    first = backup.read_index(ids[0], get_deleted=True)      # long evicted: read from the blob store again
    assert first.metadata.checkpoint_id == "1"
    new_host = _manager(backup, tmp_path / "host2")
    new_host.restore(ids[-1])
    assert helpers.contents(new_host.store_dir) == expected
