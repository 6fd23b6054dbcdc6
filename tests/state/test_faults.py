"""Partial failures at every stage of the commit lifecycle, then a restart that recovers and a gc
(with time advanced) that leaves no garbage and deletes no referenced blob. The faults wrap the
real blob store of each backend; nothing is imitated."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.state import helpers

from sparza.blobstore import (
    BlobStoreManager,
    FaultInjectingBlobStoreManager,
    InjectedCrash,
    ManualClock,
    RetriableError,
    RetryingBlobStoreManager,
    RetryPolicy,
    collect_garbage,
)
from sparza.state.backup import StateBackup, StoreBackupManager

NO_WAIT = RetryPolicy(max_retries=5, delay_ms=0, jitter=0)


@dataclass
class Task:
    """A minimal task runtime: one store, a task checkpoint file, the per-batch lifecycle."""

    root: Path
    blob_store: BlobStoreManager
    clock: ManualClock
    crash_on_checkpoint_write: bool = False
    expected: dict[bytes, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.backup = StateBackup(self.blob_store, "job", "1", "Partition 0", threads=2, clock=self.clock)
        self.mgr = StoreBackupManager(self.backup, "counts", self.root / "counts" / "Partition_0")

    @property
    def checkpoint_file(self) -> Path:
        return self.root / "task-checkpoint.json"

    def committed(self) -> tuple[int, str | None]:
        if not self.checkpoint_file.exists():
            return 0, None
        data = json.loads(self.checkpoint_file.read_text())
        return data["batch"], data["counts"]

    def start(self) -> None:
        """What the runtime does at start: cleanup of the last commit (idempotent), then restore."""
        _, index_id = self.committed()
        if index_id is not None:
            self.mgr.cleanup(index_id)
            result = self.mgr.restore(index_id)
            assert result.index_blob_id == index_id

    def run_batch(self, batch: int, seed: int) -> None:
        last_batch, prev = self.committed()
        assert batch == last_batch + 1
        store = helpers.open_rocks(self.mgr.store_dir)
        try:
            writes = helpers.fill(store, seed * 500, 800, seed=seed)  # overlaps the previous batch's keys
            store.delete_all([b"k%08d" % (seed * 500 + i) for i in range(0, 800, 7)])
            store.compact()  # rewrites every SST: each snapshot removes files of the previous one
            new_id = self.mgr.commit(store, str(batch), prev)
        finally:
            store.close()
        if self.crash_on_checkpoint_write:
            self.crash_on_checkpoint_write = False
            raise InjectedCrash("crash before the task checkpoint is written")
        tmp = self.checkpoint_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"batch": batch, "counts": new_id}))
        tmp.replace(self.checkpoint_file)
        for i in range(0, 800, 7):
            writes.pop(b"k%08d" % (seed * 500 + i), None)
        self.pending = writes
        self.mgr.cleanup(new_id, str(batch))

    def close(self) -> None:
        self.backup.close()


def _expected_after(batches: int, tmp_path: Path) -> dict[bytes, bytes]:
    """The store content after ``batches`` batches, computed without any backup."""
    store = helpers.open_rocks(tmp_path / "reference")
    try:
        for b in range(1, batches + 1):
            helpers.fill(store, b * 500, 800, seed=b)
            store.delete_all([b"k%08d" % (b * 500 + i) for i in range(0, 800, 7)])
        return dict(store.all())
    finally:
        store.close()


def _assert_clean_after_gc(task: Task, blob_store: BlobStoreManager, clock: ManualClock, tmp_path: Path,
                           batches: int) -> None:
    _, committed = task.committed()
    assert committed is not None
    clock.advance(days=31)
    report = collect_garbage(blob_store, clock=clock)
    index = task.backup.read_index(committed)
    referenced = {b.blob_id for b in index.dir_index.present_blobs()} | {committed}
    remaining = {i.blob_id: i for i in blob_store.list_blobs()}
    assert set(remaining) == referenced, f"garbage left: {set(remaining) - referenced}"
    assert all(i.expires_at_ms is None and i.deleted_at_ms is None for i in remaining.values())
    assert report.removed or batches == 1
    # A new host restores exactly the state after the last committed batch.
    fresh = StateBackup(blob_store, "job", "1", "Partition 0", clock=clock)
    try:
        mgr = StoreBackupManager(fresh, "counts", tmp_path / "new-host" / "counts" / "Partition_0")
        mgr.restore(committed)
        assert helpers.contents(mgr.store_dir) == _expected_after(batches, tmp_path)
    finally:
        fresh.close()


CRASHES = [
    pytest.param("put", "*.sst", False, id="file-upload"),
    pytest.param("put", "*.sst", True, id="file-upload-landed-reply-lost"),
    pytest.param("put", "snapshot-index", False, id="index-upload"),
    pytest.param("put", "snapshot-index", True, id="index-upload-landed-reply-lost"),
    pytest.param("checkpoint", "", False, id="checkpoint-write"),
    pytest.param("remove_ttl", "*", True, id="cleanup-remove-ttl"),
    pytest.param("delete", "*.sst.*", False, id="cleanup-delete-files"),
    pytest.param("delete", "*snapshot-index*", False, id="cleanup-delete-prev-index"),
]


@pytest.mark.parametrize(("operation", "pattern", "after"), CRASHES)
def test_crash_at_each_stage_then_restart_and_gc(blob_store: BlobStoreManager, clock: ManualClock, tmp_path: Path,
                                                 operation: str, pattern: str, after: bool) -> None:
    faulty = FaultInjectingBlobStoreManager(blob_store)
    task = Task(tmp_path / "host", faulty, clock)
    task.run_batch(1, 1)
    # Batch 2 crashes at the chosen stage.
    if operation == "checkpoint":
        task.crash_on_checkpoint_write = True
    else:
        fault = faulty.crash(operation, pattern, after=after)
    with pytest.raises(InjectedCrash):
        task.run_batch(2, 2)
    if operation != "checkpoint":
        assert fault.fired == 1
    crashed_in_cleanup = operation in ("remove_ttl", "delete")
    assert task.committed()[0] == (2 if crashed_in_cleanup else 1)
    task.close()

    # Restart (same host, new process): cleanup + restore, then the replay of batch 2 (which starts
    # from the state after batch 1) or, when batch 2 had committed, batch 3.
    task = Task(tmp_path / "host", faulty, clock)
    task.start()
    last = 3 if crashed_in_cleanup else 2
    task.run_batch(last, last)
    task.close()
    _assert_clean_after_gc(task, blob_store, clock, tmp_path, last)


def test_restart_after_a_crashed_restore_is_not_stuck(blob_store: BlobStoreManager, clock: ManualClock,
                                                      tmp_path: Path) -> None:
    faulty = FaultInjectingBlobStoreManager(blob_store)
    task = Task(tmp_path / "host", faulty, clock)
    task.run_batch(1, 1)
    task.close()
    # A new host starts restoring and dies mid-download.
    new_host = Task(tmp_path / "new-host", faulty, clock)
    new_host.checkpoint_file.parent.mkdir(parents=True)
    new_host.checkpoint_file.write_text(task.checkpoint_file.read_text())
    faulty.crash("get", "*.sst.*", after=True)
    with pytest.raises(InjectedCrash):
        new_host.start()
    assert not new_host.mgr.store_dir.exists()  # nothing half-restored was swapped in
    new_host.close()
    again = Task(tmp_path / "new-host", faulty, clock)
    again.start()
    again.run_batch(2, 2)
    again.close()
    assert not list(again.mgr.store_dir.parent.glob(".sparza-tmp-*"))  # cleanup removed the leftovers
    _assert_clean_after_gc(again, blob_store, clock, tmp_path, 2)


def test_transient_failures_are_retried_with_fresh_streams(blob_store: BlobStoreManager, clock: ManualClock,
                                                            tmp_path: Path) -> None:
    faulty = FaultInjectingBlobStoreManager(blob_store)
    retrying = RetryingBlobStoreManager(faulty, NO_WAIT, sleep=lambda s: None)
    # Uploads whose bytes landed but whose reply was lost, a failed index upload, remove_ttl and
    # delete failures, and downloads that wrote part of the data before failing.
    faulty.fail("put", "*.sst", times=2, after=True)
    faulty.fail("put", "snapshot-index", times=1)
    faulty.fail("remove_ttl", times=2)
    faulty.fail("delete", times=1)
    task = Task(tmp_path / "host", retrying, clock)
    task.run_batch(1, 1)
    task.run_batch(2, 2)
    task.close()
    faulty.fail("get", "*", times=3, after=True)
    new_host = Task(tmp_path / "new-host", retrying, clock)
    new_host.checkpoint_file.parent.mkdir(parents=True)
    new_host.checkpoint_file.write_text(task.checkpoint_file.read_text())
    new_host.start()  # would fail a checksum if a retried download appended instead of rewriting
    assert all(f.fired == f.times for f in faulty.faults)
    assert helpers.contents(new_host.mgr.store_dir) == _expected_after(2, tmp_path)
    new_host.close()
    _assert_clean_after_gc(new_host, blob_store, clock, tmp_path, 2)


def test_non_retriable_errors_are_not_retried(blob_store: BlobStoreManager, clock: ManualClock, tmp_path: Path) -> None:
    from sparza.blobstore import BlobStoreError

    faulty = FaultInjectingBlobStoreManager(blob_store)
    retrying = RetryingBlobStoreManager(faulty, NO_WAIT, sleep=lambda s: None)
    fault = faulty.fail("put", "*", times=-1, error=lambda: BlobStoreError("put", None, "403 forbidden"))
    task = Task(tmp_path / "host", retrying, clock)
    with pytest.raises(BlobStoreError, match="403"):
        task.run_batch(1, 1)
    task.close()
    assert fault.fired >= 1
    puts = [c for c in faulty.calls if c[0] == "put"]
    assert len(puts) == fault.fired  # each file tried once, none retried


def test_retries_give_up_after_max_retries(blob_store: BlobStoreManager, tmp_path: Path) -> None:
    import io

    from sparza.blobstore import Metadata

    faulty = FaultInjectingBlobStoreManager(blob_store)
    retrying = RetryingBlobStoreManager(faulty, RetryPolicy(max_retries=3, delay_ms=0), sleep=lambda s: None)
    faulty.fail("put", "*", times=-1)
    with pytest.raises(RetriableError):
        retrying.put(io.BytesIO(b"x"), Metadata("x"))
    assert len(faulty.calls) == 4
