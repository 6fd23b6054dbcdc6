"""Errors of backup and restore; each carries the data an operator needs."""

from __future__ import annotations

from sparza.errors import SparzaError

__all__ = ["BackupError", "ChecksumMismatchError", "SnapshotUnavailableError"]


class BackupError(SparzaError):
    """A backup, cleanup or restore of a store failed."""


class ChecksumMismatchError(BackupError):
    """A restored file does not match its snapshot index (size or CRC32)."""

    def __init__(self, path: str, expected_crc: int, actual_crc: int, expected_size: int, actual_size: int) -> None:
        self.path = path
        self.expected_crc = expected_crc
        self.actual_crc = actual_crc
        self.expected_size = expected_size
        self.actual_size = actual_size
        super().__init__(f"restored file {path} is corrupt: crc32 {actual_crc:#010x} / {actual_size} bytes, "
                         f"snapshot says {expected_crc:#010x} / {expected_size} bytes; nothing was swapped in, "
                         f"retry the restore (a persistent mismatch means the blob store holds a bad blob)")


class SnapshotUnavailableError(BackupError):
    """A snapshot index or one of its file blobs no longer exists, even as a deleted blob."""

    def __init__(self, blob_id: str, what: str) -> None:
        self.blob_id = blob_id
        super().__init__(f"{what} {blob_id} does not exist in the blob store (wrong id, or purged by gc); "
                         f"check the blob store config, else restore from an older checkpoint or rebuild the "
                         f"store from its inputs")
