"""The blob-store SPI of SEP-003: put, get, delete and remove-TTL of immutable blobs.

A manager gives every blob it creates a time-to-live (``blob.store.ttl.days``). Nothing is kept
forever until :meth:`BlobStoreManager.remove_ttl`, so blobs left behind by a commit that crashed
half-way expire and ``sparza gc`` removes them. ``delete`` leaves a tombstone: the bytes stay
readable with ``get(..., get_deleted=True)`` until gc purges them after
``blob.store.deleted.retention.ms`` (this is what SAMZA-2787's recovery reads).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sparza.clock import Clock, system_clock_ms  # re-exported: the project's one clock
from sparza.errors import SparzaError

__all__ = [
    "INDEX_PAYLOAD_PATH",
    "BlobInfo",
    "BlobNotFoundError",
    "BlobSource",
    "BlobStoreError",
    "BlobStoreManager",
    "BlobTarget",
    "Clock",
    "DeletedError",
    "Metadata",
    "RetriableError",
    "blob_name_for",
    "blob_owner",
    "system_clock_ms",
]

INDEX_PAYLOAD_PATH = "snapshot-index"
"""``Metadata.payload_path`` of snapshot-index blobs (as Samza's)."""

BlobSource = str | Path | BinaryIO
"""What ``put`` uploads: a file path (reopened on every retry) or a readable binary stream."""
BlobTarget = str | Path | BinaryIO
"""Where ``get`` writes: a file path (rewritten on every retry) or a writable binary stream."""


class BlobStoreError(SparzaError):
    """A blob-store operation failed and retrying will not help (bad request, permissions)."""

    def __init__(self, operation: str, blob_id: str | None, message: str) -> None:
        self.operation = operation
        self.blob_id = blob_id
        super().__init__(f"blob store {operation} of {blob_id or '<new blob>'} failed: {message}")


class RetriableError(BlobStoreError):
    """A transient failure (timeout, connection reset, 5xx, throttling): the retry policy retries it."""


class DeletedError(BlobStoreError):
    """The blob was deleted (tombstoned), or never existed / was already purged (``purged=True``).

    Cleanup ignores it (deleting twice is fine); restore reacts with SAMZA-2787's recovery.
    """

    def __init__(self, operation: str, blob_id: str, message: str = "blob was deleted", *,
                 purged: bool = False) -> None:
        self.purged = purged
        super().__init__(operation, blob_id, message)


class BlobNotFoundError(DeletedError):
    """The blob does not exist at all (never written, or purged by gc): even ``get_deleted`` fails."""

    def __init__(self, operation: str, blob_id: str) -> None:
        super().__init__(operation, blob_id, "blob does not exist", purged=True)


@dataclass(frozen=True, slots=True)
class Metadata:
    """Who a blob belongs to (Samza's ``Metadata``): kept with the blob and used in its name.

    ``payload_path`` is the file's path inside the snapshot, or ``snapshot-index`` for an index;
    ``payload_size`` is -1 when unknown.
    """

    payload_path: str
    payload_size: int = -1
    job_name: str = ""
    job_id: str = ""
    task_name: str = ""
    store_name: str = ""

    def as_dict(self) -> dict[str, str]:
        """The metadata as strings (stored with the blob)."""
        return {"payload_path": self.payload_path, "payload_size": str(self.payload_size),
                "job_name": self.job_name, "job_id": self.job_id, "task_name": self.task_name,
                "store_name": self.store_name}


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """One blob as listed for gc: its id, size, TTL deadline and deletion time (epoch ms or None)."""

    blob_id: str
    size: int
    expires_at_ms: int | None
    deleted_at_ms: int | None


def _safe(part: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in part)
    return out or "_"


def blob_owner(job_name: str | None, job_id: str | None) -> str:
    """The first part of a job's blob names (``<job>-<id>``, as :func:`blob_name_for` writes it)."""
    return _safe(f"{job_name or 'job'}-{job_id or '1'}")


def blob_name_for(metadata: Metadata) -> str:
    """A new, unique blob name: ``<job>-<id>/<task>/<store>/<path>.<uuid>``.

    Readable (an operator can tell what a blob is) and unique per call, so a retried or replayed
    upload never overwrites a blob some committed snapshot refers to.
    """
    owner = blob_owner(metadata.job_name, metadata.job_id)
    parts = [owner, _safe(metadata.task_name or "task"), _safe(metadata.store_name or "store")]
    path = "/".join(_safe(p) for p in metadata.payload_path.split("/") if p not in ("", ".", ".."))
    return "/".join(parts) + "/" + (path or "blob") + "." + uuid.uuid4().hex[:16]


class BlobStoreManager(ABC):
    """Where snapshots go. Implementations: :class:`~sparza.blobstore.local.LocalBlobStoreManager`
    and :class:`~sparza.blobstore.azure.AzureBlobStoreManager`; wrappers add retries or faults.

    Every method may raise :class:`RetriableError` (transient), :class:`DeletedError` (the blob is
    gone) or :class:`BlobStoreError`. Managers are thread-safe: the backup uses them from a pool.
    """

    @abstractmethod
    def put(self, source: BlobSource, metadata: Metadata) -> str:
        """Upload ``source`` as a new blob carrying a TTL; return its blob id."""

    @abstractmethod
    def get(self, blob_id: str, dest: BlobTarget, metadata: Metadata, get_deleted: bool = False) -> None:
        """Download the blob into ``dest``. A tombstoned blob raises :class:`DeletedError` unless
        ``get_deleted``; a missing one raises :class:`BlobNotFoundError`."""

    @abstractmethod
    def delete(self, blob_id: str, metadata: Metadata) -> None:
        """Tombstone the blob (gc purges it later). :class:`DeletedError` when already deleted."""

    @abstractmethod
    def remove_ttl(self, blob_id: str, metadata: Metadata) -> None:
        """Make the blob permanent (idempotent). :class:`DeletedError` when it was deleted."""

    def remove_fresh_ttl(self, blob_id: str, metadata: Metadata) -> None:
        """:meth:`remove_ttl` of a blob this process put and nothing can have deleted since (a new snapshot's own
        blobs): a backend may skip the check :meth:`remove_ttl` makes first (one storage request instead of two)."""
        self.remove_ttl(blob_id, metadata)

    def delete_known(self, blob_id: str, metadata: Metadata) -> None:
        """:meth:`delete` of a blob this process knows exists and is not deleted (a file of the snapshot the last
        cleanup made permanent): a backend may skip the check :meth:`delete` makes first (one request, not two)."""
        self.delete(blob_id, metadata)

    @abstractmethod
    def list_blobs(self, prefix: str = "") -> Iterator[BlobInfo]:
        """Every blob under ``prefix`` with its TTL and tombstone state (for gc and tools)."""

    @abstractmethod
    def purge(self, blob_id: str) -> int:
        """Remove the blob's bytes for good (gc only); returns the bytes freed, 0 when absent."""

    def purge_temp_files(self, older_than_ms: int) -> list[str]:
        """Remove what puts that crashed left on local disk before ``older_than_ms`` (gc only); returns what was
        removed. A backend that stages nothing locally has nothing to remove."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook, most managers hold nothing to release
        """Release clients and threads."""

    def __enter__(self) -> BlobStoreManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
