"""System protocols (Samza's SystemFactory / Admin / Consumer / Producer) and the system registry.

A *system* is configured under ``systems.<name>.*``; ``systems.<name>.samza.factory`` names its
factory: a short name (``delta``, ``azureblob``) or a dotted Python path ``module:Class`` /
``module.Class``. Implementations live in sibling packages and only need to satisfy these protocols.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import pyarrow as pa

from sparza.config import STR, Config, define_check, define_key
from sparza.config.samza import resolve_factory
from sparza.errors import ConfigError
from sparza.metrics import MetricsRegistry
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStreamPartition
from sparza.systems.settings import STREAM_INTERMEDIATE

__all__ = [
    "SYSTEM_FACTORIES",
    "SYSTEM_FACTORY",
    "MessageRows",
    "StreamSpec",
    "SupportsArrowRead",
    "SupportsArrowSend",
    "SupportsConcurrentFlush",
    "SupportsConfigCheck",
    "SupportsDeleteMessages",
    "SupportsDeletedMessagesPolicy",
    "SupportsFencing",
    "SupportsKeyPartitioner",
    "SupportsMessageCount",
    "SupportsOffsetArithmetic",
    "SupportsOffsetKey",
    "SupportsOffsetsForTimes",
    "SupportsPartitionCount",
    "SupportsPartitionGrowth",
    "SupportsProcessingTime",
    "SupportsRowRead",
    "SupportsStreamLocation",
    "SystemAdmin",
    "SystemConsumer",
    "SystemFactory",
    "SystemProducer",
    "SystemStreamMetadata",
    "SystemStreamPartitionMetadata",
    "Transaction",
    "check_configured_streams",
    "check_registry_schemas",
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
    """What to create: a stream id, its physical location (None: the system's default) and partitions.

    ``intermediate``: a stream between two stages of an application, which sparza creates and whose committed
    messages it deletes (:class:`SupportsDeleteMessages`); a system may create it with settings of its own (a
    Kafka topic without time retention, as the records carry event times that may be old)."""

    stream: str
    partitions: int
    location: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    intermediate: bool = False


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


class MessageRows(NamedTuple):
    """A run of one SSP's messages as parallel Python lists (what a per-message task's envelopes are built from):
    ``offsets`` (str), ``keys``/``values`` (bytes or None), ``timestamps`` (event ms), ``types`` (the
    :class:`~sparza.streams.MessageType` byte, control messages in place among the data)."""

    offsets: list[str]
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int | None]
    types: list[int]


@runtime_checkable
class SupportsRowRead(Protocol):
    """A consumer that reads an SSP range as Python column lists with no Arrow in between (Kafka: its messages
    arrive as Python objects, so Arrow would be built only to be taken apart again for a per-message task)."""

    def read_rows(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                  include_control: bool = True, *, bounded: bool | None = None) -> Iterator[MessageRows]:
        """The rows :meth:`SupportsArrowRead.read_arrow` would read, in the same order and chunks of any size."""
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
class SupportsMessageCount(Protocol):
    """An admin whose offsets are not dense (Kafka: transaction markers and aborted records take offsets, so
    ``count_between`` is only a bound) that can count the messages of a range exactly by reading them. Used where
    a count decides an error (an ended task's input grew), never for lag."""

    def count_messages(self, ssp: SystemStreamPartition, start: str, end: str) -> int:
        """How many messages a consumer reads in ``[start, end)``."""
        ...


@runtime_checkable
class SupportsDeletedMessagesPolicy(Protocol):
    """An admin whose streams lose messages nobody read yet (Kafka: a topic's retention) and whose config says
    what a task whose checkpointed offset was deleted does. Without it, or when it says no, the job stops naming
    the gap."""

    def skips_deleted_messages(self, stream: str) -> bool:
        """True when such a task resumes at the oldest message left (Kafka's ``consumer.auto.offset.reset``)."""
        ...


@runtime_checkable
class SupportsFencing(Protocol):
    """A producer whose flush holds something open on the system while it runs (Kafka: a transaction), which an
    instance of the task that died mid-flush leaves open and readers wait behind (a ``read_committed`` consumer
    stops at the open transaction, whoever's records follow it) until a new instance of the task ends it.

    The runtime calls :meth:`fence` when a task starts where its checkpoint holds an intent naming this system (a
    batch that began to flush and did not commit), beside the container's loop and before the task's first batch,
    so the other tasks' output is readable again without waiting for that batch."""

    def fence(self, source: str, app_id: str) -> None:
        """End what an earlier instance of ``source`` (``app_id`` as its batches' transactions name it) left
        open; the client opened for it serves ``source``'s next ``begin``."""
        ...


@runtime_checkable
class SupportsProcessingTime(Protocol):
    """A producer that needs a time where a message carries none (the Azure blob producer's blob paths).

    The runtime calls it after ``begin`` with the batch's processing time: the time the batch was planned,
    recorded in the plan, so a replay of the batch gets the very same time (wall-clock time would rename
    its outputs)."""

    def set_processing_time(self, source: str, epoch_ms: int) -> None:
        """The processing time of ``source``'s running batch, in epoch milliseconds."""
        ...


@runtime_checkable
class SupportsKeyPartitioner(Protocol):
    """An admin that says which partition a key goes to (its producers' partitioner): a live query of a store keyed
    like the input finds the task that holds the key."""

    def partition_of(self, stream: str, key: bytes) -> int:
        """The partition of ``stream`` a message with key bytes ``key`` is written to."""
        ...


@runtime_checkable
class SupportsConcurrentFlush(Protocol):
    """A producer whose ``flush`` of one source may run while it flushes another (each source has a client of its
    own: Kafka's transactional producer per task). A container commits its tasks beside each other; the flushes of
    a producer without this capability are taken one at a time (its ``send`` for other sources goes on meanwhile,
    so ``send``, ``flush`` and ``abandon`` of different sources must not share unguarded state)."""

    def flushes_concurrently(self) -> bool:
        """True: flushes of different sources may overlap."""
        ...


@runtime_checkable
class SupportsConfigCheck(Protocol):
    """A system factory that can check its system's settings without touching the system: ``sparza config
    check`` and ``sparza run`` call it before Spark starts, so a value outside its documented range is one
    line naming the key and the limit, not a failed batch."""

    def check_config(self, system_name: str, config: Config) -> None:
        """Raise :class:`~sparza.errors.ConfigError` for the first setting of ``system_name`` that cannot work."""
        ...


@runtime_checkable
class SupportsOffsetKey(Protocol):
    """An admin whose offsets have a sort key: keys compare as ``offset_comparator`` compares the offsets,
    at a fraction of its cost where many offsets are compared (one per adjunct message)."""

    def offset_key(self, offset: str) -> Any:
        """The sort key of ``offset`` (raises on a malformed offset, naming what is wrong)."""
        ...


@runtime_checkable
class SupportsOffsetsForTimes(Protocol):
    """An admin whose system finds cheaply where a time starts in a partition (Kafka's ListOffsets by timestamp):
    a rewind to a time reads from there instead of from the partition's oldest offset."""

    def offsets_for_times(self, ssps: list[SystemStreamPartition], time_ms: int) -> dict[SystemStreamPartition,
                                                                                          str | None]:
        """Per SSP, the first offset whose record's time is at or after ``time_ms`` (None: no such record). It must
        never lie after the first message whose event time is at or after ``time_ms``: callers read on from it."""
        ...


@runtime_checkable
class SupportsPartitionCount(Protocol):
    """An admin that knows a stream's partition count without reading its offsets."""

    def partition_count(self, stream: str) -> int:
        """How many partitions ``stream`` has (raises if it does not exist)."""
        ...


@runtime_checkable
class SupportsPartitionGrowth(Protocol):
    """An admin that can give a stream more partitions (Kafka's CreatePartitions): ``sparza stream grow``, and tests of
    what a job does when its input grows (:mod:`sparza.engine.partitions`)."""

    def grow_stream(self, stream: str, partitions: int) -> int:
        """Give ``stream`` ``partitions`` partitions in all (more than it has; raises otherwise); returns how many it
        had."""
        ...


@runtime_checkable
class SupportsDeleteMessages(Protocol):
    """An admin that can remove messages every reader has committed past (Samza's ``SystemAdmin.deleteMessages``):
    the runtime calls it for intermediate streams, whose only reader is the next stage of the application."""

    def delete_messages(self, offsets: Mapping[SystemStreamPartition, str]) -> None:
        """Remove the messages before each SSP's offset (the next offset to read, as a checkpoint holds it). A
        system may keep more than asked (whole files, a whole table's horizon), never less."""
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


SYSTEM_FACTORY = define_key("systems.<system>.samza.factory", None,
                            "The system's factory: delta, azureblob, kafka, eventhubs, inmemory (tests in one "
                            "process), Samza's factory class of a system sparza has (e.g. "
                            "org.apache.samza.system.kafka.KafkaSystemFactory), or a dotted Python path.",
                            "sparza.systems", kind=STR)
"""``systems.<system>.samza.factory``."""


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


def _check_system_settings(config: Config) -> None:
    """Every system's settings, by its factory when it :class:`SupportsConfigCheck` (Azure's block and blob
    limits, librdkafka's names and ranges, typed-table schemas): found before anything runs."""
    for key in sorted(config):
        if key.startswith("systems.") and key.endswith(".samza.factory") and key.count(".") == 3:
            name = key.split(".")[1]
            factory = get_system_factory(config, name)
            if isinstance(factory, SupportsConfigCheck):
                factory.check_config(name, config)


define_check("sparza.systems", _check_system_settings, order=50)


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
    key = SYSTEM_FACTORY.name(system=system_name)
    # Samza class names → short names
    name = resolve_factory("system", key, SYSTEM_FACTORY.require(config, system=system_name))
    if "." not in name and ":" not in name and name.strip().lower() not in SYSTEM_FACTORIES:
        raise ConfigError(key, name, f"one of {', '.join(sorted(SYSTEM_FACTORIES))} or a dotted Python path "
                                     "(this sparza has no such system)")
    target = SYSTEM_FACTORIES.get(name.strip().lower(), name)
    factory = load_object(target, key)
    return factory() if isinstance(factory, type) else factory  # type: ignore[no-any-return]




_NOT_STREAMS_TO_CHECK = (".delta.table.", ".avro.schema")  # typed tables are created on first write; blobs


def check_configured_streams(config: Config, known: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
                             warn: Callable[[str], None] | None = None) -> None:
    """The streams a job writes exist before it starts, except ``known`` (system, stream) pairs checked
    elsewhere (inputs), intermediate streams (created by the planner) and typed tables (created on first
    write); otherwise the first message sent there fails the job after Spark started.

    A stream the config names as an output (``task.dead.letter.stream``, ``task.late.messages.stream``, or
    the ``system.stream`` value of a setting the job's own code reads, such as the keyed count's
    ``keyed_count.output``) that does not exist raises :class:`~sparza.errors.StartCheckError` naming the
    key and the command that creates it. A stream the config only describes (a serde, a physical name
    under ``systems.<s>.streams.<x>``) may be a leftover the job never writes: its absence is a warning
    (``warn``, default stderr).

    Then every stream schema a system's schema registry governs is one the registry accepts
    (:func:`check_registry_schemas`)."""
    from sparza.config.check import keys_read_by_job_code
    from sparza.errors import StartCheckError, job_config_ref

    systems = {k.split(".")[1] for k in config if k.startswith("systems.") and k.endswith(".samza.factory")}
    declared: dict[tuple[str, str], str] = {}
    for key in ("task.dead.letter.stream", "task.late.messages.stream", *keys_read_by_job_code(config)):
        value = str(config.get(key) or "").strip()
        system, dot, stream = value.partition(".")
        if dot and system in systems and stream and " " not in value:
            declared.setdefault((system, stream), key)
    described: dict[tuple[str, str], str] = {}
    created_later: set[tuple[str, str]] = set()
    for key in sorted(config):
        parts = key.split(".")
        if len(parts) < 5 or parts[0] != "systems" or parts[2] != "streams":
            continue
        system = parts[1]
        rest = key[len(f"systems.{system}.streams."):]
        if any(mark in key for mark in _NOT_STREAMS_TO_CHECK):
            created_later.add((system, rest.split(".delta.table.")[0].split(".avro.schema")[0]))
            continue
        # A stream id may hold dots: the setting is the longest known suffix; the stream is what precedes it.
        found = next((rest[: -len(suffix) - 1] for suffix in _STREAM_SETTING_SUFFIXES
                      if rest.endswith("." + suffix)), None)
        if found is None:
            continue
        stream = found
        if stream and not STREAM_INTERMEDIATE.get(config, system=system, stream=stream):
            described.setdefault((system, stream), key)
    admins: dict[str, Any] = {}
    for pair in sorted(set(declared) | set(described)):
        if pair in known or pair in created_later:
            continue
        system, stream = pair
        if system not in admins:
            try:
                admins[system] = get_system_factory(config, system).get_admin(system, config)
            except Exception:
                admins[system] = None  # a write-only system (azureblob) or one the factory check reports
        admin = admins[system]
        if not isinstance(admin, SupportsPartitionCount):
            continue
        try:
            admin.partition_count(stream)
        except LookupError as exc:
            where = f" ({admin.stream_location(stream)})" if isinstance(admin, SupportsStreamLocation) else ""
            # Each system's not-found error says how to create its streams (in-memory ones are declared).
            hint = (str(exc) if "sparza stream create" not in str(exc) else
                    f"create it first: sparza stream create {stream} --system {system} --partitions N --config "
                    f"{job_config_ref()}")
            if pair in declared:
                key = declared[pair]
                raise StartCheckError(key, None, "", message=(
                    f"config key '{key}' names output stream {system}.{stream}{where}, which does not exist: "
                    f"{hint}")) from exc
            line = (f"config key '{described[pair]}' describes stream {system}.{stream}{where}, which does not "
                    f"exist; if the job writes to it, {hint}")
            (warn or (lambda text: print(f"warning: {text}", file=sys.stderr, flush=True)))(line)
    check_registry_schemas(config)


def check_registry_schemas(config: Config) -> None:
    """Each ``systems.<s>.streams.<x>.samza.<key|msg>.schema`` of a system with a schema registry, whose serde
    is avro, is one its subject accepts (compatible under the subject's level, or registered already when
    auto-registration is off): otherwise the first record written would fail the job after Spark started.
    Raises :class:`~sparza.schemaregistry.IncompatibleSchemaError` naming the subject and the version, or
    :class:`~sparza.errors.StartCheckError` when the registry does not answer."""
    from sparza.errors import StartCheckError
    from sparza.schemaregistry import RegistryAvroSerde, SchemaRegistryError
    from sparza.systems.settings import stream_serde

    for key in sorted(config):
        parts = key.split(".")
        if len(parts) < 7 or parts[0] != "systems" or parts[2] != "streams" or parts[-1] != "schema" \
                or parts[-2] not in ("key", "msg") or parts[-3] != "samza":
            continue
        system, stream, which = parts[1], ".".join(parts[3:-3]), parts[-2]
        if not config.get(f"systems.{system}.schema.registry.url"):
            continue
        serde = stream_serde(config, system, stream, which)
        if not isinstance(serde, RegistryAvroSerde):
            continue
        try:
            serde.check()
        except SchemaRegistryError as exc:
            url_key = f"systems.{system}.schema.registry.url"
            raise StartCheckError(url_key, config.get(url_key), "", message=(
                f"config key '{key}': cannot check the schema of stream {system}.{stream} with subject "
                f"'{serde.subject}': {exc}")) from exc


_STREAM_SETTING_SUFFIXES = ("samza.key.serde", "samza.msg.serde", "samza.key.schema", "samza.msg.schema",
                            "samza.physical.name", "samza.offset.default", "samza.reset.offset", "samza.bootstrap",
                            "samza.intermediate", "samza.delete.committed.messages", "samza.broadcast",
                            "samza.priority", "bounded", "delta.location", "watermark.lateness.ms", "control.format",
                            "control.producer.count")
