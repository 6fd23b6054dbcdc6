"""``TaskControl``: everything one task instance does with control messages, as a library.

The runtime owns the batch loop and calls, per task:

1. :meth:`TaskControl.on_envelope` for every envelope read, in order; a True result means the
   envelope was a control message and is consumed (not delivered). :meth:`TaskControl.is_late`
   then tells whether a user message is behind the task watermark, and :meth:`TaskControl.on_late`
   counts it and gives the envelope to route it to, if the policy routes.
2. :meth:`TaskControl.on_ssp_exhausted` when a bounded source SSP reached its end.
3. At the batch boundary: :meth:`TaskControl.advance` (idle timeouts; a non-None result goes to the
   task's ``on_watermark``), then :meth:`TaskControl.outgoing` (watermark, and end-of-stream once
   :meth:`TaskControl.all_ended`, for every partition of each intermediate output; see
   :meth:`TaskControl.streams_written` for the partition counts it needs) sent through the
   same producer and idempotent flush as the batch's data, then :meth:`TaskControl.snapshot` into the
   task checkpoint under ``"control"`` (and :attr:`TaskControl.drains`' snapshot under ``"drain"``).

Drain messages (type 3) of intermediate inputs go to :attr:`TaskControl.drains`
(:class:`~sparza.control.drain.DrainTracker`); once the task completed a drain, :meth:`TaskControl.outgoing`
given that drain writes the task's watermark and drain message once, then nothing more in that run.

Streams in Samza's protocol (``control.format: samza``): an upstream task sends its messages, in
Samza's body, to the stream's aggregate partition only; the downstream task reading that partition
re-broadcasts what it reconciled there (watermark and end-of-stream, without a producer name) to
every other partition of the stream, as Samza's operators do.

On restart :meth:`TaskControl.restore` brings back end-of-stream counts and watermarks, so a
task that checkpointed past upstream control messages never waits for them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparza.config import Config
from sparza.control.drain import DrainMessage, DrainTracker, decode_drain, encode_drain
from sparza.control.messages import (
    SAMZA_FORMAT,
    SPARZA_FORMAT,
    ControlMessage,
    decode_body,
    encode_body,
    samza_aggregate_partition,
)
from sparza.control.reconcile import IdlePolicy, SspControlState
from sparza.control.settings import ControlSettings, LatePolicy, producer_count_key
from sparza.errors import SparzaError
from sparza.metrics import Counter, MetricsRegistry
from sparza.streams import (
    IncomingMessageEnvelope,
    MessageType,
    OutgoingMessageEnvelope,
    SystemStream,
    SystemStreamPartition,
)

__all__ = ["SNAPSHOT_VERSION", "ControlStateError", "TaskControl"]

SNAPSHOT_VERSION = 1
"""Version of the :meth:`TaskControl.snapshot` layout."""

METRICS_GROUP = "control"
_WATERMARK = MessageType.WATERMARK
_DRAIN = MessageType.DRAIN


class ControlStateError(SparzaError, ValueError):
    """Control state was used inconsistently: an envelope of an SSP the task does not own, a missing
    partition count for an intermediate output, or an unreadable snapshot."""


def _check_counted(ssp: SystemStreamPartition, state: SspControlState, task_name: str | None, task_count: int,
                   what: str) -> None:
    """A message from a counted producer needs a producer count: from its body, or from the config."""
    if task_count == 0 and task_name is not None and state.task_count == 0:
        raise ControlStateError(
            f"a {what} message from upstream task {task_name!r} on {ssp} says nothing of how many tasks write "
            f"{ssp.system_stream} (Samza's format has no taskCount): set {producer_count_key(ssp.system_stream)} "
            "to the number of upstream tasks")


class TaskControl:
    """Control-message bookkeeping of one task: per-SSP end-of-stream and watermarks, the task
    watermark, late messages, and the control messages the task writes downstream.

    ``task_count`` is the number of tasks of this job writing the intermediate outputs (it goes into
    every message so downstream can count producers).
    """

    def __init__(self, task_name: str, task_count: int, input_ssps: Iterable[SystemStreamPartition],
                 config: Config, metrics: MetricsRegistry | None = None) -> None:
        self.task_name = task_name
        self.task_count = int(task_count)
        self.input_ssps = sorted(set(input_ssps))
        streams = sorted({ssp.system_stream for ssp in self.input_ssps})
        self.settings = ControlSettings.from_config(config, streams)
        self._idle = IdlePolicy(self.settings.idle_timeout_ms, self.settings.quorum)
        self._states: dict[SystemStreamPartition, SspControlState] = {
            ssp: self._fresh_state(ssp) for ssp in self.input_ssps}
        self.drains = DrainTracker(self.input_ssps, {ssp: state.task_count for ssp, state in self._states.items()
                                                     if state.intermediate})
        """The drain messages read on intermediate inputs, and the drain this task completed."""
        self._unsettled: list[SspControlState] = []  # SSPs with control messages not yet reconciled
        self._received_pending = 0  # control messages not yet added to the metric (added when settling)
        self._last_ssp: SystemStreamPartition | None = None
        self._last_state: SspControlState | None = None
        self._watermark: int | None = None
        self._reported: int | None = None
        self._eos_sent = False
        # Samza protocol, as the aggregate partition's reader: what was re-broadcast, per input stream
        self._broadcast: dict[SystemStream, dict[str, Any]] = {}
        self.late_count = 0
        self.late_routed = 0
        self._received_counter: Counter | None = None
        self.bind_metrics(metrics if metrics is not None else MetricsRegistry())

    def bind_metrics(self, metrics: MetricsRegistry) -> None:
        """Report into ``metrics`` from now on (a runtime that starts a fresh registry per batch calls
        this each batch; counts that must survive restarts are in the snapshot, not in metrics)."""
        self._flush_received()  # what the old registry counted stays there
        self.metrics = metrics
        self._late_counter = self.metrics.counter(METRICS_GROUP, "late-messages")
        self._routed_counter = self.metrics.counter(METRICS_GROUP, "late-messages-routed")
        self._received_counter = self.metrics.counter(METRICS_GROUP, "control-messages-received")
        self._sent_counter = self.metrics.counter(METRICS_GROUP, "control-messages-sent")
        self._sent_bytes = self.metrics.counter(METRICS_GROUP, "control-bytes-sent")
        self._wm_gauge = self.metrics.gauge(METRICS_GROUP, "task-watermark")
        if self._watermark is not None:
            self._wm_gauge.set(self._watermark)

    def _fresh_state(self, ssp: SystemStreamPartition) -> SspControlState:
        stream = ssp.system_stream
        return SspControlState(intermediate=self.settings.is_intermediate(stream),
                               lateness_ms=self.settings.lateness_ms(stream),
                               task_count=self.settings.producer_count(stream))

    def _state(self, ssp: SystemStreamPartition) -> SspControlState:
        last = self._last_state
        if ssp is self._last_ssp and last is not None:  # a reader hands out one SSP object per run of envelopes
            return last
        try:
            state = self._states[ssp]
        except KeyError:
            raise ControlStateError(f"task {self.task_name!r} got a message of {ssp}, which is not one of its "
                                    f"inputs ({', '.join(map(str, self.input_ssps))})") from None
        self._last_ssp, self._last_state = ssp, state
        return state

    # --- input -----------------------------------------------------------------------------
    def on_envelope(self, envelope: IncomingMessageEnvelope) -> bool:
        """Account for one envelope read, in order. True: a control message, consumed (do not deliver it)."""
        state = self._state(envelope.ssp)
        if envelope.type == MessageType.USER:
            if self._unsettled:
                self._settle()
            if state.on_user(envelope.timestamp):
                self._recompute_task(None)
            return False
        if envelope.type == _DRAIN:
            self._on_drain(envelope, state)
            return True
        message = decode_body(envelope.type, envelope.message)
        _check_counted(envelope.ssp, state, message.task_name, message.task_count, "control")
        self._received_pending += 1
        # reconciled lazily, once per run of control messages, before anything reads the state; the list
        # holds every state that was unsettled since the last settle (by identity: states compare by value).
        # A message that ends a run settles every SSP and the task first: ending an SSP takes it out of the
        # task's min, which must have seen the SSP's last watermark.
        if self._unsettled and (message.type != _WATERMARK or message.task_name is None
                                or message.task_count > state.task_count):  # SspControlState.breaks_run, inlined
            self._settle()
        was_unsettled = state.unsettled
        state.on_control(message)
        if not was_unsettled:
            self._unsettled.append(state)
        return True

    def _on_drain(self, envelope: IncomingMessageEnvelope, state: SspControlState) -> None:
        message = decode_drain(envelope.message if envelope.message is not None else b"")
        _check_counted(envelope.ssp, state, message.task_name, message.task_count, "drain")
        self._received_pending += 1
        self.drains.on_message(envelope.ssp, message)

    def on_user_run(self, ssp: SystemStreamPartition, max_timestamp: int | None) -> None:
        """A run of user messages of ``ssp`` read one after another (no control message among them) whose
        largest event time is ``max_timestamp`` (None: none has one). The same bookkeeping as
        :meth:`on_envelope` for each of them, done once: a source partition's watermark only rises to
        the largest event time it saw, and nothing reads the task watermark before the batch boundary."""
        state = self._state(ssp)
        if self._unsettled:  # as on_envelope's first user message after control messages does
            self._settle()
        if state.on_user(max_timestamp):
            self._recompute_task(None)

    def _settle(self) -> None:
        for state in self._unsettled:
            if state.unsettled:
                state.settle()
        self._unsettled.clear()
        self._recompute_task(None)

    def _flush_received(self) -> None:
        if self._received_pending and self._received_counter is not None:
            self._received_counter.inc(self._received_pending)
            self._received_pending = 0

    def on_ssp_exhausted(self, ssp: SystemStreamPartition) -> None:
        """The runtime reached the end of a bounded source SSP: it has ended."""
        if self._unsettled:
            self._settle()
        self._state(ssp).on_exhausted()
        self._recompute_task(None)

    def is_late(self, envelope: IncomingMessageEnvelope) -> bool:
        """True for a user message whose event time is behind the task watermark."""
        if self._unsettled:
            self._settle()
        wm = self._watermark
        return (envelope.type == MessageType.USER and envelope.timestamp is not None and wm is not None
                and envelope.timestamp < wm)

    def on_late(self, envelope: IncomingMessageEnvelope) -> OutgoingMessageEnvelope | None:
        """Count a late message (call it instead of delivering one): the envelope that routes it to
        ``task.late.messages.stream`` under the ``route`` policy, None under ``drop``."""
        self.late_count += 1
        self._late_counter.inc()
        if self.settings.late_policy == LatePolicy.ROUTE and self.settings.late_stream is not None:
            self.late_routed += 1
            self._routed_counter.inc()
            return OutgoingMessageEnvelope(self.settings.late_stream, envelope.message, key=envelope.key,
                                           timestamp=envelope.timestamp)
        return None

    # --- watermark and end-of-stream -------------------------------------------------------
    def _recompute_task(self, now_ms: int | None) -> None:
        live = [s for s in self._states.values() if not s.ended]
        if not live:
            return
        watermarks = [s.watermark for s in live]
        candidate: int | None = None
        if all(w is not None for w in watermarks):
            candidate = min(w for w in watermarks if w is not None)
        advances = candidate is not None and (self._watermark is None or candidate > self._watermark)
        if not advances and now_ms is not None and self._idle.enabled:
            # Idle source partitions (Flink's withIdleness) are left out while another input is active.
            active = [s for s in live if not s.is_idle_source(now_ms, self._idle)]
            if active and len(active) < len(live) and all(s.watermark is not None for s in active):
                candidate = min(s.watermark for s in active if s.watermark is not None)
        if candidate is not None and (self._watermark is None or candidate > self._watermark):
            self._watermark = candidate
            self._wm_gauge.set(candidate)

    def watermark(self) -> int | None:
        """The task watermark: min over its live SSPs, monotonic; None before every input has one."""
        if self._unsettled:
            self._settle()
        return self._watermark

    def ssp_watermark(self, ssp: SystemStreamPartition) -> int | None:
        """The reconciled watermark of one input SSP."""
        if self._unsettled:
            self._settle()
        return self._state(ssp).watermark

    def is_ended(self, ssp: SystemStreamPartition) -> bool:
        """True once ``ssp`` has ended (all its producers sent end-of-stream, or the source ended)."""
        if self._unsettled:
            self._settle()
        return self._state(ssp).ended

    def all_ended(self) -> bool:
        """True when every input SSP has ended."""
        if self._unsettled:
            self._settle()
        return all(s.ended for s in self._states.values())

    def advance(self, now_ms: int) -> int | None:
        """At a batch boundary: apply idle timeouts as of ``now_ms`` (the batch's time) and return the
        task watermark if it advanced since the last call, else None."""
        self._flush_received()
        if self._unsettled:
            self._settle()
        for state in self._states.values():
            state.stamp(now_ms)
            state.recompute(now_ms, self._idle)
        self._recompute_task(now_ms)
        if self._watermark is not None and (self._reported is None or self._watermark > self._reported):
            self._reported = self._watermark
            return self._watermark
        return None

    # --- output ----------------------------------------------------------------------------
    def streams_written(self) -> tuple[SystemStream, ...]:
        """The streams :meth:`outgoing` may write and needs the partition count of: the intermediate
        outputs, and the inputs in Samza's protocol (whose aggregate partition this task may read)."""
        samza_inputs = sorted({ssp.system_stream for ssp in self.input_ssps
                               if self.settings.format(ssp.system_stream) == SAMZA_FORMAT})
        return tuple(self.settings.intermediate_outputs) + tuple(s for s in samza_inputs
                                                                 if s not in self.settings.intermediate_outputs)

    def outgoing(self, now_ms: int, partitions_by_stream: Mapping[SystemStream, int], *,
                 drained: str | None = None) -> list[OutgoingMessageEnvelope]:
        """The control messages to write at the end of a batch: the task watermark (when it has one)
        and, once every input ended, end-of-stream, to every partition of each intermediate output (in
        Samza's protocol: to its aggregate partition only); and, as the reader of a Samza-protocol
        input's aggregate partition, what it reconciled there, to the other partitions of that input.

        End-of-stream goes out once; after it nothing more does (the snapshot remembers it, so a
        replayed batch, restored from the checkpoint before it, sends it again). ``drained``: the drain
        this task completed, when the batch runs under it: its watermark and drain message go out once
        (after the watermark), and then nothing more while that drain lasts."""
        if self._unsettled:
            self._settle()
        out = self._rebroadcasts(now_ms, partitions_by_stream)
        if self._eos_sent or (drained is not None and self.drains.sent == drained):
            self._sent_counter.inc(len(out))
            return out
        ended = self.all_ended()
        for stream in self.settings.intermediate_outputs:
            partitions = self._partitions(stream, partitions_by_stream)
            body_format = self.settings.format(stream)
            targets = range(partitions) if body_format == SPARZA_FORMAT else \
                [samza_aggregate_partition(stream.stream, partitions)]
            # Held back by what the task's operators may still emit behind their watermark (set by the planner).
            holdback = self.settings.holdback_ms(stream)
            written = None if self._watermark is None else self._watermark - holdback
            if written is not None:
                self._emit(out, stream, ControlMessage.watermark(written, self.task_name, self.task_count),
                           body_format, targets, now_ms)
            if ended:
                self._emit(out, stream, ControlMessage.end_of_stream(self.task_name, self.task_count, written),
                           body_format, targets, now_ms)
            elif drained is not None:
                self._emit_drain(out, stream, DrainMessage(drained, self.task_name, self.task_count), body_format,
                                 targets, now_ms if written is None else written)
        self._sent_counter.inc(len(out))
        if self.all_ended():
            self._eos_sent = True
        elif drained is not None:
            self.drains.sent = drained
        return out

    def _emit_drain(self, out: list[OutgoingMessageEnvelope], stream: SystemStream, message: DrainMessage,
                    body_format: str, targets: Iterable[int], stamp: int) -> None:
        body = encode_drain(message, body_format)
        before = len(out)
        out.extend([OutgoingMessageEnvelope(stream, body, None, None, partition, stamp, _DRAIN)
                    for partition in targets])
        self._sent_bytes.inc(len(body) * (len(out) - before))

    def _partitions(self, stream: SystemStream, partitions_by_stream: Mapping[SystemStream, int]) -> int:
        if stream not in partitions_by_stream:
            raise ControlStateError(f"no partition count given for {stream}; pass it in partitions_by_stream "
                                    "(every stream of streams_written())")
        return int(partitions_by_stream[stream])

    def _emit(self, out: list[OutgoingMessageEnvelope], stream: SystemStream, message: ControlMessage,
              body_format: str, targets: Iterable[int], now_ms: int) -> None:
        body = encode_body(message, body_format)
        stamp = message.timestamp if message.timestamp is not None else now_ms
        mtype = message.type
        before = len(out)
        # positional (stream, message, key, partition_key, partition, timestamp, type): n x m of these per batch
        out.extend([OutgoingMessageEnvelope(stream, body, None, None, partition, stamp, mtype)
                    for partition in targets])
        self._sent_bytes.inc(len(body) * (len(out) - before))

    def _rebroadcasts(self, now_ms: int,
                      partitions_by_stream: Mapping[SystemStream, int]) -> list[OutgoingMessageEnvelope]:
        """Samza's aggregator: for each Samza-protocol input whose aggregate partition this task reads, its
        reconciled watermark (when it advanced) and end-of-stream (once) to every other partition."""
        out: list[OutgoingMessageEnvelope] = []
        for ssp, state in self._states.items():
            stream = ssp.system_stream
            if self.settings.format(stream) != SAMZA_FORMAT:
                continue
            sent = self._broadcast.get(stream)
            if sent is not None and sent["ended"]:
                continue
            partitions = self._partitions(stream, partitions_by_stream)
            if ssp.partition != samza_aggregate_partition(stream.stream, partitions):
                continue
            sent = self._broadcast.setdefault(stream, {"watermark": None, "ended": False})
            others = [p for p in range(partitions) if p != ssp.partition]
            if state.watermark is not None and (sent["watermark"] is None or state.watermark > sent["watermark"]):
                self._emit(out, stream, ControlMessage.watermark(state.watermark, None, 0), SAMZA_FORMAT, others,
                           now_ms)
                sent["watermark"] = state.watermark
            if state.ended:
                self._emit(out, stream, ControlMessage.end_of_stream(None, 0), SAMZA_FORMAT, others, now_ms)
                sent["ended"] = True
            else:
                self._rebroadcast_drain(out, ssp, others, now_ms)
        return out

    def _rebroadcast_drain(self, out: list[OutgoingMessageEnvelope], ssp: SystemStreamPartition, others: list[int],
                           now_ms: int) -> None:
        """Samza's aggregator for drains: once the aggregate partition drained for a run, that drain (without a
        producer name) to every other partition of the stream, once per run."""
        drains = self.drains
        run_id = drains.run_of(ssp)
        stream = str(ssp.system_stream)
        if run_id is None or drains.rebroadcast.get(stream) == run_id or not drains.is_drained(ssp, run_id):
            return
        self._emit_drain(out, ssp.system_stream, DrainMessage(run_id, None), SAMZA_FORMAT, others, now_ms)
        drains.rebroadcast[stream] = run_id

    # --- checkpoint ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for the task checkpoint (key ``"control"``)."""
        self._flush_received()
        if self._unsettled:
            self._settle()
        return {"version": SNAPSHOT_VERSION, "taskName": self.task_name, "watermark": self._watermark,
                "reported": self._reported, "eosSent": self._eos_sent, "lateCount": self.late_count,
                "lateRouted": self.late_routed,
                "broadcast": {str(stream): dict(sent) for stream, sent in sorted(self._broadcast.items())},
                "ssps": {str(ssp): state.to_json() for ssp, state in sorted(self._states.items())}}

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any] | None, task_name: str, task_count: int,
                input_ssps: Iterable[SystemStreamPartition], config: Config,
                metrics: MetricsRegistry | None = None, *, drains: Mapping[str, Any] | None = None) -> TaskControl:
        """A TaskControl with the state of :meth:`snapshot` (None or {}: a fresh one) and the drain state
        ``drains`` (:meth:`DrainTracker.snapshot`). SSPs the task no longer owns are dropped; new ones start
        fresh."""
        control = cls(task_name, task_count, input_ssps, config, metrics)
        if drains:
            control.drains = DrainTracker.restore(drains, control.input_ssps, {
                ssp: state.task_count for ssp, state in control._states.items() if state.intermediate})
        if not snapshot:
            return control
        version = snapshot.get("version")
        if version != SNAPSHOT_VERSION:
            raise ControlStateError(f"control snapshot version {version!r} is not {SNAPSHOT_VERSION}; it was "
                                    f"written by another sparza version")
        try:
            for text, data in (snapshot.get("ssps") or {}).items():
                ssp = SystemStreamPartition.parse(text)
                if ssp in control._states:
                    fresh = control._states[ssp]
                    control._states[ssp] = SspControlState.from_json(data, fresh.lateness_ms, fresh.intermediate,
                                                                     fresh.task_count)
            for text, sent in (snapshot.get("broadcast") or {}).items():
                control._broadcast[SystemStream.parse(text)] = {"watermark": sent.get("watermark"),
                                                                "ended": bool(sent.get("ended", False))}
            control._watermark = snapshot.get("watermark")
            control._reported = snapshot.get("reported")
            control._eos_sent = bool(snapshot.get("eosSent", False))
            control.late_count = int(snapshot.get("lateCount", 0))
            control.late_routed = int(snapshot.get("lateRouted", 0))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ControlStateError(f"unreadable control snapshot: {exc}") from exc
        if control._watermark is not None:
            control._wm_gauge.set(control._watermark)
        return control
