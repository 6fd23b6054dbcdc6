"""Blob metadata set at commit: by default ``streamName``, ``rawSizeBytes`` and ``numberOfRecords``.

Samza's default generator returned nothing (those three names existed only in a test mock); here they
are the default and a generator of your own can add or replace entries:
``systems.<c>.azureblob.metadataPropertiesGeneratorFactory: mypkg.mod.MyGenerator`` where
``MyGenerator(config)`` (``config`` = the ``metadataGeneratorConfig.*`` keys) has
``get_blob_metadata(context) -> dict[str, str]``. A plain function ``f(context)`` works too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sparza.errors import ConfigError
from sparza.systems import load_object

__all__ = [
    "BlobMetadataContext",
    "BlobMetadataGenerator",
    "DefaultBlobMetadataGenerator",
    "load_metadata_generator",
]


@dataclass(frozen=True, slots=True)
class BlobMetadataContext:
    """What is known about a blob when it is committed."""

    stream_name: str
    blob_name: str
    raw_size_bytes: int
    number_of_records: int


@runtime_checkable
class BlobMetadataGenerator(Protocol):
    """Produces the metadata of a blob at commit (values must be ASCII strings)."""

    def get_blob_metadata(self, context: BlobMetadataContext) -> dict[str, str]:
        """The metadata to set on the committed blob."""
        ...


class DefaultBlobMetadataGenerator:
    """``streamName``, ``rawSizeBytes`` (uncompressed content bytes) and ``numberOfRecords``."""

    def __init__(self, config: Mapping[str, str] | None = None) -> None:
        self.config = dict(config or {})

    def get_blob_metadata(self, context: BlobMetadataContext) -> dict[str, str]:
        return {"streamName": context.stream_name, "rawSizeBytes": str(context.raw_size_bytes),
                "numberOfRecords": str(context.number_of_records)}


class _FunctionGenerator:
    def __init__(self, fn: Callable[[BlobMetadataContext], dict[str, str]]) -> None:
        self._fn = fn

    def get_blob_metadata(self, context: BlobMetadataContext) -> dict[str, str]:
        return self._fn(context)


def load_metadata_generator(path: str | None, config: Mapping[str, str], key: str) -> BlobMetadataGenerator:
    """The generator named by ``path`` (None: the default), built with ``config``; errors name ``key``."""
    if not path:
        return DefaultBlobMetadataGenerator(config)
    target = load_object(path, key)
    if isinstance(target, type):
        instance = target(dict(config))
        if not isinstance(instance, BlobMetadataGenerator):
            raise ConfigError(key, path, "a class with get_blob_metadata(context)")
        return instance
    if isinstance(target, BlobMetadataGenerator):
        return target
    if callable(target):
        return _FunctionGenerator(target)
    raise ConfigError(key, path, "a BlobMetadataGenerator class, instance or function")
