"""Backup and restore metrics, with Samza's names (``BlobStoreBackupManagerMetrics`` and
``BlobStoreRestoreManagerMetrics`` groups). Durations are timers in milliseconds, named ``-ms``
where Samza's are ``-ns``."""

from __future__ import annotations

from sparza.metrics import Counter, Gauge, MetricsRegistry, Timer

__all__ = ["BACKUP_GROUP", "RESTORE_GROUP", "BackupMetrics", "RestoreMetrics"]

BACKUP_GROUP = "BlobStoreBackupManagerMetrics"
RESTORE_GROUP = "BlobStoreRestoreManagerMetrics"


class _GroupMetrics:
    """The metrics of one group of a registry; per-store ones are named ``<store>-<name>`` in the same group."""

    def __init__(self, registry: MetricsRegistry, group: str) -> None:
        self.registry = registry
        self.group = group

    def _timer(self, name: str) -> Timer:
        return self.registry.timer(self.group, name)

    def _counter(self, name: str) -> Counter:
        return self.registry.counter(self.group, name)

    def _gauge(self, name: str) -> Gauge:
        return self.registry.gauge(self.group, name)

    def store_timer(self, store: str, name: str) -> Timer:
        """A per-store timer, ``<store>-<name>``."""
        return self._timer(f"{store}-{name}")


class BackupMetrics(_GroupMetrics):
    """Counters and timers of uploads and cleanups; per-store ones are prefixed ``<store>-``."""

    def __init__(self, registry: MetricsRegistry) -> None:
        super().__init__(registry, BACKUP_GROUP)
        self.upload_ms = self._timer("upload-ms")
        self.cleanup_ms = self._timer("cleanup-ms")
        self.files_to_upload = self._counter("files-to-upload")
        self.bytes_to_upload = self._counter("bytes-to-upload")
        self.files_uploaded = self._counter("files-uploaded")
        self.bytes_uploaded = self._counter("bytes-uploaded")
        self.files_to_retain = self._counter("files-to-retain")
        self.bytes_to_retain = self._counter("bytes-to-retain")
        self.files_removed = self._counter("files-removed")
        self.blobs_ttl_removed = self._counter("blobs-ttl-removed")
        self.blobs_deleted = self._counter("blobs-deleted")
        self.avg_file_size_bytes = self._gauge("avg-file-size-bytes")
        self.upload_rate = self._gauge("upload-rate-bytes-per-s")

    def store(self, store: str, name: str) -> Counter:
        """A per-store counter, ``<store>-<name>``."""
        return self._counter(f"{store}-{name}")


class RestoreMetrics(_GroupMetrics):
    """Counters and timers of restores."""

    def __init__(self, registry: MetricsRegistry) -> None:
        super().__init__(registry, RESTORE_GROUP)
        self.get_snapshot_index_ms = self._timer("get-snapshot-index-ms")
        self.restore_ms = self._timer("restore-ms")
        self.files_to_restore = self._counter("files-to-restore")
        self.bytes_to_restore = self._counter("bytes-to-restore")
        self.files_restored = self._counter("files-restored")
        self.bytes_restored = self._counter("bytes-restored")
        self.local_reuses = self._counter("local-checkpoint-reused")
        self.deleted_recoveries = self._counter("deleted-blob-recoveries")
        self.restore_rate = self._gauge("restore-rate-bytes-per-s")
