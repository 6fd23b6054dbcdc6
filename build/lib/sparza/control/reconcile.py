"""Per-SSP reconciliation: end-of-stream and watermark of one input partition.

An *intermediate* SSP is written by ``taskCount`` upstream tasks; it ends once all of them sent
end-of-stream, and its watermark is the min of the live producers' watermarks (producers that
ended are left out: they will write nothing more, so they must neither hold the min back nor, as
in FLINK-38477, push it to infinity while others are alive). Producers not heard from for
``idle_timeout_ms`` are left out as well when a quorum of live producers is active. A producer that
keeps reporting the same watermark is alive, not idle (as Samza's ``lastUpdateTime``): it may still
write data at that event time, so it keeps holding the min.

A *source* SSP's watermark is the largest event time seen minus the stream's lateness; it ends
when the runtime reaches the end of a bounded stream or a bare end-of-stream arrives.

Processing time for idle handling is the runtime's batch time (``now_ms`` at batch boundaries),
not the wall clock at message arrival, so a replayed batch decides exactly as the first run did.
Every watermark here is monotonic.

Upstream tasks' watermarks arrive in runs (each upstream batch ends with one per producer), and
recomputing the min after each of them made a run of n messages cost O(n^2). A watermark only marks
the SSP *unsettled*; :meth:`SspControlState.settle` recomputes once, before anything reads the
state. That gives the result recomputing after every message would: within a run of watermarks
from a fixed set of producers, the min (once every live producer reported) only grows, so the last
recompute finds the largest candidate. The only messages that could make an earlier candidate larger
than the last one (an end-of-stream, which changes the live set, a larger ``taskCount``, and a
message without a producer) settle the run before they are applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sparza.control.messages import ControlMessage
from sparza.streams import MessageType

__all__ = ["IdlePolicy", "ProducerState", "SspControlState"]


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """``task.watermark.idle.timeout.ms`` (-1: off) and ``task.watermark.quorum.percentage``."""

    timeout_ms: int = -1
    quorum: float = 0.5

    @property
    def enabled(self) -> bool:
        """True when idle producers may be left out of a min."""
        return self.timeout_ms > 0

    def quorum_count(self, live: int) -> int:
        """How many of ``live`` producers must be active: ``ceil(live * quorum)``, at least 1."""
        return max(1, math.ceil(live * self.quorum - 1e-9))


@dataclass(slots=True)
class ProducerState:
    """What one upstream task told one SSP: its latest watermark, whether it ended, and when it was
    last heard from (batch time; ``pending`` until the next batch boundary stamps it)."""

    watermark: int | None = None
    ended: bool = False
    heard_at: int | None = None
    pending: bool = False

    def to_json(self) -> dict[str, Any]:
        """JSON-able form for the task checkpoint."""
        return {"watermark": self.watermark, "ended": self.ended, "heardAt": self.heard_at,
                "pending": self.pending}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProducerState:
        """Inverse of :meth:`to_json`."""
        return cls(data.get("watermark"), bool(data.get("ended", False)), data.get("heardAt"),
                   bool(data.get("pending", False)))


_NO_IDLE = IdlePolicy()


def _is_active(heard_at: int | None, pending: bool, now_ms: int, timeout_ms: int) -> bool:
    return pending or (heard_at is not None and now_ms - heard_at < timeout_ms)


@dataclass(slots=True)
class SspControlState:
    """Reconciliation state of one input SSP (see the module docstring)."""

    intermediate: bool
    lateness_ms: int = 0
    watermark: int | None = None
    ended: bool = False
    task_count: int = 0
    producers: dict[str, ProducerState] = field(default_factory=dict)
    created_at: int | None = None
    heard_at: int | None = None
    pending: bool = False
    control_received: int = 0
    unsettled: bool = False

    # --- input -----------------------------------------------------------------------------
    def on_user(self, timestamp: int | None) -> bool:
        """A user message: on a source SSP it shows the partition is alive and its event time
        advances the watermark. True when the SSP's watermark advanced."""
        if self.intermediate or self.ended:
            return False
        self.pending = True
        return timestamp is not None and self._raise_to(int(timestamp) - self.lateness_ms)

    def on_control(self, message: ControlMessage) -> None:
        """A watermark or end-of-stream message from an upstream task (or a bare one from a source).
        Leaves the SSP unsettled: call :meth:`settle` before reading its watermark or end."""
        self.control_received += 1
        if self.unsettled and (message.type != MessageType.WATERMARK or message.task_name is None
                               or message.task_count > self.task_count):  # breaks_run, inlined: per message
            self.settle()  # this message could change the candidates: settle the run before it (module doc)
        if self.ended:
            return
        if message.task_name is None:
            # Not from a counted producer: a source's own end-of-stream or watermark (Samza's null taskName).
            if message.type == MessageType.END_OF_STREAM:
                self.ended = True
            elif message.timestamp is not None:
                self._raise_to(message.timestamp)
            return
        # A producer message makes this SSP intermediate even if config did not say so.
        self.intermediate = True
        # taskCount is fixed per upstream job model; a larger count (upstream rescaled) wins. Samza's format
        # has none (0): the configured count stands in.
        if message.task_count > self.task_count:
            self.task_count = message.task_count
        producer = self.producers.get(message.task_name)
        if producer is None:
            producer = self.producers[message.task_name] = ProducerState()
        if producer.ended:
            return
        producer.pending = True
        if message.type == MessageType.END_OF_STREAM:
            producer.ended = True
        elif message.timestamp is not None and (producer.watermark is None or message.timestamp > producer.watermark):
            # Per-producer monotonic: an older watermark (a replayed upstream batch) is ignored.
            producer.watermark = message.timestamp
        self.unsettled = True

    def breaks_run(self, message: ControlMessage) -> bool:
        """True for a message that must not be reconciled together with the ones before it: anything but a
        producer's watermark, or one announcing more producers (see the module docstring)."""
        return (message.type != MessageType.WATERMARK or message.task_name is None
                or message.task_count > self.task_count)

    def settle(self) -> None:
        """Recompute end-of-stream and watermark from the control messages applied since the last settle."""
        self.unsettled = False
        self.recompute(None, _NO_IDLE)

    def on_exhausted(self) -> None:
        """The runtime reached the end of this bounded source SSP."""
        self.ended = True

    # --- computation -----------------------------------------------------------------------
    def _raise_to(self, candidate: int | None) -> bool:
        if candidate is not None and (self.watermark is None or candidate > self.watermark):
            self.watermark = candidate
            return True
        return False

    @property
    def ended_producers(self) -> int:
        """How many upstream tasks have sent end-of-stream."""
        return sum(1 for p in self.producers.values() if p.ended)

    def stamp(self, now_ms: int) -> None:
        """At a batch boundary: time-stamp what was heard from during the batch (for idle handling)."""
        if self.unsettled:
            self.settle()
        if self.created_at is None:
            self.created_at = now_ms
        if self.pending:
            self.heard_at, self.pending = now_ms, False
        for producer in self.producers.values():
            if producer.pending:
                producer.heard_at, producer.pending = now_ms, False

    def recompute(self, now_ms: int | None, idle: IdlePolicy) -> None:
        """Recompute an intermediate SSP's end-of-stream and watermark; ``now_ms`` enables idle handling."""
        if not self.intermediate or self.ended or self.task_count == 0:
            return
        ended = self.ended_producers
        if ended >= self.task_count:
            self.ended = True
            return
        live_expected = self.task_count - ended
        live = [p for p in self.producers.values() if not p.ended]
        reported = [p for p in live if p.watermark is not None]
        candidate: int | None = None
        if len(reported) >= live_expected:
            candidate = min(p.watermark for p in reported if p.watermark is not None)
        advances = candidate is not None and (self.watermark is None or candidate > self.watermark)
        if not advances and now_ms is not None and idle.enabled:
            candidate = self._idle_candidate(now_ms, idle, live, live_expected)
        self._raise_to(candidate)

    def _idle_candidate(self, now_ms: int, idle: IdlePolicy, live: list[ProducerState],
                        live_expected: int) -> int | None:
        # Producers never heard from count as idle only once the SSP is older than the timeout.
        unheard = live_expected - len([p for p in live if p.watermark is not None])
        if unheard > 0 and (self.created_at is None or now_ms - self.created_at < idle.timeout_ms):
            return None
        active = [p.watermark for p in live
                  if p.watermark is not None and _is_active(p.heard_at, p.pending, now_ms, idle.timeout_ms)]
        if len(active) < idle.quorum_count(live_expected):
            return None
        return min(w for w in active if w is not None)

    def is_idle_source(self, now_ms: int, idle: IdlePolicy) -> bool:
        """A source SSP with no message within the idle timeout (never when idle handling is off)."""
        if self.intermediate or not idle.enabled or self.ended:
            return False
        if self.heard_at is None and not self.pending:
            return self.created_at is not None and now_ms - self.created_at >= idle.timeout_ms
        return not _is_active(self.heard_at, self.pending, now_ms, idle.timeout_ms)

    # --- checkpoint ------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """JSON-able form for the task checkpoint."""
        if self.unsettled:
            self.settle()
        return {"intermediate": self.intermediate, "watermark": self.watermark, "ended": self.ended,
                "taskCount": self.task_count, "createdAt": self.created_at, "heardAt": self.heard_at,
                "pending": self.pending, "producers": {n: p.to_json() for n, p in sorted(self.producers.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any], lateness_ms: int, intermediate: bool,
                  configured_count: int = 0) -> SspControlState:
        """Inverse of :meth:`to_json`; the lateness and the configured producer count come from the current
        config (the larger of the saved and the configured count holds)."""
        return cls(intermediate=bool(data.get("intermediate", False)) or intermediate, lateness_ms=lateness_ms,
                   watermark=data.get("watermark"), ended=bool(data.get("ended", False)),
                   task_count=max(int(data.get("taskCount", 0)), configured_count),
                   producers={n: ProducerState.from_json(p) for n, p in (data.get("producers") or {}).items()},
                   created_at=data.get("createdAt"), heard_at=data.get("heardAt"),
                   pending=bool(data.get("pending", False)))
