"""``sparza gc``: purge blobs whose TTL has passed and tombstones older than the retention.

Blob stores here have no native expiry we can rely on (Azure's needs HNS, lifecycle rules run
daily, Azurite has neither), so this sweep is what makes TTL real. It never touches a blob
without a TTL that is not tombstoned, i.e. anything a committed snapshot refers to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparza.blobstore.api import BlobStoreManager, Clock, system_clock_ms
from sparza.config import Int, define_key

__all__ = ["DELETED_RETENTION_MS", "GcReport", "collect_garbage"]

DELETED_RETENTION_MS = define_key("blob.store.deleted.retention.ms", 86_400_000,
                                  "how long a deleted blob stays readable for recovery before gc purges it",
                                  "sparza.blobstore", kind=Int(min_value=0))


@dataclass
class GcReport:
    """What a gc pass removed (or would remove, in a dry run)."""

    expired: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    temp_files: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    kept: int = 0
    dry_run: bool = False

    @property
    def removed(self) -> list[str]:
        """Every blob removed: expired ones, then purged tombstones."""
        return self.expired + self.deleted


def collect_garbage(manager: BlobStoreManager, *, now_ms: int | None = None, clock: Clock = system_clock_ms,
                    deleted_retention_ms: int = 86_400_000, prefix: str = "", dry_run: bool = False) -> GcReport:
    """Purge every blob under ``prefix`` whose TTL deadline is ``<= now`` or that was deleted at
    least ``deleted_retention_ms`` ago. ``now_ms`` (or ``clock``) lets tests advance time."""
    now = clock() if now_ms is None else now_ms
    report = GcReport(dry_run=dry_run)
    for info in list(manager.list_blobs(prefix)):
        if info.deleted_at_ms is not None:
            if info.deleted_at_ms + deleted_retention_ms > now:
                report.kept += 1
                continue
            target = report.deleted
        elif info.expires_at_ms is not None and info.expires_at_ms <= now:
            target = report.expired
        else:
            report.kept += 1
            continue
        report.bytes_freed += info.size if dry_run else manager.purge(info.blob_id)
        target.append(info.blob_id)
    if not dry_run:
        # Temp files of crashed local puts: anything older than an hour cannot be in flight.
        report.temp_files = manager.purge_temp_files(now - 3_600_000)
    return report
