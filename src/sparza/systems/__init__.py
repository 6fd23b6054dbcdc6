"""System protocols (Samza's SystemFactory / Admin / Consumer / Producer) and the system registry.

A *system* is configured under ``systems.<name>.*``; ``systems.<name>.samza.factory`` names its
factory: a short name (``delta``, ``azureblob``) or a dotted Python path ``module:Class`` /
``module.Class``. Implementations live in sibling packages and only need to satisfy these protocols.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import pyarrow as pa

from sparza.config import Config, define_check, define_key
from sparza.config.samza import resolve_factory
from sparza.errors import ConfigError
from sparza.metrics import MetricsRegistry
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStreamPartition

__all__ = [
    "SYSTEM_FACTORIES",
    "StreamSpec",
    "SupportsArrowRead",
    "SupportsArrowSend",
    "SupportsOffsetArithmetic",
    "SupportsOffsetKey",
    "SupportsPartitionCount",
    "SupportsStreamLocation",
    "SystemAdmin",
    "SystemConsumer",
    "SystemFactory",
    "SystemProducer",
    "SystemStreamMetadata",
    "SystemStreamPartitionMetadata",
    "Transaction",
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


class Transaction(NamedTuple):
    """The identity of one batch's output: ``app_id`` is ``<job.name>-<job.id>/<task>`` (or a sink id),
    ``version`` the batch's output version (strictly increasing per ``app_id``).

    A producer derives everything it writes for a transaction (names, ids, commit markers) from it,
    never from the wall clock or randomness, so a replay of the same batch with the same messages in
    the same order rewrites exactly its own output and adds nothing.
    """

    app_id: str
    version: int


@runtime_checkable
class SystemProducer(Protocol):
    """Sends messages to a system. The runtime drives every producer through one batch like this:

    1. ``begin(source, transaction)`` before the source's first ``send`` of the batch;
    2. ``send(source, envelope)`` any number of times (may stage data, never makes it visible under a
       name or offset another batch could own);
    3. either ``flush(source, transaction=...)``: make everything the source sent in this batch durable
       and visible, atomically per stream where the system allows it, and **idempotently**: a flush of a
       transaction already committed (a replay after a crash anywhere after a previous flush) commits
       nothing new, and a partially committed one completes only what is missing;
    4. or ``abandon(source)``: the batch failed; forget what the source sent since its last flush and
       make none of it visible (staged data may stay invisible until the system expires it).

    ``flush(source)`` without a transaction is the library use (tools, loaders): durable, not idempotent.
    ``stop()`` releases resources; what was neither flushed nor abandoned may be flushed then without a
    transaction (as Samza's stop does), so the runtime flushes or abandons every source before it.
    """

    def register(self, source: str) -> None:
        """Declare a source (a task name) before ``start``."""
        ...

    def start(self) -> None:
        """Open connections and create what is missing."""
        ...

    def begin(self, source: str, transaction: Transaction) -> None:
        """Announce the transaction of what ``source`` sends until its next flush or abandon."""
        ...

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Buffer one message; may block for backpressure but never drops it."""
        ...

    def flush(self, source: str, *, transaction: Transaction | None = None) -> None:
        """Make everything ``source`` sent durable (idempotently with a transaction); raises if it could not."""
        ...

    def abandon(self, source: str) -> None:
        """Drop everything ``source`` sent since its last flush without making any of it visible."""
        ...

    def stop(self) -> None:
        """Release resources (see the class docstring for what happens to unflushed messages)."""
        ...


@runtime_checkable
class SupportsArrowRead(Protocol):
    """A consumer that reads an SSP range as Arrow batches (much faster than envelopes in Python)."""

    def read_arrow(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                   include_control: bool = True, *, bounded: bool | None = None) -> Iterator[pa.RecordBatch]:
        """Rows of ``ssp`` in ``[start, end)``: columns ``offset`` (string), ``key``/``value`` (binary),
        ``timestamp`` (int64 ms), ``type`` (int8 MessageType), ``producer`` (string), in offset order."""
        ...


@runtime_checkable
class SupportsArrowSend(Protocol):
    """A producer that takes many messages as Arrow rows at once (no per-message Python)."""

    def send_rows(self, source: str, stream: str, rows: pa.RecordBatch | pa.Table) -> None:
        """Buffer ``rows`` (columns ``key`` binary, ``value`` binary, optional ``timestamp`` int64 and
        ``partition`` int32) for ``stream``, in row order; a row without a partition goes where
        ``send`` would send a message with its key. Flushed like sent messages."""
        ...


@runtime_checkable
class SupportsOffsetArithmetic(Protocol):
    """An admin that can cap a batch at N messages and count lag cheaply."""

    def offset_after(self, ssp: SystemStreamPartition, start: str, end: str, n: int) -> str:
        """The offset ``n`` messages after ``start``, or ``end`` when fewer lie in ``[start, end)``."""
        ...

    def count_between(self, ssp: SystemStreamPartition, start: str, end: str) -> int:
        """How many messages lie in ``[start, end)``."""
        ...


@runtime_checkable
class SupportsOffsetKey(Protocol):
    """An admin whose offsets have a sort key: keys compare as ``offset_comparator`` compares the offsets,
    at a fraction of its cost where many offsets are compared (one per adjunct message)."""

    def offset_key(self, offset: str) -> Any:
        """The sort key of ``offset`` (raises on a malformed offset, naming what is wrong)."""
        ...


@runtime_checkable
class SupportsPartitionCount(Protocol):
    """An admin that knows a stream's partition count without reading its offsets."""

    def partition_count(self, stream: str) -> int:
        """How many partitions ``stream`` has (raises if it does not exist)."""
        ...


@runtime_checkable
class SupportsStreamLocation(Protocol):
    """An admin that can say where a stream's data lives, for messages and tools."""

    def stream_location(self, stream: str) -> str:
        """A table location, a topic on its brokers …: what a user would look up."""
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
    "kafka": "sparza.systems.kafka:KafkaSystemFactory",
    "eventhubs": "sparza.systems.kafka.eventhubs:EventHubsSystemFactory",
    "inmemory": "sparza.systems.inmemory:InMemorySystemFactory",
}
"""Short factory names accepted in ``systems.<name>.samza.factory`` (Samza's class names for them are
mapped in :data:`sparza.config.samza.FACTORY_KINDS`)."""


define_key("systems.<system>.samza.factory", None,
           "The system's factory: delta, azureblob, kafka, eventhubs, inmemory (tests in one process), Samza's "
           "factory class of a system sparza has (e.g. org.apache.samza.system.kafka.KafkaSystemFactory), or a "
           "dotted Python path.", "sparza.systems")


def _check_factories(config: Config) -> list[ConfigError]:
    """Every system's factory exists in this sparza (a Samza class of a missing system is reported)."""
    problems = []
    for key, value in sorted(config.items()):
        if key.startswith("systems.") and key.endswith(".samza.factory") and key.count(".") == 3:
            name = value.strip().lower()
            if name and "." not in name and ":" not in name and name not in SYSTEM_FACTORIES:
                problems.append(ConfigError(key, value, "", message=(
                    f"config key '{key}' names the {name} system, which this sparza does not have (available: "
                    f"{', '.join(sorted(SYSTEM_FACTORIES))} or a dotted Python path): use a delta system in its "
                    "place")))
    return problems


define_check("sparza.systems", _check_factories, order=0, needs_translation=False)


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
    name = resolve_factory("system", key, config.get_str(key))  # Samza class names → short names
    if "." not in name and ":" not in name and name.strip().lower() not in SYSTEM_FACTORIES:
        raise ConfigError(key, name, f"one of {', '.join(sorted(SYSTEM_FACTORIES))} or a dotted Python path "
                                     "(this sparza has no such system)")
    target = SYSTEM_FACTORIES.get(name.strip().lower(), name)
    factory = load_object(target, key)
    return factory() if isinstance(factory, type) else factory  # type: ignore[no-any-return]


