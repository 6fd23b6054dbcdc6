"""``StageTask``: the ``task.class`` of every stage of a high-level application.

On ``init`` it imports ``app.class``, rebuilds the graph with ``describe``, keeps the part of stage
``app.stage`` and runs it: messages flow from the stage's inputs (source streams and the
intermediate streams it reads) through map/filter/flat_map/merge/join/window to ``send_to``,
``sink`` and the ``partition_by`` writes that feed later stages. Windows fire and stream-stream joins
drop their buffers from ``on_watermark``, and both flush in ``on_end_of_stream``; their state is in
task stores.

Each stateful operator sees the task watermark held back by what the stateful operators before it in
the stage may still emit behind it (:func:`sparza.api.stage_split.watermark_holdbacks`): a join's unmatched
messages and a window's late panes reach the operators after it before their watermark passes them.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

from sparza.api.graph import ApiError, OpKind, OpSpec
from sparza.api.join_state import JoinState
from sparza.api.panes import FiresPanes
from sparza.api.session_state import SessionState
from sparza.api.stage_plan import INTERMEDIATE_PARTITIONS, build_application, intermediate_streams
from sparza.api.stage_split import StageSpec, split_stages, watermark_holdbacks
from sparza.api.window_state import WindowState, window_state
from sparza.api.windows import SessionSpec, WindowError, WindowPane
from sparza.config.shared import APP_CLASS, APP_STAGE
from sparza.control.settings import ControlSettings, LatePolicy
from sparza.errors import SerdeError, payload_preview
from sparza.serde import BytesSerde, Serde
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream
from sparza.task import MessageCollector, TaskContext, TaskCoordinator

__all__ = ["StageTask", "stable_partition", "table_row"]


def stable_partition(key_bytes: bytes, partitions: int) -> int:
    """The partition of a serialized key: CRC-32 modulo the count (same in every process and run)."""
    return zlib.crc32(key_bytes) % partitions


def _key_bytes(key: Any) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    return json.dumps(key, sort_keys=True, separators=(",", ":")).encode("utf-8")


def table_row(value: Any, *, pane_columns: bool = False) -> Any:
    """A message as a typed-table row: a window pane becomes ``window_start``, ``window_end`` and its key and
    value (a dict key or value contributes its fields; anything else the column ``key`` / ``value``), plus
    ``pane`` and ``pane_index`` when ``pane_columns`` (the table declares a ``pane`` column)."""
    if not isinstance(value, WindowPane):
        return value
    row: dict[str, Any] = {"window_start": value.start, "window_end": value.end}
    if pane_columns:
        row["pane"], row["pane_index"] = str(value.pane), value.index
    for name, part in (("key", value.key), ("value", value.value)):
        if part is None and name == "value" and value.is_retraction:
            continue
        if isinstance(part, dict):
            for field_name, item in part.items():
                if field_name in row:
                    raise ApiError(f"window pane field {field_name!r} of its {name} clashes with another column")
                row[field_name] = item
        else:
            row[name] = part
    return row


def _decode(serde: Serde, data: Any) -> Any:
    # The runtime hands raw bytes; a value it already deserialized is passed through unchanged.
    if isinstance(data, bytes | bytearray | memoryview) and not isinstance(serde, BytesSerde):
        return serde.from_bytes(bytes(data))
    return data


def _decoder(serde: Serde) -> Callable[[Any], Any] | None:
    """``_decode`` bound to ``serde``; None for the bytes serde (messages pass through)."""
    if isinstance(serde, BytesSerde):
        return None
    from_bytes = serde.from_bytes

    def decode(data: Any) -> Any:
        if data.__class__ is bytes:
            return from_bytes(data)
        return _decode(serde, data)

    return decode


_MEMO_LIMIT = 65_536  # entries per memo below: bounded, keys seen again are the common case
_ABSENT = object()


class _KeyCodec:
    """The JSON text of ``partition_by`` keys both ways, memoized for string keys.

    The bytes must be exactly ``json.dumps(key, sort_keys=True, separators=(",", ":"))``: they choose the
    partition, so they may never change. Only ``str`` keys (and the texts that decode to one) are
    memoized: other values may compare equal across types (``1 == 1.0 == True``) yet encode differently,
    or be mutable.
    """

    __slots__ = ("_decoded", "_encoded")

    def __init__(self) -> None:
        self._encoded: dict[str, bytes] = {}
        self._decoded: dict[bytes, str] = {}

    def encode(self, key: Any) -> bytes:
        if key.__class__ is str:
            hit = self._encoded.get(key)
            if hit is None:
                if len(self._encoded) >= _MEMO_LIMIT:
                    self._encoded.clear()
                hit = self._encoded[key] = json.dumps(key, separators=(",", ":")).encode("utf-8")
            return hit
        return json.dumps(key, sort_keys=True, separators=(",", ":")).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        hit = self._decoded.get(data)
        if hit is not None:
            return hit
        value = json.loads(data)
        if value.__class__ is str:
            if len(self._decoded) >= _MEMO_LIMIT:
                self._decoded.clear()
            self._decoded[data] = value
        return value


Emit = Callable[[Any, Any, Any], None]
"""A compiled operator: ``emit(value, key, timestamp)`` applies it and pushes the result to its children."""


def _noop(value: Any, key: Any, timestamp: Any) -> None:
    return None


class StageTask:
    """Runs one stage of the application named by ``app.class`` (see the module docstring).

    Implements the ``sparza.task`` protocols: init, process, window, on_watermark, on_end_of_stream, close.

    ``init`` compiles the stage's operators into one closure per node (:data:`Emit`), each calling its
    children directly: a message costs its operators' own work plus one call per node, not a dispatch
    on the node's kind and a record object per step.
    """

    def __init__(self) -> None:
        self.stage: StageSpec | None = None
        self._sources: dict[SystemStream, list[OpSpec]] = {}
        self._in_stage: set[int] = set()
        self._windows: dict[int, WindowState | SessionState] = {}
        self._joins: dict[int, JoinState] = {}
        self._holdbacks: dict[int, int] = {}  # op id -> how far behind the task watermark its watermark is
        self._stores: dict[str, Any] = {}
        self._streams: dict[str, SystemStream] = {}
        self._partitions: dict[str, int] = {}
        self._late_policy = LatePolicy.DROP
        self._late_stream: SystemStream | None = None
        self._context: TaskContext | None = None
        self._ended = False
        self._emitters: dict[int, Emit] = {}
        self._side_emitters: dict[tuple[int, str], Emit] = {}
        self._fanouts: dict[int, Emit] = {}
        self._keys = _KeyCodec()
        # What process() hands the compiled operators: the batch's collector and coordinator.
        self._collector: Any = None
        self._coordinator: Any = None
        self._route_ssp: Any = None
        self._route: list[tuple[bool, Callable[[Any], Any] | None, Emit]] = []
        self._fixed_tables: set[str] = set()  # tables that cannot change within a batch (broadcast adjunct stores)
        self._batch_memos: dict[str, dict[Any, Any]] = {}  # per such table: key -> row read in this batch

    # --- lifecycle -------------------------------------------------------------------------
    def init(self, context: TaskContext) -> None:
        """Rebuild the stage's graph from ``app.class`` + ``app.stage`` and open its stores."""
        config = context.config
        app = build_application(config)
        wanted = APP_STAGE.require(config)
        stages = split_stages(app)
        matches = [s for s in stages if s.name == wanted]
        if not matches:
            raise ApiError(f"{APP_STAGE.key}={wanted!r} is not a stage of {APP_CLASS.get(config)}; its stages "
                           f"are: {', '.join(s.name for s in stages)}")
        self.stage = stage = matches[0]
        self._in_stage = {op.id for op in stage.ops}
        self._streams = intermediate_streams(app, config)
        for op in stage.writes:
            name = op.params["name"]
            self._partitions[name] = op.params["partitions"] or INTERMEDIATE_PARTITIONS.require(config, name=name)
        for op in stage.ops:
            if op.kind == OpKind.INPUT:
                self._sources.setdefault(op.params["descriptor"].stream, []).append(op)
        for op in stage.reads:
            self._sources.setdefault(self._streams[op.params["name"]], []).append(op)
        self._holdbacks = watermark_holdbacks(stage)
        for op in stage.ops:
            if op.kind == OpKind.WINDOW:
                spec, store = op.params["spec"], context.get_store(op.params["store"])
                self._windows[op.id] = (SessionState(spec, store) if isinstance(spec, SessionSpec)
                                        else window_state(spec, store))
            elif op.kind == OpKind.STREAM_JOIN:
                self._joins[op.id] = JoinState(op.params["spec"], context.get_store(op.params["store"]))
            elif op.kind in (OpKind.JOIN, OpKind.SEND_TO_TABLE):
                store = op.params["table"].store
                self._stores[store] = context.get_store(store)
        from sparza.state.adjunct import AdjunctConfig

        adjunct = AdjunctConfig.from_config(config)
        self._fixed_tables = {name for name in self._stores
                              if (spec := adjunct.store(name)) is not None and spec.broadcast}
        settings = ControlSettings.from_config(config)
        self._late_policy, self._late_stream = settings.late_policy, settings.late_stream
        self._context = context

    def close(self) -> None:
        """Nothing to release: stores belong to the runtime."""

    # --- compiling the operators -------------------------------------------------------------
    def _fanout(self, op: OpSpec) -> Emit:
        """The emitter that pushes one result of ``op`` to each of its children in this stage."""
        fanout = self._fanouts.get(op.id)
        if fanout is None:
            children = [self._emitter(child, op) for child in op.children if child.id in self._in_stage]
            if not children:
                fanout = _noop
            elif len(children) == 1:
                fanout = children[0]
            else:
                def fanout(value: Any, key: Any, timestamp: Any, _children: list[Emit] = children) -> None:
                    for child in _children:
                        child(value, key, timestamp)
            self._fanouts[op.id] = fanout
        return fanout

    def _emitter(self, op: OpSpec, parent: OpSpec) -> Emit:
        """The compiled node ``op`` as reached from ``parent`` (built once per node, as a merge is reached from
        several parents; a stream-stream join once per side)."""
        if op.kind == OpKind.STREAM_JOIN:
            side = "l" if parent is op.parents[0] else "r"
            key = (op.id, side)
            emitter = self._side_emitters.get(key)
            if emitter is None:
                emitter = self._side_emitters[key] = self._compile_join_side(op, side)
            return emitter
        emitter = self._emitters.get(op.id)
        if emitter is None:
            emitter = self._emitters[op.id] = self._compile(op)
        return emitter

    def _compile(self, op: OpSpec) -> Emit:
        kind, params = op.kind, op.params
        if kind == OpKind.MERGE:
            return self._fanout(op)
        if kind == OpKind.MAP:
            fn, nxt = params["fn"], self._fanout(op)

            def emit_map(value: Any, key: Any, timestamp: Any) -> None:
                nxt(fn(value), key, timestamp)
            return emit_map
        if kind == OpKind.FILTER:
            fn, nxt = params["fn"], self._fanout(op)

            def emit_filter(value: Any, key: Any, timestamp: Any) -> None:
                if fn(value):
                    nxt(value, key, timestamp)
            return emit_filter
        if kind == OpKind.FLAT_MAP:
            fn, nxt = params["fn"], self._fanout(op)

            def emit_flat_map(value: Any, key: Any, timestamp: Any) -> None:
                for item in fn(value):
                    nxt(item, key, timestamp)
            return emit_flat_map
        if kind == OpKind.JOIN:
            store = params["table"].store
            get, key_fn, fn, nxt = self._stores[store].get, params["key_fn"], params["fn"], self._fanout(op)
            unmatched = f"join-{params.get('name') or op.id}-unmatched"
            if store not in self._fixed_tables:
                def emit_join(value: Any, key: Any, timestamp: Any) -> None:
                    row = get(key_fn(value))
                    if row is not None:
                        nxt(fn(value, row), key, timestamp)
                    else:  # an inner join's own result, counted so a table missing rows shows
                        self._count_unmatched(unmatched)
                return emit_join
            # A broadcast table only changes between batches: look each key up once per batch.
            rows = self._batch_memos.setdefault(store, {})

            def emit_join_memo(value: Any, key: Any, timestamp: Any) -> None:
                table_key = key_fn(value)
                if table_key.__class__ is str:  # only str: keys of other types may be equal yet stored apart
                    row = rows.get(table_key, _ABSENT)
                    if row is _ABSENT:
                        row = get(table_key)
                        if len(rows) < _MEMO_LIMIT:
                            rows[table_key] = row
                else:
                    row = get(table_key)
                if row is not None:
                    nxt(fn(value, row), key, timestamp)
                else:
                    self._count_unmatched(unmatched)
            return emit_join_memo
        if kind == OpKind.WINDOW:
            return self._compile_window(op)
        if kind == OpKind.PARTITION_BY:
            return self._compile_partition(op)
        if kind == OpKind.SEND_TO and params["output"].table is not None:
            return self._compile_table_output(op)
        if kind == OpKind.SEND_TO:
            out = params["output"]
            stream, to_bytes, key_serde = out.stream, out.serde.to_bytes, out.key_serde

            def emit_send(value: Any, key: Any, timestamp: Any) -> None:
                if key_serde is not None and key is not None and not isinstance(key, bytes):
                    key = key_serde.to_bytes(key)
                self._collector.send(OutgoingMessageEnvelope(stream, to_bytes(value), key=_key_bytes(key),
                                                             timestamp=timestamp))
            return emit_send
        if kind == OpKind.SEND_TO_TABLE:
            store_name = params["table"].store
            put = self._stores[store_name].put

            def emit_put(value: Any, key: Any, timestamp: Any) -> None:
                try:
                    k, v = value
                except (TypeError, ValueError) as exc:
                    raise ApiError(f"send_to(table {store_name!r}) needs (key, value) pairs, got "
                                   f"{type(value).__name__}") from exc
                put(k, v)
            return emit_put
        if kind == OpKind.SINK:
            fn = params["fn"]

            def emit_sink(value: Any, key: Any, timestamp: Any) -> None:
                fn(value, self._collector, self._coordinator)
            return emit_sink
        raise ApiError(f"operator {op!r} cannot run inside a stage")

    def _compile_partition(self, op: OpSpec) -> Emit:
        name = op.params["name"]
        key_fn, to_bytes, encode_key = op.params["key_fn"], op.params["serde"].to_bytes, self._keys.encode
        stream, partitions = self._streams[name], self._partitions[name]

        def emit_partition(value: Any, key: Any, timestamp: Any) -> None:
            key_bytes = encode_key(key_fn(value))
            self._collector.send(OutgoingMessageEnvelope(
                stream, to_bytes(value), key=key_bytes, partition_key=key_bytes,
                partition=zlib.crc32(key_bytes) % partitions, timestamp=timestamp))
        return emit_partition

    def _compile_table_output(self, op: OpSpec) -> Emit:
        from sparza.systems.delta.tables import parse_schema

        table = op.params["output"].table
        stream = op.params["output"].stream
        pane_columns = "pane" in parse_schema(table.schema, f"output {stream}").names
        upsert = table.mode == "upsert"

        def emit_table_row(value: Any, key: Any, timestamp: Any) -> None:
            # A typed table takes rows, not bytes: the delta producer turns them into columns (and a None
            # value with its key into a deletion in upsert mode).
            row = table_row(value, pane_columns=pane_columns)
            if upsert and isinstance(value, WindowPane) and value.is_retraction:
                # A merged-away session: delete its row (the row's own columns carry its key columns).
                self._collector.send(OutgoingMessageEnvelope(stream, None, key=row, timestamp=timestamp))
                return
            self._collector.send(OutgoingMessageEnvelope(stream, row, key=key, timestamp=timestamp))
        return emit_table_row

    def _compile_window(self, op: OpSpec) -> Emit:
        state = self._windows[op.id]
        spec = state.spec
        key_fn, timestamp_fn, add = spec.key_fn, spec.timestamp_fn, state.add
        store = op.params["store"]

        def event_time(value: Any, timestamp: Any) -> int:
            ts = timestamp_fn(value) if timestamp_fn is not None else timestamp
            if ts is None:
                raise WindowError(f"window {store!r} got a message without event time; give the input "
                                  f"timestamps or pass timestamp_fn")
            return ts if ts.__class__ is int else int(ts)

        if not isinstance(state, FiresPanes):
            # The plain one-firing window: no panes to take between messages.
            def emit_window(value: Any, key: Any, timestamp: Any) -> None:
                ts = timestamp_fn(value) if timestamp_fn is not None else timestamp
                if ts.__class__ is not int:
                    ts = event_time(value, timestamp)
                if add(key_fn(value), ts, value):
                    self._late(value, key, ts)
            return emit_window
        take, nxt = state.take_panes, self._fanout(op)

        def emit_window_panes(value: Any, key: Any, timestamp: Any) -> None:
            ts = event_time(value, timestamp)
            if add(key_fn(value), ts, value):
                self._late(value, key, ts)
            for pane in take():  # what a message-count trigger or a session merge fired
                nxt(pane, pane.key, pane.end - 1)
        return emit_window_panes

    def _compile_join_side(self, op: OpSpec, side: str) -> Emit:
        state = self._joins[op.id]
        spec = state.spec
        key_fn = spec.key_fn if side == "l" else spec.other_key_fn
        add, nxt, name = state.add, self._fanout(op), op.params["name"]

        def emit_join(value: Any, key: Any, timestamp: Any) -> None:
            if timestamp is None:
                raise WindowError(f"join {name!r} got a message without event time; a stream-stream join matches "
                                  f"by event time, so give its inputs timestamps")
            ts = timestamp if timestamp.__class__ is int else int(timestamp)
            out = add(side, key_fn(value), ts, value)
            if out is None:
                self._late(value, key, ts)
                return
            for result, join_key, result_ts in out:
                nxt(result, join_key, result_ts)
        return emit_join

    def _count_unmatched(self, metric: str) -> None:
        """A stream-table join found no table row for a message (the metric ``api/join-<name>-unmatched``)."""
        if self._context is not None:
            self._context.metrics.counter("api", metric).inc()

    def _late(self, value: Any, key: Any, ts: Any) -> None:
        """A message an event-time operator dropped as late (every window of it had fired, or it was too far
        behind a join's watermark): count it, and route it under the ``route`` policy."""
        if self._context is not None:
            # Looked up each time: the runtime may give the task a fresh registry per batch.
            self._context.metrics.counter("control", "late-messages").inc()
        if self._late_policy == LatePolicy.ROUTE and self._late_stream is not None:
            if self._context is not None:
                self._context.metrics.counter("control", "late-messages-routed").inc()
            self._collector.send(OutgoingMessageEnvelope(self._late_stream, json.dumps(
                value, separators=(",", ":"), default=str).encode("utf-8"),
                key=_key_bytes(key), timestamp=int(ts)))

    def _routes(self, ssp: Any) -> list[tuple[bool, Callable[[Any], Any] | None, Emit]]:
        """How a message of ``ssp`` enters the stage: per source node, whether its key crossed an intermediate
        stream as JSON, the value's decoder and the node's children."""
        sources = self._sources.get(ssp.system_stream)
        if not sources:
            raise ApiError(f"stage {self.stage.name if self.stage else '?'} got a message of "
                           f"{ssp.system_stream}, which none of its inputs reads")
        routes = []
        for op in sources:
            if op.kind == OpKind.INPUT:
                routes.append((False, _decoder(op.params["descriptor"].serde), self._fanout(op)))
            else:  # an intermediate stream: value and key crossed it serialized with the partition_by serde
                routes.append((True, _decoder(op.params["serde"]), self._fanout(op)))
        return routes

    def _begin_batch(self, collector: MessageCollector) -> None:
        """A new collector: the runtime gives each batch its own, so a new batch began (and the broadcast tables
        may have moved to a newer snapshot)."""
        self._collector = collector
        for rows in self._batch_memos.values():
            rows.clear()

    # --- messages --------------------------------------------------------------------------
    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector,
                coordinator: TaskCoordinator) -> None:
        """Push one user message from its source node through the stage's operators."""
        if collector is not self._collector:
            self._begin_batch(collector)
        self._coordinator = coordinator
        ssp = envelope.ssp
        if ssp is not self._route_ssp:
            self._route = self._routes(ssp)
            self._route_ssp = ssp
        for intermediate, decode, emit in self._route:
            key = envelope.key
            if intermediate and isinstance(key, bytes | bytearray):
                try:
                    key = self._keys.decode(bytes(key))
                except ValueError as exc:
                    raise SerdeError(f"key of {envelope.ssp} at {envelope.offset} is not the JSON key "
                                     f"partition_by writes: {payload_preview(key)}") from exc
            message = envelope.message
            emit(message if decode is None else decode(message), key, envelope.timestamp)

    # --- time ------------------------------------------------------------------------------
    def _emit_panes(self, op: OpSpec, panes: list[Any]) -> None:
        nxt = self._fanout(op)
        for pane in panes:
            # A pane's event time is the last millisecond of its window (as Flink's window results).
            nxt(pane, pane.key, pane.end - 1)

    def _emit_outputs(self, op: OpSpec, outputs: list[tuple[Any, Any, int]]) -> None:
        nxt = self._fanout(op)
        for value, key, timestamp in outputs:
            nxt(value, key, timestamp)

    def _stateful_ops(self) -> list[OpSpec]:
        """The stage's windows and stream-stream joins, upstream first (declaration order is topological)."""
        assert self.stage is not None
        return [op for op in self.stage.ops if op.id in self._windows or op.id in self._joins]

    def _stateful_ops_for(self, collector: MessageCollector, coordinator: TaskCoordinator) -> list[OpSpec]:
        """:meth:`_stateful_ops`, once what they emit goes to ``collector`` and ``coordinator`` (a new collector
        begins a new batch): what every control call (watermark, end-of-stream, drain) starts with."""
        if collector is not self._collector:
            self._begin_batch(collector)
        self._coordinator = coordinator
        return self._stateful_ops()

    def on_watermark(self, watermark_ms: int, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Fire every window whose end its watermark reached and drop what joins can no longer match, upstream
        operators first; each sees the task watermark less its holdback (see the module docstring)."""
        if self.stage is None:
            return
        for op in self._stateful_ops_for(collector, coordinator):
            watermark = watermark_ms - self._holdbacks.get(op.id, 0)
            if op.id in self._joins:
                self._emit_outputs(op, self._joins[op.id].expire(watermark))
            else:
                self._emit_panes(op, self._windows[op.id].fire(watermark))

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Flush every open window and every join's buffers (once), upstream operators first."""
        if self._ended or self.stage is None:
            return
        self._ended = True
        for op in self._stateful_ops_for(collector, coordinator):
            if op.id in self._joins:
                self._emit_outputs(op, self._joins[op.id].flush())
            else:
                self._emit_panes(op, self._windows[op.id].flush())

    def on_drain(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """The job drains (the runtime calls this once per drain, when every input drained, see
        :mod:`sparza.engine.drain`): fire every open window and session, and emit the unmatched messages of the
        joins whose ``on_drain`` is ``emit`` (the others keep their buffers for the next run), upstream
        operators first, so the next version of the job starts clean."""
        if self.stage is None:
            return
        for op in self._stateful_ops_for(collector, coordinator):
            if op.id in self._joins:
                join = self._joins[op.id]
                if join.spec.on_drain == "emit":
                    self._emit_outputs(op, join.flush())
            else:
                self._emit_panes(op, self._windows[op.id].flush())

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Nothing periodic: windows are event-time and fire on watermarks, not on ``task.window.ms``."""

    @property
    def late_messages(self) -> int:
        """Late messages this task's windows and joins dropped (persisted in their stores)."""
        return sum(w.late for w in self._windows.values()) + sum(j.late for j in self._joins.values())
