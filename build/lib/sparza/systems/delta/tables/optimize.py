"""Compacting a typed table's small files and vacuuming old ones (stream tables are compacted and trimmed
by :mod:`sparza.systems.delta.maintenance` instead: their offsets point at the original files)."""

from __future__ import annotations

from dataclasses import dataclass

from sparza.systems.delta.errors import TableError
from sparza.systems.delta.settings import StreamLocation
from sparza.systems.delta.storage import storage_errors

__all__ = ["MIN_VACUUM_RETENTION_HOURS", "OptimizeResult", "optimize_table"]

MIN_VACUUM_RETENTION_HOURS = 1
"""Vacuum never deletes files tombstoned less than this long ago: a merge that started from an older
snapshot may still be reading them (it would fail and be retried, but need not)."""


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """What ``optimize`` did: files compacted, the compaction's version, and files vacuumed."""

    files_removed: int
    files_added: int
    version: int | None
    vacuumed: int | None


def optimize_table(location: StreamLocation, *, target_size: int = 128 << 20, vacuum_retention_hours: float | None
                   = None, min_retention_hours: float = MIN_VACUUM_RETENTION_HOURS) -> OptimizeResult:
    """Compact a typed table's small files, then optionally vacuum files tombstoned more than
    ``vacuum_retention_hours`` ago.

    A running job's replay never needs old files: whether a batch was committed is decided by the app
    transaction in the log, which neither compaction nor vacuum removes (tables are created without
    ``delta.setTransactionRetentionDuration``, so delta-rs keeps every transaction; a table that sets it is
    refused). Stream tables are refused: their offsets point at the original files (use ``truncate``).
    """
    from deltalake import DeltaTable

    with storage_errors(location.uri):
        table = DeltaTable(location.uri, storage_options=location.storage_options)
    config = dict(table.metadata().configuration)
    if "sparza.partitions" in config:
        raise TableError(f"{location.uri} is a sparza stream: its offsets point at the original files, so it is "
                         f"compacted with 'sparza stream compact' and trimmed with 'sparza stream truncate', "
                         f"never vacuumed")
    if config.get("delta.setTransactionRetentionDuration"):
        raise TableError(f"{location.uri} sets delta.setTransactionRetentionDuration: expired app transactions "
                         f"would let a replayed batch commit twice; remove the property first")
    if vacuum_retention_hours is not None and vacuum_retention_hours < min_retention_hours:
        raise TableError(f"vacuum retention {vacuum_retention_hours}h is below {min_retention_hours}h: files a "
                         f"running merge may still read would be deleted")
    with storage_errors(location.uri):
        metrics = table.optimize.compact(target_size=target_size)
    added, removed = int(metrics.get("numFilesAdded", 0)), int(metrics.get("numFilesRemoved", 0))
    table.update_incremental()
    version = table.version() if added or removed else None
    vacuumed = None
    if vacuum_retention_hours is not None:
        with storage_errors(location.uri):
            vacuumed = len(table.vacuum(retention_hours=int(vacuum_retention_hours), dry_run=False,
                                        enforce_retention_duration=False))
    return OptimizeResult(removed, added, version, vacuumed)
