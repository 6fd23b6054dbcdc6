"""The ``blob.store.*`` keys: which blob store holds state snapshots and task checkpoints, and how it is reached.

Declared here once; the blob store's builders and the runtime's start checks read them through these objects.
"""

from __future__ import annotations

from sparza.config import BOOL, STR, ByteSize, Choice, Float, Int, define_key

__all__ = [
    "AZURE_BLOCK_SIZE",
    "AZURE_CONTAINER",
    "AZURE_MAX_CONCURRENCY",
    "AZURE_SDK_RETRIES",
    "AZURE_TIMEOUT_SECONDS",
    "BLOB_STORE_FACTORIES",
    "DEFAULT_LOCAL_ROOT",
    "LOCAL_FSYNC",
    "LOCAL_ROOT",
    "MANAGER_FACTORY",
    "TTL_DAYS",
]

_PKG = "sparza.blobstore"
BLOB_STORE_FACTORIES = ("local", "azure")
"""The values of ``blob.store.manager.factory``."""
DEFAULT_LOCAL_ROOT = ".sparza/blobstore"
"""Where the local blob store lives unless ``blob.store.local.root`` says otherwise."""

MANAGER_FACTORY = define_key("blob.store.manager.factory", "local", "blob store for state snapshots: local or azure",
                             _PKG, kind=Choice(*BLOB_STORE_FACTORIES))
LOCAL_ROOT = define_key("blob.store.local.root", DEFAULT_LOCAL_ROOT, "directory of the local blob store; task "
                        "checkpoints default to <root>/checkpoints", _PKG, kind=STR)
LOCAL_FSYNC = define_key("blob.store.local.fsync", True, "fsync every blob the local store writes", _PKG, kind=BOOL)
AZURE_CONTAINER = define_key("blob.store.azure.container", None, "Azure container of the azure blob store", _PKG,
                             kind=STR)
AZURE_MAX_CONCURRENCY = define_key("blob.store.azure.max.concurrency", 4, "parallel connections per blob "
                                   "upload/download", _PKG, kind=Int(min_value=1))
AZURE_BLOCK_SIZE = define_key("blob.store.azure.block.size", "8MB", "block size of parallel uploads and range size "
                              "of downloads (64KB to 4000MB, Azure's largest block)", _PKG,
                              kind=ByteSize(min_value=1 << 16))
AZURE_SDK_RETRIES = define_key("blob.store.azure.sdk.retries", 1, "retries inside the Azure SDK (under sparza's "
                               "retry policy)", _PKG, kind=Int(min_value=0))
AZURE_TIMEOUT_SECONDS = define_key("blob.store.azure.timeout.seconds", 20, "connection timeout of Azure calls", _PKG,
                                   kind=Int(min_value=1))
TTL_DAYS = define_key("blob.store.ttl.days", 30, "TTL of every new blob until its snapshot commits (remove_ttl)", _PKG,
                      kind=Float(0, min_exclusive=True))
