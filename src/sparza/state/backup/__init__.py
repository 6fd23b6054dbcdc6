"""Incremental backup of task stores to a blob store and fast restore from it (SEP-003).

:class:`StateBackup` is the facade (upload, cleanup, restore, read_index, verify);
:class:`StoreBackupManager` runs one store's per-batch lifecycle in one call each; the snapshot
index types (:class:`SnapshotIndex`, :class:`DirIndex`, :class:`FileIndex`, :class:`FileBlob`) and
:class:`DirDiff` are as in the seed.
"""

from __future__ import annotations

from sparza.state.backup.backup import (
    DELTA_MAX_BYTES,
    CleanupResult,
    RestoreResult,
    StateBackup,
    VerifyResult,
    materialize_store_dir,
    read_snapshot_marker,
    write_snapshot_marker,
)
from sparza.state.backup.delta import (
    DELTA_TAG,
    Changes,
    DeltaError,
    apply_changes,
    base_of,
    changes_of,
    changes_size,
    merge_changes,
    snapshot_id,
)
from sparza.state.backup.diff import (
    FILES_TO_IGNORE,
    SNAPSHOT_MARKER,
    DirDiff,
    are_same_dir,
    are_same_file,
    crc32_file,
    dir_diff,
)
from sparza.state.backup.errors import BackupError, ChecksumMismatchError, SnapshotUnavailableError
from sparza.state.backup.index import (
    SCHEMA_VERSION,
    DirIndex,
    FileBlob,
    FileIndex,
    FileMetadata,
    SnapshotIndex,
    SnapshotIndexError,
    SnapshotMetadata,
)
from sparza.state.backup.manager import StoreBackupManager
from sparza.state.backup.metrics import BACKUP_GROUP, RESTORE_GROUP, BackupMetrics, RestoreMetrics

__all__ = [
    "BACKUP_GROUP",
    "DELTA_MAX_BYTES",
    "DELTA_TAG",
    "FILES_TO_IGNORE",
    "RESTORE_GROUP",
    "SCHEMA_VERSION",
    "SNAPSHOT_MARKER",
    "BackupError",
    "BackupMetrics",
    "Changes",
    "ChecksumMismatchError",
    "CleanupResult",
    "DeltaError",
    "DirDiff",
    "DirIndex",
    "FileBlob",
    "FileIndex",
    "FileMetadata",
    "RestoreMetrics",
    "RestoreResult",
    "SnapshotIndex",
    "SnapshotIndexError",
    "SnapshotMetadata",
    "SnapshotUnavailableError",
    "StateBackup",
    "StoreBackupManager",
    "VerifyResult",
    "apply_changes",
    "are_same_dir",
    "are_same_file",
    "base_of",
    "changes_of",
    "changes_size",
    "crc32_file",
    "dir_diff",
    "materialize_store_dir",
    "merge_changes",
    "read_snapshot_marker",
    "snapshot_id",
    "write_snapshot_marker",
]
