"""System protocols (Samza's SystemFactory / Admin / Consumer / Producer) and the system registry.

A *system* is configured under ``systems.<name>.*``; ``systems.<name>.samza.factory`` names its
factory: a short name (``delta``, ``azureblob``) or a dotted Python path ``module:Class`` /
``module.Class``. Implementations live in sibling packages and only need to satisfy these protocols.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sparza.config import Config, define_key
from sparza.errors import ConfigError
from sparza.metrics import MetricsRegistry
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStreamPartition

__all__ = [
    "SYSTEM_FACTORIES",
    "StreamSpec",
    "SystemAdmin",
    "SystemConsumer",
    "SystemFactory",
    "SystemProducer",
    "SystemStreamMetadata",
    "SystemStreamPartitionMetadata",
    "get_system_factory",
    "load_object",
]


@dataclass(frozen=True, slots=True)
class SystemStreamPartitionMetadata:
    """Offsets of one partition: ``oldest`` and ``newest`` existing messages (None when empty) and
    ``upcoming``, the offset the next message written will get."""

    oldest: str | None
    newest: str | None
    upcoming: str


@dataclass(frozen=True, slots=True)
class SystemStreamMetadata:
    """A stream's partition count and per-partition offsets."""

    stream: str
    partitions: dict[int, SystemStreamPartitionMetadata]
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        """How many partitions the stream has."""
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """What to create: a stream id, its physical location (None: the system's default) and partitions."""

    stream: str
    partitions: int
    location: str | None = None
    properties: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class SystemAdmin(Protocol):
    """Stream metadata and management for one system."""

    def get_system_stream_metadata(self, streams: set[str]) -> dict[str, SystemStreamMetadata]:
        """Metadata of each named stream (raises if a stream does not exist)."""
        ...

    def create_stream(self, spec: StreamSpec) -> bool:
        """Create the stream; False when it already exists with the same partition count."""
        ...

    def offset_comparator(self, a: str, b: str) -> int:
        """Negative, zero or positive as offset ``a`` is before, equal to or after ``b``."""
        ...


@runtime_checkable
class SystemConsumer(Protocol):
    """Reads messages of SSPs in offset order."""

    def start(self) -> None:
        """Open connections; called once before reading."""
        ...

    def read(self, ssp: SystemStreamPartition, start: str | None,
             end: str | None = None) -> Iterator[IncomingMessageEnvelope]:
        """Messages of ``ssp`` with offsets in ``[start, end)`` in order (start None: the oldest)."""
        ...

    def stop(self) -> None:
        """Release resources."""
        ...


@runtime_checkable
class SystemProducer(Protocol):
    """Sends messages to a system. ``flush(source)`` makes everything sent by ``source`` durable."""

    def register(self, source: str) -> None:
        """Declare a source (a task name) before ``start``."""
        ...

    def start(self) -> None:
        """Open connections and create what is missing."""
        ...

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Buffer one message; may block for backpressure but never drops it."""
        ...

    def flush(self, source: str) -> None:
        """Write everything ``source`` sent; raises if it could not (the caller may replay)."""
        ...

    def stop(self) -> None:
        """Flush nothing further and release resources."""
        ...


@runtime_checkable
class SystemFactory(Protocol):
    """Builds the admin, consumer and producer of a system named in config."""

    def get_admin(self, system_name: str, config: Config) -> SystemAdmin:
        """The system's admin."""
        ...

    def get_consumer(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> SystemConsumer:
        """A consumer for the system."""
        ...

    def get_producer(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> SystemProducer:
        """A producer for the system."""
        ...


SYSTEM_FACTORIES: dict[str, str] = {
    "delta": "sparza.systems.delta:DeltaSystemFactory",
    "azureblob": "sparza.systems.azureblob:AzureBlobSystemFactory",
}
"""Short factory names accepted in ``systems.<name>.samza.factory``."""


define_key("systems.<system>.samza.factory", None,
           "The system's factory: delta, azureblob or a dotted Python path.", "sparza.systems")


def load_object(path: str, key: str = "factory") -> Any:
    """Import ``package.module:Name`` or ``package.module.Name``; errors name the config ``key``."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(key, path, "a dotted Python path like 'package.module.Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(key, path, f"an importable module ({exc})") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(key, path, f"a name defined in module {module_name}") from exc


def get_system_factory(config: Config, system_name: str) -> SystemFactory:
    """The factory configured for ``systems.<system_name>.samza.factory``."""
    key = f"systems.{system_name}.samza.factory"
    name = config.get_str(key)
    target = SYSTEM_FACTORIES.get(name.strip().lower(), name)
    factory = load_object(target, key)
    return factory() if isinstance(factory, type) else factory  # type: ignore[no-any-return]


