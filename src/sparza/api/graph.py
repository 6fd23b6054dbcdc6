"""The high-level API's graph: ``StreamApplication`` collects inputs, outputs and tables; each
``MessageStream`` operator adds one node (:class:`OpSpec`) to the application's operator graph.

The graph is only a description: :mod:`sparza.api.stage_split` splits it into stages at every
``partition_by`` and :class:`sparza.api.StageTask` runs one stage's part inside a task. An
application class is named by ``app.class`` and must be importable on executors, because every
task rebuilds the graph by calling its ``describe(app)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from sparza.api.joins import DRAIN_POLICIES, JOIN_KINDS, JoinFunction, JoinSpec, join_function_parts, parse_duration
from sparza.api.windows import SessionSpec, WindowSpec
from sparza.config import Config
from sparza.errors import SparzaError
from sparza.serde import Serde, serde_from_name
from sparza.streams import SystemStream
from sparza.systems.settings import STREAM_MSG_SERDE

__all__ = [
    "ApiError",
    "Application",
    "InputDescriptor",
    "MessageStream",
    "OpKind",
    "OpSpec",
    "OutputDescriptor",
    "StreamApplication",
    "TableDescriptor",
    "TableOptions",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class ApiError(SparzaError, ValueError):
    """The application graph is malformed (duplicate names, foreign streams, bad arguments)."""


class OpKind(Enum):
    """What a graph node does."""

    INPUT = "input"
    MAP = "map"
    FILTER = "filter"
    FLAT_MAP = "flat_map"
    MERGE = "merge"
    PARTITION_BY = "partition_by"
    JOIN = "join"
    STREAM_JOIN = "stream_join"
    WINDOW = "window"
    SEND_TO = "send_to"
    SEND_TO_TABLE = "send_to_table"
    SINK = "sink"


def _serde(value: Serde | str | None, default: str) -> Serde:
    if value is None:
        return serde_from_name(default)
    if isinstance(value, str):
        return serde_from_name(value)
    return value


@dataclass(frozen=True, slots=True)
class InputDescriptor:
    """An input stream and the serde of its messages."""

    stream: SystemStream
    serde: Serde


@dataclass(frozen=True, slots=True)
class TableOptions:
    """How an output is written as a typed Delta table (``app.output(..., schema=...)``): the planner turns
    these into the stream's ``delta.table.*`` keys (docs/tables.md)."""

    schema: Any
    mode: str = "append"
    key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    timestamp_column: str | None = None

    def config_values(self, stream: SystemStream) -> dict[str, str]:
        """The ``systems.<s>.streams.<x>.delta.table.*`` keys describing this table."""
        import pyarrow as pa

        from sparza.systems.delta.tables import arrow_schema_to_text

        prefix = f"systems.{stream.system}.streams.{stream.stream}.delta.table."
        schema = self.schema
        text = arrow_schema_to_text(schema) if isinstance(schema, pa.Schema) else (
            json.dumps(schema) if isinstance(schema, dict) else str(schema))
        values = {prefix + "schema": text, prefix + "mode": self.mode}
        if self.key:
            values[prefix + "key"] = ",".join(self.key)
        if self.partition_by:
            values[prefix + "partition.by"] = ",".join(self.partition_by)
        if self.timestamp_column:
            values[prefix + "timestamp.column"] = self.timestamp_column
        return values


@dataclass(frozen=True, slots=True)
class OutputDescriptor:
    """An output stream and the serdes of its messages and keys; ``table`` makes it a typed Delta table."""

    stream: SystemStream
    serde: Serde
    key_serde: Serde | None = None
    table: TableOptions | None = None


@dataclass(frozen=True, slots=True)
class TableDescriptor:
    """A table backed by the task store ``stores.<store>``: filled by ``send_to(table)`` with
    ``(key, value)`` pairs (or by an adjunct input), read by ``join``."""

    store: str


@dataclass(eq=False, slots=True)
class OpSpec:
    """One node of the operator graph. ``id`` is its position in declaration order (stable across
    rebuilds, so it names window stores); ``params`` holds the kind's arguments."""

    id: int
    kind: OpKind
    parents: list[OpSpec]
    params: dict[str, Any] = field(default_factory=dict)
    children: list[OpSpec] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"OpSpec({self.id}, {self.kind.value}, parents={[p.id for p in self.parents]})"


class StreamApplication:
    """What ``describe(app)`` receives: declares inputs, outputs and tables and holds the graph."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else Config()
        self.ops: list[OpSpec] = []
        self._inputs: dict[SystemStream, MessageStream] = {}
        self._partition_names: set[str] = set()

    def _add(self, kind: OpKind, parents: Iterable[OpSpec], **params: Any) -> OpSpec:
        parent_list = list(parents)
        op = OpSpec(len(self.ops), kind, parent_list, params)
        for parent in parent_list:
            parent.children.append(op)
        self.ops.append(op)
        return op

    def input(self, stream: str, serde: Serde | str | None = None) -> MessageStream:
        """The stream ``system.stream`` as a :class:`MessageStream` of deserialized messages.

        ``serde`` defaults to ``systems.<s>.streams.<x>.samza.msg.serde``, then
        ``systems.<s>.samza.msg.serde``, then bytes. Declaring the same input twice returns the same stream.
        """
        ss = _parse_stream(stream)
        if ss in self._inputs:
            return self._inputs[ss]
        name = STREAM_MSG_SERDE.get(self.config, system=ss.system, stream=ss.stream)
        descriptor = InputDescriptor(ss, _serde(serde, name))
        ms = MessageStream(self, self._add(OpKind.INPUT, [], descriptor=descriptor))
        self._inputs[ss] = ms
        return ms

    def output(self, stream: str, serde: Serde | str | None = None, key_serde: Serde | str | None = None, *,
               schema: Any = None, mode: str | None = None, key: Iterable[str] | str | None = None,
               partition_by: Iterable[str] | str | None = None,
               timestamp_column: str | None = None) -> OutputDescriptor:
        """An output stream ``system.stream`` for :meth:`MessageStream.send_to` (serde default: json).

        With ``schema`` (a pyarrow schema, schema text or an Avro record) the output is a typed Delta table
        (docs/tables.md): ``mode`` ``append`` (default) or ``upsert`` on the ``key`` columns, optionally
        partitioned by ``partition_by`` columns. Messages are then sent as rows (dicts, dataclasses, or
        window panes, which become ``window_start``/``window_end`` plus their key and value fields).
        """
        ss = _parse_stream(stream)
        table = None
        if schema is not None or mode is not None or key is not None:
            table = _table_options(ss, schema, mode, key, partition_by, timestamp_column)
        return OutputDescriptor(ss, _serde(serde, "json"), None if key_serde is None else _serde(key_serde, "json"),
                                table)

    def table(self, store: str) -> TableDescriptor:
        """The table kept in the task store ``stores.<store>`` (configure its serdes there)."""
        if not store or not _NAME.match(store):
            raise ApiError(f"table store name must be letters, digits, '-' or '_': {store!r}")
        return TableDescriptor(store)

    @property
    def inputs(self) -> list[InputDescriptor]:
        """The declared inputs, in declaration order."""
        return [op.params["descriptor"] for op in self.ops if op.kind == OpKind.INPUT]

    def _claim_partition_name(self, name: str) -> None:
        if not name or not _NAME.match(name):
            raise ApiError(f"partition_by name must be letters, digits, '-' or '_': {name!r}")
        if name in self._partition_names:
            raise ApiError(f"partition_by name {name!r} is used twice; each intermediate stream needs its own name")
        self._partition_names.add(name)


def _columns(value: Iterable[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(c.strip() for c in value.split(",") if c.strip())
    return tuple(value)


def _table_options(stream: SystemStream, schema: Any, mode: str | None, key: Iterable[str] | str | None,
                   partition_by: Iterable[str] | str | None, timestamp_column: str | None) -> TableOptions:
    from sparza.systems.delta.tables import TableError, TableSpec, parse_schema

    if schema is None:
        raise ApiError(f"output {stream}: a typed table (mode/key given) needs schema=...")
    options = TableOptions(schema, (mode or "append").strip().lower(), _columns(key), _columns(partition_by),
                           timestamp_column)
    try:  # checked now, so a bad declaration fails when the application is described
        TableSpec(stream.stream, parse_schema(schema, f"output {stream}"), options.mode, options.key,
                  options.partition_by, timestamp_column)
    except TableError as exc:
        raise ApiError(f"output {stream}: {exc}") from exc
    return options


def _parse_stream(text: str) -> SystemStream:
    try:
        return SystemStream.parse(text)
    except ValueError as exc:
        raise ApiError(str(exc)) from exc


@runtime_checkable
class Application(Protocol):
    """What ``app.class`` names (Samza's StreamApplication): a class or object whose ``describe(app)`` adds
    the application's inputs, operators and outputs to ``app``. Called on the driver and in every task."""

    def describe(self, app: StreamApplication) -> None:
        """Describe the graph on ``app``."""
        ...


class MessageStream:
    """A stream of messages inside an application; every operator returns a new stream (or ends it)."""

    def __init__(self, app: StreamApplication, op: OpSpec) -> None:
        self.app = app
        self.op = op

    def _next(self, kind: OpKind, parents: list[OpSpec] | None = None, **params: Any) -> MessageStream:
        return MessageStream(self.app, self.app._add(kind, parents or [self.op], **params))

    def map(self, fn: Callable[[Any], Any]) -> MessageStream:
        """Each message ``m`` becomes ``fn(m)`` (same key and event time)."""
        return self._next(OpKind.MAP, fn=fn)

    def filter(self, fn: Callable[[Any], bool]) -> MessageStream:
        """Keeps the messages for which ``fn(m)`` is true."""
        return self._next(OpKind.FILTER, fn=fn)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]]) -> MessageStream:
        """Each message becomes the messages of ``fn(m)`` (zero or more; same key and event time)."""
        return self._next(OpKind.FLAT_MAP, fn=fn)

    def merge(self, *others: MessageStream) -> MessageStream:
        """One stream with the messages of this stream and of ``others``."""
        for other in others:
            if other.app is not self.app:
                raise ApiError("merge of a stream that belongs to another application")
        return self._next(OpKind.MERGE, [self.op, *[o.op for o in others]])

    def partition_by(self, key_fn: Callable[[Any], Any], name: str, partitions: int | None = None,
                     serde: Serde | str | None = None) -> MessageStream:
        """Repartition by ``key_fn(m)`` through the intermediate stream ``<job.name>-<job.id>-<name>``.

        Starts a new stage. Messages and keys cross it serialized with ``serde`` (default json), so they
        must be JSON-able; the key travels with the message. ``partitions`` defaults to the partition
        count of the upstream stage's input.
        """
        self.app._claim_partition_name(name)
        if partitions is not None and int(partitions) <= 0:
            raise ApiError(f"partition_by {name!r}: partitions must be > 0, got {partitions}")
        return self._next(OpKind.PARTITION_BY, key_fn=key_fn, name=name,
                          partitions=None if partitions is None else int(partitions), serde=_serde(serde, "json"))

    def join(self, other: TableDescriptor | MessageStream, key_fn: Any = None, other_key_fn: Any = None,
             join_fn: Any = None, *samza_args: Any, within: int | timedelta | None = None, kind: str = "inner",
             name: str | None = None, ttl: int | timedelta | None = None,
             allowed_lateness_ms: int | timedelta = 0, on_drain: str = "emit") -> MessageStream:
        """Join with a table or with another stream.

        - ``join(table, key_fn, join_fn)``: stream-table join, ``join_fn(m, table[key_fn(m)])``; messages
          without a table entry are dropped (counted in the metric ``api/join-<name or op id>-unmatched``).
        - ``join(other, key_fn, other_key_fn, join_fn, within=..., kind="inner")``: stream-stream join of
          messages whose keys are equal and whose event times are at most ``within`` (ms or timedelta) apart;
          ``kind`` ``left``/``outer`` also emits unmatched messages (the other side None) when their bound
          expires. Both sides are buffered in the task store ``join-<name or op id>`` and dropped by the
          watermark (:mod:`sparza.api.joins`). ``on_drain`` ``emit`` (default) or ``keep``: whether a drain
          of the job emits the unmatched messages or leaves the buffers for the next run.
        - Samza's ``join(other, join_function, key_serde, msg_serde, other_msg_serde, ttl, name)``.
        """
        if isinstance(other, TableDescriptor):
            fn = join_fn if join_fn is not None else other_key_fn
            if key_fn is None or fn is None:
                raise ApiError("join(table, key_fn, join_fn) needs both functions")
            return self._next(OpKind.JOIN, table=other, key_fn=key_fn, fn=fn)
        if not isinstance(other, MessageStream):
            raise ApiError(f"join needs a table from app.table(...) or another MessageStream, got "
                           f"{type(other).__name__}")
        what = f"join{f' {name!r}' if name else ''}"
        if other.app is not self.app:
            raise ApiError(f"{what}: the other stream belongs to another application")
        if other.op is self.op:
            raise ApiError(f"{what}: a stream joined with itself; join two streams (e.g. two filters of it)")
        if key_fn is not None and (isinstance(key_fn, JoinFunction) or not callable(key_fn)):
            try:  # Samza's form: join(other, JoinFunction, keySerde, messageSerde, otherMessageSerde, ttl, id)
                key_fn, other_key_fn, join_fn = join_function_parts(key_fn)
            except ValueError as exc:
                raise ApiError(f"{what}: {exc}") from None
            if len(samza_args) > 1:
                ttl = samza_args[1]
            if len(samza_args) > 2:
                name = samza_args[2]
        elif samza_args:
            raise ApiError(f"{what}: too many positional arguments; pass within= (and kind=, name=) by keyword")
        if not callable(key_fn) or not callable(other_key_fn) or not callable(join_fn):
            raise ApiError(f"{what} needs key_fn, other_key_fn and join_fn (functions), or Samza's JoinFunction")
        if within is not None and ttl is not None:
            raise ApiError(f"{what}: give the time bound once (within= or Samza's ttl)")
        bound = within if within is not None else ttl
        if bound is None:
            raise ApiError(f"{what} needs within=... (ms or timedelta): the largest event-time distance of a pair; "
                           f"it is what lets the watermark drop both buffers")
        kind = str(kind).strip().lower()
        if kind not in JOIN_KINDS:
            raise ApiError(f"{what}: kind {kind!r} is not one of {', '.join(JOIN_KINDS)}")
        if on_drain not in DRAIN_POLICIES:
            raise ApiError(f"{what}: on_drain {on_drain!r} is not one of {', '.join(DRAIN_POLICIES)}")
        try:
            spec = JoinSpec(key_fn, other_key_fn, join_fn, parse_duration(bound, f"{what}: within"), kind,
                            parse_duration(allowed_lateness_ms, f"{what}: allowed_lateness_ms"), on_drain)
        except ValueError as exc:
            raise ApiError(str(exc)) from None
        store = self._operator_store("join", name)
        return self._next(OpKind.STREAM_JOIN, [self.op, other.op], spec=spec, store=store, name=name or store)

    def _operator_store(self, prefix: str, name: str | None) -> str:
        """The task store of a stateful operator: ``<prefix>-<name or op id>``, unique in the application."""
        store = f"{prefix}-{name}" if name else f"{prefix}-{len(self.app.ops)}"
        if not _NAME.match(store):
            raise ApiError(f"{prefix} name must be letters, digits, '-' or '_': {name!r}")
        if any(op.params.get("store") == store for op in self.app.ops if op.kind in (OpKind.WINDOW,
                                                                                      OpKind.STREAM_JOIN)):
            raise ApiError(f"{prefix} name {name!r} is used twice")
        return store

    def window(self, spec: WindowSpec | SessionSpec, name: str | None = None) -> MessageStream:
        """Event-time windows: a stream of :class:`~sparza.api.WindowPane`, one per key and window, emitted
        when the watermark passes the window's end (or at end-of-stream), plus the early, late and retraction
        panes its triggers and lateness add. State lives in the task store ``window-<name or op id>``."""
        if not isinstance(spec, WindowSpec | SessionSpec):
            raise ApiError(f"window needs a spec from Windows.tumbling/sliding/session, got {type(spec).__name__}")
        return self._next(OpKind.WINDOW, spec=spec, store=self._operator_store("window", name))

    def send_to(self, target: OutputDescriptor | TableDescriptor) -> None:
        """Write every message to an output stream, or ``(key, value)`` pairs into a table."""
        if isinstance(target, OutputDescriptor):
            self._next(OpKind.SEND_TO, output=target)
        elif isinstance(target, TableDescriptor):
            self._next(OpKind.SEND_TO_TABLE, table=target)
        else:
            raise ApiError(f"send_to needs app.output(...) or app.table(...), got {type(target).__name__}")

    def sink(self, fn: Callable[[Any, Any, Any], None]) -> None:
        """Call ``fn(message, collector, coordinator)`` for every message (send anything through the collector)."""
        self._next(OpKind.SINK, fn=fn)
