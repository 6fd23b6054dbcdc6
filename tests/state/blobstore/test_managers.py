"""The BlobStoreManager contract, run against both backends (local dir and Azurite)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sparza.blobstore import (
    BlobNotFoundError,
    BlobStoreError,
    BlobStoreManager,
    DeletedError,
    ManualClock,
    Metadata,
    collect_garbage,
)

DAY_MS = 86_400_000
META = Metadata("dir/000012.sst", 5, "job", "1", "Partition 3", "counts")


def _get(store: BlobStoreManager, blob_id: str, **kw: bool) -> bytes:
    buf = io.BytesIO()
    store.get(blob_id, buf, META, **kw)
    return buf.getvalue()


def _info(store: BlobStoreManager, blob_id: str):
    return next(i for i in store.list_blobs() if i.blob_id == blob_id)


def test_put_get_from_path_and_stream(blob_store: BlobStoreManager, tmp_path: Path) -> None:
    src = tmp_path / "file"
    payload = bytes(range(256)) * 1000  # bigger than the Azure block size of the fixture: parallel blocks
    src.write_bytes(payload)
    from_path = blob_store.put(src, META)
    from_stream = blob_store.put(io.BytesIO(b"hello"), META)
    assert from_path != from_stream  # every put creates a new blob
    assert from_path.startswith("job-1/Partition_3/counts/dir/000012.sst.")
    assert _get(blob_store, from_path) == payload
    out = tmp_path / "out"
    blob_store.get(from_stream, out, META)
    assert out.read_bytes() == b"hello"


def test_empty_blob(blob_store: BlobStoreManager, tmp_path: Path) -> None:
    src = tmp_path / "empty"
    src.write_bytes(b"")
    assert _get(blob_store, blob_store.put(src, META)) == b""


def test_every_put_carries_a_ttl_until_remove_ttl(blob_store: BlobStoreManager, clock: ManualClock) -> None:
    blob_id = blob_store.put(io.BytesIO(b"x"), META)
    assert _info(blob_store, blob_id).expires_at_ms == clock() + 30 * DAY_MS
    blob_store.remove_ttl(blob_id, META)
    blob_store.remove_ttl(blob_id, META)  # idempotent
    info = _info(blob_store, blob_id)
    assert info.expires_at_ms is None and info.deleted_at_ms is None


def test_delete_is_a_tombstone_readable_with_get_deleted(blob_store: BlobStoreManager) -> None:
    blob_id = blob_store.put(io.BytesIO(b"data"), META)
    blob_store.delete(blob_id, META)
    with pytest.raises(DeletedError) as err:
        _get(blob_store, blob_id)
    assert not err.value.purged
    assert _get(blob_store, blob_id, get_deleted=True) == b"data"
    with pytest.raises(DeletedError):
        blob_store.delete(blob_id, META)
    with pytest.raises(DeletedError):
        blob_store.remove_ttl(blob_id, META)


def test_missing_blob_raises_not_found(blob_store: BlobStoreManager) -> None:
    missing = "job-1/Partition_3/counts/never-written"
    for call in (lambda: _get(blob_store, missing, get_deleted=True),
                 lambda: blob_store.delete(missing, META), lambda: blob_store.remove_ttl(missing, META)):
        with pytest.raises(BlobNotFoundError) as err:
            call()
        assert err.value.purged and isinstance(err.value, DeletedError)
    assert blob_store.purge(missing) == 0


def test_gc_with_time_advanced(blob_store: BlobStoreManager, clock: ManualClock) -> None:
    kept = blob_store.put(io.BytesIO(b"kept"), META)
    blob_store.remove_ttl(kept, META)
    garbage = blob_store.put(io.BytesIO(b"garbage"), META)
    tomb = blob_store.put(io.BytesIO(b"tomb"), META)
    blob_store.remove_ttl(tomb, META)
    blob_store.delete(tomb, META)

    report = collect_garbage(blob_store, clock=clock)
    assert report.removed == [] and report.kept == 3

    clock.advance(days=2)  # past the tombstone retention (1 day), not past the TTL (30 days)
    report = collect_garbage(blob_store, clock=clock)
    assert report.deleted == [tomb] and report.expired == []

    clock.advance(days=29)
    dry = collect_garbage(blob_store, clock=clock, dry_run=True)
    assert dry.expired == [garbage] and dry.bytes_freed == len(b"garbage")
    assert {i.blob_id for i in blob_store.list_blobs()} == {kept, garbage}
    report = collect_garbage(blob_store, clock=clock)
    assert report.expired == [garbage] and report.bytes_freed == len(b"garbage")
    assert [i.blob_id for i in blob_store.list_blobs()] == [kept]
    assert _get(blob_store, kept) == b"kept"
    with pytest.raises(BlobNotFoundError):
        _get(blob_store, garbage, get_deleted=True)


def test_list_blobs_by_prefix(blob_store: BlobStoreManager) -> None:
    a = blob_store.put(io.BytesIO(b"a"), META)
    blob_store.put(io.BytesIO(b"b"), Metadata("x", 1, "other", "2", "Partition 0", "s"))
    assert [i.blob_id for i in blob_store.list_blobs("job-1/")] == [a]


def test_local_rejects_ids_outside_root(tmp_path: Path) -> None:
    from sparza.blobstore import LocalBlobStoreManager

    store = LocalBlobStoreManager(tmp_path / "root", fsync=False)
    for bad in ("../etc/passwd", "a//b", "", "x/../../y"):
        with pytest.raises(BlobStoreError):
            store.get(bad, io.BytesIO(), META)


def test_gc_never_touches_blobs_it_did_not_write(blob_store: BlobStoreManager, clock: ManualClock) -> None:
    # Task checkpoints live next to snapshots (checkpoints/<job>/...), written by another package.
    from sparza.blobstore import LocalBlobStoreManager

    if isinstance(blob_store, LocalBlobStoreManager):
        foreign = blob_store.root / "checkpoints" / "job-1" / "Partition_0.json"
        foreign.parent.mkdir(parents=True)
        foreign.write_text("{}")
        exists = foreign.exists
    else:
        blob_store._client.upload_blob("checkpoints/job-1/Partition_0.json", b"{}")

        def exists() -> bool:
            return blob_store._client.get_blob_client("checkpoints/job-1/Partition_0.json").exists()
    orphan = blob_store.put(io.BytesIO(b"orphan"), META)
    clock.advance(days=365)
    report = collect_garbage(blob_store, clock=clock)
    assert report.expired == [orphan]
    assert exists()
