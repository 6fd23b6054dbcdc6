"""Building the configured blob store (``blob.store.*``), wrapped in the retry policy."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sparza.blobstore.api import BlobStoreManager, Clock, system_clock_ms
from sparza.blobstore.retry import RetryingBlobStoreManager, RetryPolicy
from sparza.config import Config, define_check, define_key
from sparza.errors import ConfigError

__all__ = ["BLOB_STORE_FACTORIES", "DEFAULT_LOCAL_ROOT", "blob_store_manager_from_config", "check_blob_store_config"]

_PKG = "sparza.blobstore"
BLOB_STORE_FACTORIES = ("local", "azure")
DEFAULT_LOCAL_ROOT = ".sparza/blobstore"

define_key("blob.store.manager.factory", "local", "blob store for state snapshots: local or azure", _PKG)
define_key("blob.store.local.root", DEFAULT_LOCAL_ROOT, "directory of the local blob store; task checkpoints default "
           "to <root>/checkpoints", _PKG)
define_key("blob.store.local.fsync", True, "fsync every blob the local store writes", _PKG)
define_key("blob.store.azure.container", None, "Azure container of the azure blob store", _PKG)
define_key("blob.store.azure.max.concurrency", 4, "parallel connections per blob upload/download", _PKG)
define_key("blob.store.azure.block.size", "8MB", "block size of parallel uploads and range size of downloads",
           _PKG)
define_key("blob.store.azure.sdk.retries", 1, "retries inside the Azure SDK (under sparza's retry policy)", _PKG)
define_key("blob.store.azure.timeout.seconds", 20, "connection timeout of Azure calls", _PKG)
define_key("blob.store.ttl.days", 30, "TTL of every new blob until its snapshot commits (remove_ttl)", _PKG)


_AZURE_MAX_BLOCK = 4000 * 1024 * 1024  # Azure's largest block


def check_blob_store_config(config: Config) -> None:
    """Raise :class:`ConfigError` for the first ``blob.store.*`` value outside its range (checked before
    anything runs): the factory, the TTL, and the Azure store's concurrency, block size (64 KiB to Azure's
    4000 MiB block), SDK retries and timeout."""
    cfg = config if isinstance(config, Config) else Config(config)
    cfg.get_choice("blob.store.manager.factory", BLOB_STORE_FACTORIES, "local")
    if cfg.get_float("blob.store.ttl.days", 30.0) <= 0:
        raise ConfigError("blob.store.ttl.days", cfg.get_str("blob.store.ttl.days"), "a positive number of days")
    cfg.get_int("blob.store.azure.max.concurrency", 4, min_value=1)
    block = cfg.get_bytes("blob.store.azure.block.size", 8 << 20, min_value=1 << 16)
    if block > _AZURE_MAX_BLOCK:
        raise ConfigError("blob.store.azure.block.size", str(block), f"at most {_AZURE_MAX_BLOCK} bytes (4000 MiB, "
                          "Azure's largest block)")
    cfg.get_int("blob.store.azure.sdk.retries", 1, min_value=0)
    cfg.get_int("blob.store.azure.timeout.seconds", 20, min_value=1)


define_check(_PKG, check_blob_store_config)


def blob_store_manager_from_config(config: Mapping[str, str], *, clock: Clock = system_clock_ms,
                                   retry: bool = True) -> BlobStoreManager:
    """The blob store ``blob.store.manager.factory`` names, with ``blob.store.ttl.days`` and the
    ``blob.store.retry.policy.*`` retries (``retry=False`` returns the bare manager)."""
    cfg = Config.of(config)
    factory = cfg.get_choice("blob.store.manager.factory", BLOB_STORE_FACTORIES, "local")
    ttl_days = cfg.get_float("blob.store.ttl.days", 30.0)
    if ttl_days <= 0:
        raise ConfigError("blob.store.ttl.days", str(ttl_days), "a positive number of days")
    ttl_ms = int(ttl_days * 86_400_000)
    manager: BlobStoreManager
    if factory == "azure":
        from sparza.blobstore.azure import AzureBlobStoreManager

        container = cfg.get_str("blob.store.azure.container", None)
        if not container or len(container) < 3:
            raise ConfigError("blob.store.azure.container", container, "an Azure container name (3+ characters)")
        manager = AzureBlobStoreManager(container, cfg, ttl_ms=ttl_ms, clock=clock)
    else:
        from sparza.blobstore.local import LocalBlobStoreManager

        root = Path(cfg.get_str("blob.store.local.root", DEFAULT_LOCAL_ROOT))
        manager = LocalBlobStoreManager(root, ttl_ms=ttl_ms, clock=clock,
                                        fsync=cfg.get_bool("blob.store.local.fsync", True))
    if not retry:
        return manager
    return RetryingBlobStoreManager(manager, RetryPolicy.from_config(cfg))
