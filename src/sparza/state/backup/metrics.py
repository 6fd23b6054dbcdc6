"""Backup and restore metrics, with Samza's names (``BlobStoreBackupManagerMetrics`` and
``BlobStoreRestoreManagerMetrics`` groups). Durations are timers in milliseconds, named ``-ms``
where Samza's are ``-ns``."""

from __future__ import annotations

from sparza.metrics import Counter, Gauge, MetricsRegistry, Timer

__all__ = ["BACKUP_GROUP", "RESTORE_GROUP", "BackupMetrics", "RestoreMetrics"]

BACKUP_GROUP = "BlobStoreBackupManagerMetrics"
RESTORE_GROUP = "BlobStoreRestoreManagerMetrics"


class BackupMetrics:
    """Counters and timers of uploads and cleanups; per-store ones are prefixed ``<store>-``."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry
        g = BACKUP_GROUP
        self.upload_ms: Timer = registry.timer(g, "upload-ms")
        self.cleanup_ms: Timer = registry.timer(g, "cleanup-ms")
        self.files_to_upload: Counter = registry.counter(g, "files-to-upload")
        self.bytes_to_upload: Counter = registry.counter(g, "bytes-to-upload")
        self.files_uploaded: Counter = registry.counter(g, "files-uploaded")
        self.bytes_uploaded: Counter = registry.counter(g, "bytes-uploaded")
        self.files_to_retain: Counter = registry.counter(g, "files-to-retain")
        self.bytes_to_retain: Counter = registry.counter(g, "bytes-to-retain")
        self.files_removed: Counter = registry.counter(g, "files-removed")
        self.blobs_ttl_removed: Counter = registry.counter(g, "blobs-ttl-removed")
        self.blobs_deleted: Counter = registry.counter(g, "blobs-deleted")
        self.avg_file_size_bytes: Gauge = registry.gauge(g, "avg-file-size-bytes")
        self.upload_rate: Gauge = registry.gauge(g, "upload-rate-bytes-per-s")

    def store(self, store: str, name: str) -> Counter:
        """A per-store counter, ``<store>-<name>``."""
        return self.registry.counter(BACKUP_GROUP, f"{store}-{name}")

    def store_timer(self, store: str, name: str) -> Timer:
        """A per-store timer, ``<store>-<name>``."""
        return self.registry.timer(BACKUP_GROUP, f"{store}-{name}")


class RestoreMetrics:
    """Counters and timers of restores."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry
        g = RESTORE_GROUP
        self.get_snapshot_index_ms: Timer = registry.timer(g, "get-snapshot-index-ms")
        self.restore_ms: Timer = registry.timer(g, "restore-ms")
        self.files_to_restore: Counter = registry.counter(g, "files-to-restore")
        self.bytes_to_restore: Counter = registry.counter(g, "bytes-to-restore")
        self.files_restored: Counter = registry.counter(g, "files-restored")
        self.bytes_restored: Counter = registry.counter(g, "bytes-restored")
        self.local_reuses: Counter = registry.counter(g, "local-checkpoint-reused")
        self.deleted_recoveries: Counter = registry.counter(g, "deleted-blob-recoveries")
        self.restore_rate: Gauge = registry.gauge(g, "restore-rate-bytes-per-s")

    def store_timer(self, store: str, name: str) -> Timer:
        """A per-store timer, ``<store>-<name>``."""
        return self.registry.timer(RESTORE_GROUP, f"{store}-{name}")
