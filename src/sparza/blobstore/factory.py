"""Building the configured blob store (``blob.store.*``), wrapped in the retry policy."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparza.blobstore.api import BlobStoreManager, Clock, system_clock_ms
from sparza.blobstore.retry import RetryingBlobStoreManager, RetryPolicy
from sparza.blobstore.settings import (
    AZURE_BLOCK_SIZE,
    AZURE_CONTAINER,
    AZURE_MAX_CONCURRENCY,
    AZURE_SDK_RETRIES,
    AZURE_TIMEOUT_SECONDS,
    BLOB_STORE_FACTORIES,
    DEFAULT_LOCAL_ROOT,
    LOCAL_FSYNC,
    LOCAL_ROOT,
    MANAGER_FACTORY,
    TTL_DAYS,
)
from sparza.config import Config, define_check
from sparza.errors import ConfigError

if TYPE_CHECKING:
    from sparza.azure.requests import StorageRequests

__all__ = ["BLOB_STORE_FACTORIES", "DEFAULT_LOCAL_ROOT", "blob_store_manager_from_config", "check_blob_store_config"]

_PKG = "sparza.blobstore"

_AZURE_MAX_BLOCK = 4000 * 1024 * 1024  # Azure's largest block


def check_blob_store_config(config: Config) -> None:
    """Raise :class:`ConfigError` for the first ``blob.store.*`` value outside its range (checked before
    anything runs): the factory, the TTL, and the Azure store's concurrency, block size (64 KiB to Azure's
    4000 MiB block), SDK retries and timeout."""
    for key in (MANAGER_FACTORY, TTL_DAYS, AZURE_MAX_CONCURRENCY, AZURE_SDK_RETRIES, AZURE_TIMEOUT_SECONDS):
        key.get(config)
    block = AZURE_BLOCK_SIZE.get(config)
    if block > _AZURE_MAX_BLOCK:
        raise ConfigError(AZURE_BLOCK_SIZE.key, str(block), f"at most {_AZURE_MAX_BLOCK} bytes (4000 MiB, "
                          "Azure's largest block)")


define_check(_PKG, check_blob_store_config)


def blob_store_manager_from_config(config: Mapping[str, str], *, clock: Clock = system_clock_ms,
                                   retry: bool = True, requests: StorageRequests | None = None) -> BlobStoreManager:
    """The blob store ``blob.store.manager.factory`` names, with ``blob.store.ttl.days`` and the
    ``blob.store.retry.policy.*`` retries (``retry=False`` returns the bare manager); ``requests`` counts the
    Azure store's requests (a local store sends none)."""
    cfg = Config.of(config)
    factory = MANAGER_FACTORY.get(cfg)
    ttl_ms = int(TTL_DAYS.get(cfg) * 86_400_000)
    manager: BlobStoreManager
    if factory == "azure":
        from sparza.blobstore.azure import AzureBlobStoreManager

        container = AZURE_CONTAINER.get(cfg)
        if not container or len(container) < 3:
            raise ConfigError(AZURE_CONTAINER.key, container, "an Azure container name (3+ characters)")
        manager = AzureBlobStoreManager(container, cfg, ttl_ms=ttl_ms, clock=clock, requests=requests)
    else:
        from sparza.blobstore.local import LocalBlobStoreManager

        manager = LocalBlobStoreManager(Path(LOCAL_ROOT.get(cfg)), ttl_ms=ttl_ms, clock=clock,
                                        fsync=LOCAL_FSYNC.get(cfg))
    if not retry:
        return manager
    return RetryingBlobStoreManager(manager, RetryPolicy.from_config(cfg))
