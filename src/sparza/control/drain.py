"""Samza's drain control message (type byte 3) and the per-task bookkeeping of a drain, as a library.

**Not wired into the runtime yet** (the runtime refuses type 3 on intermediate streams, see
:func:`sparza.control.messages.decode_body`): this is the wire format and the reconciliation a drain
will use, tested on its own.

A drain stops a job after it processed what was in flight: every task reads its source inputs up to the
end offsets observed when the drain was requested, fires everything it holds (windows, sessions, and
the unmatched sides of joins that say so), commits, and sends a drain message into every partition of
each intermediate stream it writes, so the downstream tasks drain the same way once every upstream
producer of each of their partitions drained. Samza (1.8, SAMZA-2741) sends the same message after a
``Long.MAX_VALUE`` watermark; its body carries the drain's ``runId`` so a message of an older drain is
told apart.

Bodies (both always read, as for watermarks and end-of-stream):

- ``sparza``: ``{"version": 1, "taskName": "Partition 3", "taskCount": 4, "runId": "..."}``;
- ``samza``: exactly Samza's ``DrainMessage`` as Jackson writes it: ``{"taskName": ..., "version": 1,
  "runId": ...}`` (``task-name`` / ``run-id`` accepted too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sparza.control.messages import CONTROL_VERSION, SAMZA_FORMAT, SPARZA_FORMAT, ControlMessageError
from sparza.streams import SystemStreamPartition

__all__ = ["DRAIN_TYPE", "DrainListenerTask", "DrainMessage", "DrainTracker", "decode_drain", "drain_from_wire",
           "drain_to_wire", "encode_drain"]

DRAIN_TYPE = 3
"""Samza's ``MessageType.DRAIN`` ordinal: the type byte (or ``type`` column value) of a drain message."""


@dataclass(frozen=True, slots=True)
class DrainMessage:
    """One upstream task's drain of run ``run_id``: it wrote everything it will write before the drain.
    ``task_name`` None: from a source or an aggregator (settles its partition directly); ``task_count`` 0:
    not said (Samza's body)."""

    run_id: str
    task_name: str | None
    task_count: int = 0
    version: int = CONTROL_VERSION

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ControlMessageError("a drain message needs a runId")
        if self.task_count < 0:
            raise ControlMessageError(f"taskCount must be >= 0, got {self.task_count}")


def encode_drain(message: DrainMessage, body_format: str = SPARZA_FORMAT) -> bytes:
    """The JSON body of a drain message in ``body_format`` (``sparza`` or ``samza``)."""
    if body_format == SAMZA_FORMAT:
        body: dict[str, Any] = {"taskName": message.task_name, "version": message.version, "runId": message.run_id}
    elif body_format == SPARZA_FORMAT:
        body = {"version": message.version, "taskName": message.task_name, "taskCount": message.task_count,
                "runId": message.run_id}
    else:
        raise ValueError(f"unknown control-message format {body_format!r}; expected sparza or samza")
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_drain(data: bytes | str | Mapping[str, Any]) -> DrainMessage:
    """Parse a drain body of either format; anything malformed raises :class:`ControlMessageError`."""
    raw = None if isinstance(data, Mapping) else (data.encode("utf-8") if isinstance(data, str) else bytes(data))
    try:
        body = dict(data) if isinstance(data, Mapping) else json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ControlMessageError(f"drain body is not JSON: {exc}", raw) from exc
    if not isinstance(body, dict):
        raise ControlMessageError("drain body is not a JSON object", raw)
    version = body.get("version", CONTROL_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > CONTROL_VERSION:
        raise ControlMessageError(f"drain version {version!r} is not one this reader knows ({CONTROL_VERSION})", raw)
    run_id = body.get("runId", body.get("run-id"))
    if not isinstance(run_id, str) or not run_id:
        raise ControlMessageError(f"a drain message needs a runId string, got {run_id!r}", raw)
    task_name = body.get("taskName", body.get("task-name"))
    if task_name is not None and not isinstance(task_name, str):
        raise ControlMessageError(f"taskName must be a string, got {task_name!r}", raw)
    task_count = body.get("taskCount", body.get("task-count", 0)) or 0
    if not isinstance(task_count, int) or isinstance(task_count, bool) or task_count < 0:
        raise ControlMessageError(f"taskCount must be an integer >= 0, got {task_count!r}", raw)
    return DrainMessage(run_id, task_name, task_count, version)


def drain_to_wire(message: DrainMessage, body_format: str = SPARZA_FORMAT) -> bytes:
    """Samza's one-byte-string form: the type byte 3 followed by the body."""
    return bytes([DRAIN_TYPE]) + encode_drain(message, body_format)


def drain_from_wire(data: bytes) -> DrainMessage:
    """Parse :func:`drain_to_wire` output (Samza's ``IntermediateMessageSerde`` bytes of a drain)."""
    if not data or data[0] != DRAIN_TYPE:
        raise ControlMessageError(f"not a drain message (type byte {data[:1]!r}, expected 3)", data[:80] or None)
    return decode_drain(data[1:])


@runtime_checkable
class DrainListenerTask(Protocol):
    """A task told, once, that every one of its inputs drained: it emits what it holds (open windows, a join's
    unmatched messages) before the commit that ends its run. (To join the task protocols of
    :mod:`sparza.task` when the runtime calls it.)"""

    def on_drain(self, collector: Any, coordinator: Any) -> None:
        """Called once, after the last message before the drain; may send final results."""
        ...


@dataclass
class _SspDrain:
    producers: set[str] = field(default_factory=set)
    task_count: int = 0
    drained: bool = False


class DrainTracker:
    """Per task: which input partitions drained for run ``run_id`` (every upstream producer of an intermediate
    partition sent its drain; a source partition reached the offsets observed at the request). Its snapshot
    goes into the task checkpoint, as the end-of-stream counts do, so a restart never waits for drain messages
    it already read. Messages of another run are ignored (an older drain's leftovers)."""

    def __init__(self, run_id: str, ssps: Iterable[SystemStreamPartition],
                 producer_counts: Mapping[SystemStreamPartition, int] | None = None) -> None:
        self.run_id = run_id
        counts = dict(producer_counts or {})
        self._ssps = {ssp: _SspDrain(task_count=counts.get(ssp, 0)) for ssp in ssps}

    def on_message(self, ssp: SystemStreamPartition, message: DrainMessage) -> bool:
        """Account one drain message read from ``ssp``; True when that partition has now drained."""
        state = self._state(ssp)
        if message.run_id != self.run_id or state.drained:
            return state.drained
        if message.task_name is None:
            state.drained = True
            return True
        state.producers.add(message.task_name)
        state.task_count = max(state.task_count, message.task_count)
        state.drained = state.task_count > 0 and len(state.producers) >= state.task_count
        return state.drained

    def on_source_drained(self, ssp: SystemStreamPartition) -> None:
        """A source partition reached the end offset observed when the drain was requested."""
        self._state(ssp).drained = True

    def is_drained(self, ssp: SystemStreamPartition) -> bool:
        """Whether ``ssp`` drained."""
        return self._state(ssp).drained

    def all_drained(self) -> bool:
        """True when every input partition of the task drained: the task may fire everything, commit and send
        its own drain downstream."""
        return all(s.drained for s in self._ssps.values())

    def _state(self, ssp: SystemStreamPartition) -> _SspDrain:
        try:
            return self._ssps[ssp]
        except KeyError:
            raise ControlMessageError(f"a drain message of {ssp}, which is not an input of this task") from None

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for the task checkpoint."""
        return {"runId": self.run_id, "ssps": {str(ssp): {"producers": sorted(s.producers), "taskCount": s.task_count,
                                                          "drained": s.drained}
                                               for ssp, s in sorted(self._ssps.items())}}

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any] | None, run_id: str, ssps: Iterable[SystemStreamPartition],
                producer_counts: Mapping[SystemStreamPartition, int] | None = None) -> DrainTracker:
        """The tracker of :meth:`snapshot` when it is of run ``run_id`` (else a fresh one: a new drain)."""
        tracker = cls(run_id, ssps, producer_counts)
        if not snapshot or snapshot.get("runId") != run_id:
            return tracker
        for text, data in (snapshot.get("ssps") or {}).items():
            ssp = SystemStreamPartition.parse(text)
            if ssp in tracker._ssps:
                state = tracker._ssps[ssp]
                state.producers = set(data.get("producers", []))
                state.task_count = max(state.task_count, int(data.get("taskCount", 0)))
                state.drained = bool(data.get("drained", False))
        return tracker
