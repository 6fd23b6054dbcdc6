"""Blob stores for state snapshots (SEP-003): the :class:`BlobStoreManager` SPI, the local and
Azure backends, the retry policy, TTL garbage collection and a fault-injecting wrapper."""

from __future__ import annotations

from sparza.blobstore.api import (
    INDEX_PAYLOAD_PATH,
    BlobInfo,
    BlobNotFoundError,
    BlobSource,
    BlobStoreError,
    BlobStoreManager,
    BlobTarget,
    Clock,
    DeletedError,
    Metadata,
    RetriableError,
    blob_name_for,
    system_clock_ms,
)
from sparza.blobstore.factory import BLOB_STORE_FACTORIES, blob_store_manager_from_config
from sparza.blobstore.faults import FaultInjectingBlobStoreManager, InjectedCrash, ManualClock
from sparza.blobstore.gc import GcReport, collect_garbage
from sparza.blobstore.local import LocalBlobStoreManager
from sparza.blobstore.retry import RetryingBlobStoreManager, RetryPolicy

__all__ = [
    "BLOB_STORE_FACTORIES",
    "INDEX_PAYLOAD_PATH",
    "AzureBlobStoreManager",
    "BlobInfo",
    "BlobNotFoundError",
    "BlobSource",
    "BlobStoreError",
    "BlobStoreManager",
    "BlobTarget",
    "Clock",
    "DeletedError",
    "FaultInjectingBlobStoreManager",
    "GcReport",
    "InjectedCrash",
    "LocalBlobStoreManager",
    "ManualClock",
    "Metadata",
    "RetriableError",
    "RetryPolicy",
    "RetryingBlobStoreManager",
    "blob_name_for",
    "blob_store_manager_from_config",
    "collect_garbage",
    "system_clock_ms",
]


def __getattr__(name: str) -> object:
    # The Azure backend imports the Azure SDK: load it only when asked for.
    if name == "AzureBlobStoreManager":
        from sparza.blobstore.azure import AzureBlobStoreManager

        return AzureBlobStoreManager
    raise AttributeError(name)
