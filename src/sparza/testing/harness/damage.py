"""Damage to a job's committed state that both engines inflict the same way, through the blob store's own
interface: snapshot blobs tombstoned (an operator's or a gc's mistake, SAMZA-2787) or purged (gone for
good), and the local blob store's files saved and put back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["PURGE_WORDS", "SavedBlob", "names_purged", "purge_committed_snapshots", "restore_local_blob",
           "save_local_blob", "tombstone_committed_snapshots"]

SavedBlob = tuple[bytes, dict[str, str], dict[str, str]]
"""A blob's bytes, metadata and tags, as saved before it was purged."""

PURGE_WORDS = ("purged", "gone from the blob store", "does not exist in the blob store", "cannot be restored")
"""Words of which an error after the purged-snapshot fault must hold one: it says that state is gone."""


def names_purged(error: str) -> bool:
    """Whether ``error`` says that committed state is gone from the blob store (:data:`PURGE_WORDS`)."""
    return any(word in error for word in PURGE_WORDS)


def _committed_snapshot_blobs(manager: Any) -> list[str]:
    """Ids of the committed (permanent, live) snapshot blobs: no TTL, not deleted, not a task checkpoint."""
    return [info.blob_id for info in list(manager.list_blobs())
            if info.deleted_at_ms is None and info.expires_at_ms is None
            and not info.blob_id.startswith("checkpoints/")]


def tombstone_committed_snapshots(config: Mapping[str, str]) -> int:
    """Tombstone every committed snapshot blob through the blob store's ``delete`` (the bytes stay readable
    with ``get_deleted`` until purged); returns how many."""
    from sparza.blobstore.api import Metadata
    from sparza.blobstore.factory import blob_store_manager_from_config

    manager = blob_store_manager_from_config(config)
    try:
        ids = _committed_snapshot_blobs(manager)
        for blob_id in ids:
            manager.delete(blob_id, Metadata(payload_path=blob_id))
    finally:
        manager.close()
    return len(ids)


def purge_committed_snapshots(config: Mapping[str, str], save: Callable[[str], SavedBlob]) -> dict[str, SavedBlob]:
    """Purge every committed snapshot blob (gone, not tombstoned), each saved with ``save(blob_id)`` first;
    returns what was saved, by blob id."""
    from sparza.blobstore.factory import blob_store_manager_from_config

    manager = blob_store_manager_from_config(config)
    saved: dict[str, SavedBlob] = {}
    try:
        for blob_id in _committed_snapshot_blobs(manager):
            saved[blob_id] = save(blob_id)
            manager.purge(blob_id)
    finally:
        manager.close()
    return saved


def save_local_blob(root: Path, blob_id: str) -> SavedBlob:
    """A local blob store's blob (its file and metadata sidecar), read from disk."""
    path = root / blob_id
    meta = path.with_name(path.name + ".meta.json")
    return path.read_bytes(), {"sidecar": meta.read_text()} if meta.exists() else {}, {}


def restore_local_blob(root: Path, blob_id: str, saved: SavedBlob) -> None:
    """Put a blob saved by :func:`save_local_blob` back."""
    data, metadata, _ = saved
    path = root / blob_id
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if "sidecar" in metadata:
        path.with_name(path.name + ".meta.json").write_text(metadata["sidecar"])
