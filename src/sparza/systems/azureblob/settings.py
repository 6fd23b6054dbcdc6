"""The producer's config keys (``systems.<container>.azureblob.*``), declared with their defaults.

Defaults are the seed's (SEP-26), not Samza's code where the two disagree: ``threadPoolCount`` is 2
and ``suffixRandomStringToBlobName`` is false. Every value is validated once, at construction, and a
bad one raises :class:`~sparza.errors.ConfigError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparza.azure.resolve import AccountKeys
from sparza.config import BOOL, STR, ByteSize, Choice, Config, Int, define_key
from sparza.errors import ConfigError

__all__ = [
    "ACCOUNT_KEYS",
    "AZURE_MAX_BLOB_SIZE",
    "AZURE_MAX_BLOCKS",
    "AZURE_MAX_BLOCK_SIZE",
    "UNLIMITED",
    "WRITER_FORMAT",
    "AzureBlobSettings",
]

_PKG = "systems.azureblob"
_P = "systems.<container>.azureblob."

UNLIMITED = (1 << 63) - 1
"""Java's Long.MAX_VALUE: the seed's "unlimited" for maxBlobSize and maxMessagesPerBlob."""

AZURE_MAX_BLOCKS = 50_000
"""Azure's limit of committed blocks per block blob."""

AZURE_MAX_BLOCK_SIZE = 4000 * 1024 * 1024
"""Azure's largest block (service version 2019-12-12 and later)."""

AZURE_MAX_BLOB_SIZE = AZURE_MAX_BLOCKS * AZURE_MAX_BLOCK_SIZE
"""Azure's largest block blob: 50,000 committed blocks of at most 4000 MiB."""

_ACCOUNT_NAME = define_key(_P + "account.name", None, "Storage account name (or use azure.storage.connect / dev "
                           "storage)", _PKG, kind=STR)
_ACCOUNT_KEY = define_key(_P + "account.key", None, "Storage account key; also read from sensitive.account.key and "
                          "from Samza's sensitive.systems.<container>.azureblob.account.key", _PKG, kind=STR)
_SENSITIVE_ACCOUNT_KEY = define_key(_P + "sensitive.account.key", None, "Storage account key (alternative "
                                    "spelling)", _PKG, kind=STR)
_ENDPOINT = define_key(_P + "endpoint", None, "Blob endpoint URL (Azurite, sovereign clouds); default "
                       "https://<account>.blob.core.windows.net", _PKG, kind=STR)
_PROXY_USE = define_key(_P + "proxy.use", False, "Send blob traffic through an HTTP proxy", _PKG, kind=BOOL)
_PROXY_HOSTNAME = define_key(_P + "proxy.hostname", None, "Proxy host when proxy.use is true", _PKG, kind=STR)
_PROXY_PORT = define_key(_P + "proxy.port", None, "Proxy port when proxy.use is true", _PKG, kind=Int(min_value=1))
def _prefix(system: str) -> str:
    return f"systems.{system}.azureblob."


ACCOUNT_KEYS = AccountKeys(_ACCOUNT_NAME, _ACCOUNT_KEY, _ENDPOINT, alternative_key=_SENSITIVE_ACCOUNT_KEY,
                           proxy_use=_PROXY_USE, proxy_hostname=_PROXY_HOSTNAME, proxy_port=_PROXY_PORT)
"""The keys naming an azureblob system's storage account (:func:`~sparza.azure.resolve_storage_account` with
``names={"container": system}``)."""
_COMPRESSION = define_key(_P + "compression.type", "none", "none or gzip; gzip compresses each block (multi-member "
                          "gzip)", _PKG, kind=Choice("none", "gzip"))
_FLUSH_THRESHOLD = define_key(_P + "maxFlushThresholdSize", 10485760, "Uncompressed bytes buffered per blob before a "
                              "block is staged (at most 4000MB, Azure's largest block)", _PKG,
                              kind=ByteSize(min_value=1))
_MAX_BLOB_SIZE = define_key(_P + "maxBlobSize", UNLIMITED, "Uncompressed bytes per blob before it is committed and a "
                            "new one started", _PKG, kind=ByteSize(min_value=1))
_MAX_MESSAGES = define_key(_P + "maxMessagesPerBlob", UNLIMITED, "Messages per blob before it is committed and a new "
                           "one started", _PKG, kind=Int(min_value=1))
_THREADS = define_key(_P + "threadPoolCount", 2, "Threads uploading blocks asynchronously", _PKG, kind=Int(min_value=1))
_QUEUE_SIZE = define_key(_P + "blockingQueueSize", None, "Blocks waiting for an upload thread (default 2 x "
                         "threadPoolCount); when full, the sending thread uploads itself (backpressure)", _PKG,
                         kind=Int(min_value=0))
_FLUSH_TIMEOUT = define_key(_P + "flushTimeoutMs", 180000, "Time flush waits for pending block uploads", _PKG,
                            kind=Int(min_value=1))
_CLOSE_TIMEOUT = define_key(_P + "closeTimeoutMs", 300000, "Time flush waits for block lists to be committed", _PKG,
                            kind=Int(min_value=1))
_RANDOM_SUFFIX = define_key(_P + "suffixRandomStringToBlobName", False, "Add 8 random characters to names written "
                            "outside a transaction (names are unique per producer without it; ignored in a "
                            "transaction)", _PKG, kind=BOOL)
WRITER_FORMAT = define_key(_P + "writer.format", "avro", "avro (Avro container files), jsonl (JSON lines) or raw "
                           "(bytes as sent)", _PKG, kind=Choice("avro", "jsonl", "raw"))
_MAX_BUFFERED = define_key(_P + "maxBufferedBytes", 268435456, "Bytes buffered by the whole producer; above it the "
                           "writer being written stages its buffer early (caps memory with many open partitions)",
                           _PKG, kind=ByteSize(min_value=1))
_METADATA_GENERATOR = define_key(_P + "metadataPropertiesGeneratorFactory", None, "Dotted path of a "
                                 "BlobMetadataGenerator class or factory; default: streamName, rawSizeBytes, "
                                 "numberOfRecords", _PKG, kind=STR)
_METADATA_CONFIG = define_key(_P + "metadataGeneratorConfig.*", None, "Passed to the metadata generator factory",
                              _PKG)
_STREAM_SCHEMA = define_key("systems.<container>.streams.<stream>.avro.schema", None, "Avro schema (JSON text or a "
                            "file path) for plain dict messages of a stream", _PKG, kind=STR)


@dataclass(frozen=True)
class AzureBlobSettings:
    """The validated producer settings of one system (container). Picklable (travels to executors)."""

    system: str
    compression: str = "none"
    max_flush_threshold_size: int = 10 * 1024 * 1024
    max_blob_size: int = UNLIMITED
    max_messages_per_blob: int = UNLIMITED
    thread_pool_count: int = 2
    blocking_queue_size: int = 4
    flush_timeout_ms: int = 180_000
    close_timeout_ms: int = 300_000
    suffix_random_string: bool = False
    writer_format: str = "avro"
    max_buffered_bytes: int = 256 * 1024 * 1024
    metadata_generator: str | None = None
    metadata_generator_config: dict[str, str] = field(default_factory=dict)
    stream_schemas: dict[str, str] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        """``systems.<container>.azureblob.``: where these keys live."""
        return _prefix(self.system)

    @property
    def extension(self) -> str:
        """The blob name's extension: ``.avro``/``.jsonl``/``.bin`` plus ``.gz`` for gzip."""
        base = {"avro": ".avro", "jsonl": ".jsonl", "raw": ".bin"}[self.writer_format]
        return base + (".gz" if self.compression == "gzip" else "")

    @classmethod
    def from_config(cls, system: str, config: Config | dict[str, Any]) -> AzureBlobSettings:
        """Read and validate every key under ``systems.<system>.azureblob.``."""
        cfg = Config.of(config)
        if len(system) < 3 or len(system) > 63 or not all(c.isalnum() or c == "-" for c in system) \
                or system != system.lower() or system.startswith("-") or "--" in system:
            raise ConfigError(f"systems.{system}", system, "a system name that is a valid Azure container name "
                              "(3-63 lowercase letters, digits and single hyphens)")
        c = {"container": system}
        threads = _THREADS.get(cfg, **c)
        threshold = _FLUSH_THRESHOLD.get(cfg, **c)
        if threshold > AZURE_MAX_BLOCK_SIZE:
            raise ConfigError(_FLUSH_THRESHOLD.name(**c), str(threshold),
                              f"at most {AZURE_MAX_BLOCK_SIZE} bytes (4000 MiB, Azure's largest block)")
        max_blob = _MAX_BLOB_SIZE.get(cfg, **c)
        if max_blob != UNLIMITED and max_blob > AZURE_MAX_BLOB_SIZE:
            raise ConfigError(_MAX_BLOB_SIZE.name(**c), str(max_blob),
                              f"at most {AZURE_MAX_BLOB_SIZE} bytes (50,000 blocks of 4000 MiB, Azure's largest "
                              "block blob)")
        schemas = {names["stream"]: _STREAM_SCHEMA.require(cfg, **names) for names in _STREAM_SCHEMA.find(cfg)
                   if names["container"] == system and _STREAM_SCHEMA.is_set(cfg, **names)}
        queue = _QUEUE_SIZE.get(cfg, **c)
        return cls(
            system=system,
            compression=_COMPRESSION.get(cfg, **c),
            max_flush_threshold_size=threshold,
            max_blob_size=max_blob,
            max_messages_per_blob=_MAX_MESSAGES.get(cfg, **c),
            thread_pool_count=threads,
            blocking_queue_size=2 * threads if queue is None else queue,
            flush_timeout_ms=_FLUSH_TIMEOUT.get(cfg, **c),
            close_timeout_ms=_CLOSE_TIMEOUT.get(cfg, **c),
            suffix_random_string=_RANDOM_SUFFIX.get(cfg, **c),
            writer_format=WRITER_FORMAT.get(cfg, **c),
            max_buffered_bytes=_MAX_BUFFERED.get(cfg, **c),
            metadata_generator=_METADATA_GENERATOR.get(cfg, **c),
            metadata_generator_config=_METADATA_CONFIG.subset(cfg, **c),
            stream_schemas=schemas,
        )
