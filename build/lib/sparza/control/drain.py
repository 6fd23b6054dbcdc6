"""Samza's drain control message (type byte 3) and the per-task bookkeeping of a drain.

A drain stops a job after it processed what was in flight: every task reads its source inputs up to the
end offsets observed when the drain was requested, fires everything it holds (windows, sessions, and
the unmatched sides of joins that say so), commits, and sends a drain message into every partition of
each intermediate stream it writes, so the downstream tasks drain the same way once every upstream
producer of each of their partitions drained. The message's ``runId`` is the drain's id, so a message
of an older drain is told apart. (Samza, 1.8 / SAMZA-2741, also sends a ``Long.MAX_VALUE`` watermark
first; sparza does not: a drained job continues where it stopped when it runs again, with its watermarks.)

The runtime (:mod:`sparza.engine.drain`) decides when a task's source partitions reached their ends;
:class:`DrainTracker` counts the drain messages of its intermediate partitions and remembers the drain
the task completed.

Bodies (both always read, as for watermarks and end-of-stream):

- ``sparza``: ``{"version": 1, "taskName": "Partition 3", "taskCount": 4, "runId": "..."}``;
- ``samza``: exactly Samza's ``DrainMessage`` as Jackson writes it: ``{"taskName": ..., "version": 1,
  "runId": ...}`` (``task-name`` / ``run-id`` accepted too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparza.control.messages import CONTROL_VERSION, SAMZA_FORMAT, SPARZA_FORMAT, ControlMessageError
from sparza.streams import MessageType, SystemStreamPartition

__all__ = ["DRAIN_TYPE", "DrainMessage", "DrainTracker", "decode_drain", "drain_from_wire", "drain_to_wire",
           "encode_drain"]

DRAIN_TYPE = int(MessageType.DRAIN)
"""Samza's ``MessageType.DRAIN`` ordinal, 3: the type byte (or ``type`` column value) of a drain message."""


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


@dataclass
class _SspDrain:
    configured: int = 0                 # upstream tasks, from the config (0: not configured)
    run_id: str | None = None           # the drain whose messages were read last on this partition
    producers: set[str] = field(default_factory=set)
    task_count: int = 0
    drained: bool = False


class DrainTracker:
    """Per task: the drain messages read on each intermediate input partition, and the drain the task completed.

    An intermediate partition has drained for run ``r`` when every upstream producer sent its drain of ``r`` (or
    a producer-less message, an aggregator's re-broadcast, said so). Messages are counted whatever drain the task
    itself knows of yet: a downstream task may read an upstream task's drain before its own driver saw the
    request. Only the newest drain read per partition is kept (a later drain replaces an older one's count).
    The snapshot goes into the task checkpoint (``drain``), next to the control state, so a restart never
    waits for drain messages it already read (Samza kept its ``DrainStates`` in memory only)."""

    def __init__(self, ssps: Iterable[SystemStreamPartition],
                 producer_counts: Mapping[SystemStreamPartition, int] | None = None) -> None:
        counts = dict(producer_counts or {})
        self._ssps = {ssp: _SspDrain(configured=counts.get(ssp, 0), task_count=counts.get(ssp, 0)) for ssp in ssps}
        self.completed: str | None = None
        """The drain this task completed (fired ``on_drain``, committed, sent its drain downstream)."""
        self.sent: str | None = None
        """The drain whose messages this task wrote into its intermediate outputs."""
        self.rebroadcast: dict[str, str] = {}
        """Samza's protocol, as a stream's aggregate-partition reader: stream → the drain re-broadcast."""

    def on_message(self, ssp: SystemStreamPartition, message: DrainMessage) -> bool:
        """Account one drain message read from ``ssp``; True when that partition has now drained for the
        message's run."""
        state = self._state(ssp)
        if message.run_id != state.run_id:
            state.run_id, state.producers, state.drained = message.run_id, set(), False
            state.task_count = state.configured
        if state.drained:
            return True
        if message.task_name is None:
            state.drained = True
            return True
        state.producers.add(message.task_name)
        state.task_count = max(state.task_count, message.task_count)
        state.drained = state.task_count > 0 and len(state.producers) >= state.task_count
        return state.drained

    def run_of(self, ssp: SystemStreamPartition) -> str | None:
        """The drain whose messages were read last on ``ssp`` (None: none yet)."""
        return self._state(ssp).run_id

    def is_drained(self, ssp: SystemStreamPartition, run_id: str) -> bool:
        """Whether ``ssp`` drained for drain ``run_id``."""
        state = self._state(ssp)
        return state.drained and state.run_id == run_id

    def _state(self, ssp: SystemStreamPartition) -> _SspDrain:
        try:
            return self._ssps[ssp]
        except KeyError:
            raise ControlMessageError(f"a drain message of {ssp}, which is not an input of this task") from None

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for the task checkpoint: what was read per partition (only partitions that read a
        drain), the drain completed and the drain sent."""
        ssps = {str(ssp): {"runId": s.run_id, "producers": sorted(s.producers), "taskCount": s.task_count,
                           "drained": s.drained}
                for ssp, s in sorted(self._ssps.items()) if s.run_id is not None}
        return {"completed": self.completed, "sent": self.sent, "rebroadcast": dict(sorted(self.rebroadcast.items())),
                "ssps": ssps}

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any] | None, ssps: Iterable[SystemStreamPartition],
                producer_counts: Mapping[SystemStreamPartition, int] | None = None) -> DrainTracker:
        """The tracker of :meth:`snapshot` (None: a fresh one); partitions the task no longer reads are dropped."""
        tracker = cls(ssps, producer_counts)
        if not snapshot:
            return tracker
        try:
            tracker.completed = snapshot.get("completed")
            tracker.sent = snapshot.get("sent")
            tracker.rebroadcast = {str(k): str(v) for k, v in (snapshot.get("rebroadcast") or {}).items()}
            for text, data in (snapshot.get("ssps") or {}).items():
                ssp = SystemStreamPartition.parse(text)
                state = tracker._ssps.get(ssp)
                if state is None:
                    continue
                state.run_id = data.get("runId")
                state.producers = {str(p) for p in data.get("producers", [])}
                state.task_count = max(state.configured, int(data.get("taskCount", 0)))
                state.drained = bool(data.get("drained", False))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ControlMessageError(f"unreadable drain state in the task checkpoint: {exc}") from exc
        return tracker
