"""``StageTask``: the ``task.class`` of every stage of a high-level application.

On ``init`` it imports ``app.class``, rebuilds the graph with ``describe``, keeps the part of stage
``app.stage`` and runs it: messages flow from the stage's inputs (source streams and the
intermediate streams it reads) through map/filter/flat_map/merge/join/window to ``send_to``,
``sink`` and the ``partition_by`` writes that feed later stages. Windows fire from
``on_watermark`` and flush in ``on_end_of_stream``; their state is in task stores.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

from sparza.api.graph import ApiError, OpKind, OpSpec
from sparza.api.planner import APP_STAGE_KEY, build_application, intermediate_streams
from sparza.api.stages import StageSpec, split_stages
from sparza.api.window_state import WindowState
from sparza.api.windows import WindowError, WindowPane
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


def table_row(value: Any) -> Any:
    """A message as a typed-table row: a window pane becomes ``window_start``, ``window_end`` and its key and
    value (a dict key or value contributes its fields; anything else the column ``key`` / ``value``)."""
    if not isinstance(value, WindowPane):
        return value
    row: dict[str, Any] = {"window_start": value.start, "window_end": value.end}
    for name, part in (("key", value.key), ("value", value.value)):
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


@dataclass(slots=True)
class _Record:
    value: Any
    key: Any
    timestamp: int | None


@dataclass(slots=True)
class _Call:
    collector: MessageCollector
    coordinator: TaskCoordinator


class StageTask:
    """Runs one stage of the application named by ``app.class`` (see the module docstring).

    Implements the ``sparza.task`` protocols: init, process, window, on_watermark, on_end_of_stream, close.
    """

    def __init__(self) -> None:
        self.stage: StageSpec | None = None
        self._sources: dict[SystemStream, list[OpSpec]] = {}
        self._in_stage: set[int] = set()
        self._windows: dict[int, WindowState] = {}
        self._stores: dict[str, Any] = {}
        self._streams: dict[str, SystemStream] = {}
        self._partitions: dict[str, int] = {}
        self._late_policy = LatePolicy.DROP
        self._late_stream: SystemStream | None = None
        self._context: TaskContext | None = None
        self._ended = False

    # --- lifecycle -------------------------------------------------------------------------
    def init(self, context: TaskContext) -> None:
        """Rebuild the stage's graph from ``app.class`` + ``app.stage`` and open its stores."""
        config = context.config
        app = build_application(config)
        wanted = config.get_str(APP_STAGE_KEY)
        stages = split_stages(app)
        matches = [s for s in stages if s.name == wanted]
        if not matches:
            raise ApiError(f"{APP_STAGE_KEY}={wanted!r} is not a stage of {config.get_str('app.class')}; its stages "
                           f"are: {', '.join(s.name for s in stages)}")
        self.stage = stage = matches[0]
        self._in_stage = {op.id for op in stage.ops}
        self._streams = intermediate_streams(app, config)
        for op in stage.writes:
            name = op.params["name"]
            self._partitions[name] = op.params["partitions"] or config.get_int(f"app.intermediate.{name}.partitions",
                                                                               min_value=1)
        for op in stage.ops:
            if op.kind == OpKind.INPUT:
                self._sources.setdefault(op.params["descriptor"].stream, []).append(op)
        for op in stage.reads:
            self._sources.setdefault(self._streams[op.params["name"]], []).append(op)
        for op in stage.ops:
            if op.kind == OpKind.WINDOW:
                self._windows[op.id] = WindowState(op.params["spec"], context.get_store(op.params["store"]))
            elif op.kind in (OpKind.JOIN, OpKind.SEND_TO_TABLE):
                store = op.params["table"].store
                self._stores[store] = context.get_store(store)
        settings = ControlSettings.from_config(config)
        self._late_policy, self._late_stream = settings.late_policy, settings.late_stream
        self._context = context

    def close(self) -> None:
        """Nothing to release: stores belong to the runtime."""

    # --- messages --------------------------------------------------------------------------
    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector,
                coordinator: TaskCoordinator) -> None:
        """Push one user message from its source node through the stage's operators."""
        sources = self._sources.get(envelope.ssp.system_stream)
        if not sources:
            raise ApiError(f"stage {self.stage.name if self.stage else '?'} got a message of "
                           f"{envelope.ssp.system_stream}, which none of its inputs reads")
        call = _Call(collector, coordinator)
        for op in sources:
            if op.kind == OpKind.INPUT:
                record = _Record(_decode(op.params["descriptor"].serde, envelope.message), envelope.key,
                                 envelope.timestamp)
            else:  # an intermediate stream: value and key crossed it serialized with the partition_by serde
                serde: Serde = op.params["serde"]
                key = envelope.key
                if isinstance(key, bytes | bytearray):
                    try:
                        key = json.loads(bytes(key))
                    except ValueError as exc:
                        raise SerdeError(f"key of {envelope.ssp} at {envelope.offset} is not the JSON key "
                                         f"partition_by writes: {payload_preview(key)}") from exc
                record = _Record(_decode(serde, envelope.message), key, envelope.timestamp)
            self._push_children(op, record, call, envelope)

    def _push_children(self, op: OpSpec, record: _Record, call: _Call,
                       envelope: IncomingMessageEnvelope | None = None) -> None:
        for child in op.children:
            if child.id in self._in_stage:
                self._apply(child, record, call, envelope)

    def _apply(self, op: OpSpec, record: _Record, call: _Call, envelope: IncomingMessageEnvelope | None) -> None:
        kind, params = op.kind, op.params
        if kind == OpKind.MAP:
            self._push_children(op, _Record(params["fn"](record.value), record.key, record.timestamp), call, envelope)
        elif kind == OpKind.FILTER:
            if params["fn"](record.value):
                self._push_children(op, record, call, envelope)
        elif kind == OpKind.FLAT_MAP:
            for item in params["fn"](record.value):
                self._push_children(op, _Record(item, record.key, record.timestamp), call, envelope)
        elif kind == OpKind.MERGE:
            self._push_children(op, record, call, envelope)
        elif kind == OpKind.JOIN:
            row = self._stores[params["table"].store].get(params["key_fn"](record.value))
            if row is not None:
                self._push_children(op, _Record(params["fn"](record.value, row), record.key, record.timestamp), call,
                                    envelope)
        elif kind == OpKind.WINDOW:
            self._window_add(op, record, call)
        elif kind == OpKind.PARTITION_BY:
            self._partition(op, record, call)
        elif kind == OpKind.SEND_TO and params["output"].table is not None:
            # A typed table takes rows, not bytes: the delta producer turns them into columns (and a None
            # value with its key into a deletion in upsert mode).
            out = params["output"]
            call.collector.send(OutgoingMessageEnvelope(out.stream, table_row(record.value), key=record.key,
                                                        timestamp=record.timestamp))
        elif kind == OpKind.SEND_TO:
            out = params["output"]
            key = record.key
            if out.key_serde is not None and key is not None and not isinstance(key, bytes):
                key = out.key_serde.to_bytes(key)
            call.collector.send(OutgoingMessageEnvelope(out.stream, out.serde.to_bytes(record.value),
                                                        key=_key_bytes(key), timestamp=record.timestamp))
        elif kind == OpKind.SEND_TO_TABLE:
            try:
                key, value = record.value
            except (TypeError, ValueError) as exc:
                raise ApiError(f"send_to(table {params['table'].store!r}) needs (key, value) pairs, got "
                               f"{type(record.value).__name__}") from exc
            self._stores[params["table"].store].put(key, value)
        elif kind == OpKind.SINK:
            params["fn"](record.value, call.collector, call.coordinator)

    def _partition(self, op: OpSpec, record: _Record, call: _Call) -> None:
        name = op.params["name"]
        key = op.params["key_fn"](record.value)
        key_bytes = json.dumps(key, sort_keys=True, separators=(",", ":")).encode("utf-8")
        serde: Serde = op.params["serde"]
        call.collector.send(OutgoingMessageEnvelope(
            self._streams[name], serde.to_bytes(record.value), key=key_bytes, partition_key=key_bytes,
            partition=stable_partition(key_bytes, self._partitions[name]), timestamp=record.timestamp))

    def _window_add(self, op: OpSpec, record: _Record, call: _Call) -> None:
        state = self._windows[op.id]
        spec = state.spec
        ts = spec.timestamp_fn(record.value) if spec.timestamp_fn is not None else record.timestamp
        if ts is None:
            raise WindowError(f"window {op.params['store']!r} got a message without event time; give the input "
                              f"timestamps or pass timestamp_fn")
        if state.add(spec.key_fn(record.value), int(ts), record.value):
            if self._context is not None:
                # Looked up each time: the runtime may give the task a fresh registry per batch.
                self._context.metrics.counter("control", "late-messages").inc()
            if self._late_policy == LatePolicy.ROUTE and self._late_stream is not None:
                if self._context is not None:
                    self._context.metrics.counter("control", "late-messages-routed").inc()
                call.collector.send(OutgoingMessageEnvelope(self._late_stream, json.dumps(
                    record.value, separators=(",", ":"), default=str).encode("utf-8"),
                    key=_key_bytes(record.key), timestamp=int(ts)))

    # --- time ------------------------------------------------------------------------------
    def _emit_panes(self, op: OpSpec, panes: list[Any], call: _Call) -> None:
        for pane in panes:
            # A pane's event time is the last millisecond of its window (as Flink's window results).
            self._push_children(op, _Record(pane, pane.key, pane.end - 1), call)

    def on_watermark(self, watermark_ms: int, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Fire every window whose end the watermark reached, upstream windows first."""
        if self.stage is None:
            return
        call = _Call(collector, coordinator)
        by_id = {op.id: op for op in self.stage.ops}
        for op_id in sorted(self._windows):
            self._emit_panes(by_id[op_id], self._windows[op_id].fire(watermark_ms), call)

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Flush every open window (once), upstream windows first."""
        if self._ended or self.stage is None:
            return
        self._ended = True
        call = _Call(collector, coordinator)
        by_id = {op.id: op for op in self.stage.ops}
        for op_id in sorted(self._windows):
            self._emit_panes(by_id[op_id], self._windows[op_id].flush(), call)

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Nothing periodic: windows are event-time and fire on watermarks, not on ``task.window.ms``."""

    @property
    def late_messages(self) -> int:
        """Late messages seen by this task's windows (persisted in the window stores)."""
        return sum(w.late for w in self._windows.values())
