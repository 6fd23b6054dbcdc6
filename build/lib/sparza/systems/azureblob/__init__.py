"""SEP-26 in sparza: a SystemProducer that writes messages as block blobs (Avro, JSON lines or raw) to
Azure Blob Storage, plus a Spark sink (``format("azureblob")``) built on the same writers.

Container = system name; blob = ``<stream>[/<partition>]/yyyy/MM/dd/HH/mm-ss-<writer>.avro[.gz]`` where
``<writer>`` names the source and its transaction (or producer instance); one blob per (source, stream,
partition) between flushes. See ``docs/azureblob.md``.
"""

from sparza.systems.azureblob.errors import (
    AzureBlobConnectionError,
    AzureBlobError,
    AzureBlobRequestError,
    BlobOwnedError,
    FlushTimeoutError,
    SchemaChangeError,
    TransactionStateError,
    UnsupportedMessageError,
    WriteOnlySystemError,
    WriterClosedError,
)
from sparza.systems.azureblob.factory import AzureBlobSystemFactory
from sparza.systems.azureblob.metadata import (
    BlobMetadataContext,
    BlobMetadataGenerator,
    DefaultBlobMetadataGenerator,
)
from sparza.systems.azureblob.producer import AzureBlobSystemProducer
from sparza.systems.azureblob.settings import AzureBlobSettings

__all__ = [
    "AzureBlobConnectionError",
    "AzureBlobError",
    "AzureBlobRequestError",
    "AzureBlobSettings",
    "AzureBlobSystemFactory",
    "AzureBlobSystemProducer",
    "BlobMetadataContext",
    "BlobMetadataGenerator",
    "BlobOwnedError",
    "DefaultBlobMetadataGenerator",
    "FlushTimeoutError",
    "SchemaChangeError",
    "TransactionStateError",
    "UnsupportedMessageError",
    "WriteOnlySystemError",
    "WriterClosedError",
    "register_azureblob_sink",
]


def register_azureblob_sink(spark: object) -> None:
    """Register ``format("azureblob")`` with a SparkSession (the registry is per session)."""
    from sparza.systems.azureblob.spark import register_azureblob_sink as _register

    _register(spark)
