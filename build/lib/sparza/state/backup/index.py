"""The snapshot index of SEP-003: which blobs make up one checkpoint directory of one store.

Serialised as JSON with Samza's field names (``dir-index``, ``files-present``, ...) plus a
``schema-version`` field; unknown fields are ignored on read so newer writers stay readable.
A :class:`SnapshotIndex` is necessary and sufficient to rebuild the directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sparza.errors import SparzaError

__all__ = [
    "SCHEMA_VERSION",
    "DirIndex",
    "FileBlob",
    "FileIndex",
    "FileMetadata",
    "SnapshotIndex",
    "SnapshotIndexError",
    "SnapshotMetadata",
]

SCHEMA_VERSION = 1


class SnapshotIndexError(SparzaError, ValueError):
    """A snapshot index is malformed, of an unknown schema version, or inconsistent."""


@dataclass(frozen=True, slots=True)
class FileBlob:
    """One blob holding the bytes of a file from ``offset`` on (a file has one or more)."""

    blob_id: str
    offset: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with Samza\'s field names."""
        return {"blob-id": self.blob_id, "offset": self.offset}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileBlob:
        """Parse :meth:`to_json`'s output (unknown fields are ignored)."""
        return cls(str(data["blob-id"]), int(data.get("offset", 0)))


@dataclass(frozen=True, slots=True)
class FileMetadata:
    """POSIX attributes of a file when it was uploaded. Only size and the owner's r/w/x bits take
    part in comparisons (Samza #1659: group bits differ across hosts); times are informative."""

    creation_time_ms: int
    last_modified_time_ms: int
    size: int
    permissions: str = "rw-r--r--"

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with Samza\'s field names."""
        return {"creation-time-millis": self.creation_time_ms, "last-modified-time-millis":
                self.last_modified_time_ms, "size": self.size, "permissions": self.permissions}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileMetadata:
        """Parse :meth:`to_json`'s output (unknown fields are ignored)."""
        return cls(int(data.get("creation-time-millis", 0)), int(data.get("last-modified-time-millis", 0)),
                   int(data["size"]), str(data.get("permissions", "rw-r--r--")))


@dataclass(frozen=True, slots=True)
class FileIndex:
    """A file of the snapshot: its name, its blobs in offset order, metadata and CRC32."""

    file_name: str
    blobs: tuple[FileBlob, ...]
    metadata: FileMetadata
    checksum: int

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return self.metadata.size

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with Samza\'s field names."""
        return {"file-name": self.file_name, "blobs": [b.to_json() for b in self.blobs],
                "file-metadata": self.metadata.to_json(), "checksum": self.checksum}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileIndex:
        """Parse :meth:`to_json`'s output (unknown fields are ignored)."""
        blobs = tuple(sorted((FileBlob.from_json(b) for b in data.get("blobs", [])), key=lambda b: b.offset))
        return cls(str(data["file-name"]), blobs, FileMetadata.from_json(data["file-metadata"]),
                   int(data.get("checksum", 0)))


@dataclass(frozen=True, slots=True)
class DirIndex:
    """A directory of the snapshot (``""`` for the root): files and sub-dirs present, plus the
    files and sub-dirs removed since the previous snapshot, whose blobs cleanup deletes."""

    dir_name: str
    files_present: tuple[FileIndex, ...] = ()
    files_removed: tuple[FileIndex, ...] = ()
    sub_dirs_present: tuple[DirIndex, ...] = ()
    sub_dirs_removed: tuple[DirIndex, ...] = ()

    def __post_init__(self) -> None:
        # Samza's validatePresentAndRemovedOverlap: a blob both kept and deleted would lose data.
        present = {b.blob_id for f in self.files_present for b in f.blobs}
        removed = {b.blob_id for f in self.files_removed for b in f.blobs}
        overlap = present & removed
        if overlap:
            raise SnapshotIndexError(f"dir {self.dir_name!r}: blobs both present and removed: {sorted(overlap)[:3]}")
        names = [f.file_name for f in self.files_present]
        if len(names) != len(set(names)):
            raise SnapshotIndexError(f"dir {self.dir_name!r}: duplicate file names")

    def file(self, name: str) -> FileIndex | None:
        """The present file called ``name``."""
        return next((f for f in self.files_present if f.file_name == name), None)

    def sub_dir(self, name: str) -> DirIndex | None:
        """The present sub-dir called ``name``."""
        return next((d for d in self.sub_dirs_present if d.dir_name == name), None)

    def walk_present(self, prefix: str = "") -> Iterator[tuple[str, FileIndex]]:
        """``(relative path, file)`` for every present file, recursively."""
        for f in self.files_present:
            yield prefix + f.file_name, f
        for d in self.sub_dirs_present:
            yield from d.walk_present(prefix + d.dir_name + "/")

    def present_blobs(self) -> Iterator[FileBlob]:
        """Every blob of every present file, recursively."""
        for _, f in self.walk_present():
            yield from f.blobs

    def removed_blobs(self) -> Iterator[FileBlob]:
        """Every blob this snapshot drops: removed files, removed sub-dirs (all their files, present
        and removed), and what present sub-dirs removed, recursively."""
        for f in self.files_removed:
            yield from f.blobs
        for d in self.sub_dirs_removed:
            yield from d.present_blobs()
            yield from d.removed_blobs()
        for d in self.sub_dirs_present:
            yield from d.removed_blobs()

    def total_size(self) -> int:
        """Bytes of every present file."""
        return sum(f.size for _, f in self.walk_present())

    def file_count(self) -> int:
        """Number of present files, recursively."""
        return sum(1 for _ in self.walk_present())

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with Samza\'s field names."""
        return {"dir-name": self.dir_name,
                "files-present": [f.to_json() for f in self.files_present],
                "files-removed": [f.to_json() for f in self.files_removed],
                "sub-dirs-present": [d.to_json() for d in self.sub_dirs_present],
                "sub-dirs-removed": [d.to_json() for d in self.sub_dirs_removed]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DirIndex:
        """Parse :meth:`to_json`'s output (unknown fields are ignored)."""
        return cls(str(data.get("dir-name", "")),
                   tuple(FileIndex.from_json(f) for f in data.get("files-present", [])),
                   tuple(FileIndex.from_json(f) for f in data.get("files-removed", [])),
                   tuple(DirIndex.from_json(d) for d in data.get("sub-dirs-present", [])),
                   tuple(DirIndex.from_json(d) for d in data.get("sub-dirs-removed", [])))


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    """Whose snapshot this is."""

    checkpoint_id: str
    job_name: str
    job_id: str
    task_name: str
    store_name: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with Samza\'s field names."""
        return {"checkpoint-id": self.checkpoint_id, "job-name": self.job_name, "job-id": self.job_id,
                "task-name": self.task_name, "store-name": self.store_name}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotMetadata:
        """Parse :meth:`to_json`'s output (unknown fields are ignored)."""
        return cls(str(data.get("checkpoint-id", "")), str(data.get("job-name", "")), str(data.get("job-id", "")),
                   str(data.get("task-name", "")), str(data.get("store-name", "")))


@dataclass(frozen=True, slots=True)
class SnapshotIndex:
    """One snapshot of one store of one task; its blob id is what the task checkpoint records."""

    creation_time_ms: int
    metadata: SnapshotMetadata
    dir_index: DirIndex
    prev_snapshot_index_blob_id: str | None = None
    schema_version: int = field(default=SCHEMA_VERSION)

    def to_json(self) -> dict[str, Any]:
        """The JSON form, with Samza\'s field names."""
        return {"schema-version": self.schema_version, "creation-time-millis": self.creation_time_ms,
                "snapshot-metadata": self.metadata.to_json(), "dir-index": self.dir_index.to_json(),
                "prev-snapshot-index-blob-id": self.prev_snapshot_index_blob_id}

    def to_bytes(self) -> bytes:
        """The JSON form, UTF-8."""
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotIndex:
        """Parse :meth:`to_json`'s output (unknown fields are ignored)."""
        version = int(data.get("schema-version", SCHEMA_VERSION))
        if version > SCHEMA_VERSION:
            raise SnapshotIndexError(f"snapshot index schema version {version} is newer than this sparza "
                                     f"understands ({SCHEMA_VERSION}): upgrade sparza")
        prev = data.get("prev-snapshot-index-blob-id")
        return cls(int(data.get("creation-time-millis", 0)), SnapshotMetadata.from_json(data["snapshot-metadata"]),
                   DirIndex.from_json(data["dir-index"]), str(prev) if prev else None, version)

    @classmethod
    def from_bytes(cls, data: bytes) -> SnapshotIndex:
        """Parse the JSON form; :class:`SnapshotIndexError` when it is not a snapshot index."""
        try:
            return cls.from_json(json.loads(data.decode("utf-8")))
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, SnapshotIndexError):
                raise
            raise SnapshotIndexError(f"not a snapshot index: {exc}") from exc
