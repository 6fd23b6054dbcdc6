"""The control-message wire format of SEP-004: a type byte plus a versioned JSON body.

Stream rows carry the type in their own ``type`` column (0 user, 1 watermark, 2 end-of-stream, 3 drain:
see :mod:`sparza.control.drain`) and the body in ``value``; :func:`encode_body` / :func:`decode_body` handle
the body. Systems without a type column carry both in one byte string (``[type byte][body]``):
:func:`to_wire` / :func:`from_wire`.

Two body formats, both always read:

- ``sparza`` (written by default): ``{"version", "taskName", "taskCount", "timestamp"}``. The body
  says how many tasks produce the stream (``taskCount``), so a downstream job counts end-of-stream
  without knowing the upstream job model.
- ``samza``: exactly what Samza's ``IntermediateMessageSerde`` writes (checked against Samza's
  Jackson output): ``{"timestamp", "taskName", "version"}`` for a watermark, ``{"taskName",
  "version"}`` for end-of-stream. No ``taskCount``: Samza derives the producer count from its job
  model, sparza from ``systems.<s>.streams.<x>.control.producer.count``. A Samza reader refuses
  fields it does not know (Jackson's default) and would then take the message for user data, so
  this format writes nothing else.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from sparza.errors import SparzaError
from sparza.streams import MessageType

__all__ = [
    "CONTROL_VERSION",
    "FORMATS",
    "SAMZA_FORMAT",
    "SPARZA_FORMAT",
    "ControlMessage",
    "ControlMessageError",
    "decode_body",
    "encode_body",
    "from_wire",
    "samza_aggregate_partition",
    "to_wire",
]

CONTROL_VERSION = 1
"""The body version this code writes; readers accept this version and refuse newer ones."""

SPARZA_FORMAT = "sparza"
"""Body with ``taskCount``, sent by every upstream task to every partition (the default)."""
SAMZA_FORMAT = "samza"
"""Samza's body (no ``taskCount``), sent by every upstream task to one aggregate partition only."""
FORMATS = (SPARZA_FORMAT, SAMZA_FORMAT)


class ControlMessageError(SparzaError, ValueError):
    """A control message could not be decoded (bad type byte, bad JSON, missing or ill-typed field).

    ``data`` holds (the start of) the offending bytes so the row can be found in the stream.
    """

    def __init__(self, reason: str, data: bytes | None = None) -> None:
        self.reason = reason
        self.data = data
        shown = "" if data is None else f": {data[:80]!r}"
        super().__init__(f"bad control message ({reason}){shown}")


@dataclass(frozen=True, slots=True)
class ControlMessage:
    """One watermark or end-of-stream message from one upstream task.

    ``task_name`` is None for messages that do not come from a counted producer (a bounded source's
    end-of-stream, or a Samza aggregator's re-broadcast); such a message settles its SSP directly.
    ``task_count`` is 0 when the body does not say (Samza's format: the reader's config does).
    ``timestamp`` is the producer's watermark in epoch ms (None for end-of-stream).
    """

    type: MessageType
    task_name: str | None
    task_count: int
    timestamp: int | None = None
    version: int = CONTROL_VERSION

    def __post_init__(self) -> None:
        if self.type == MessageType.USER:
            raise ControlMessageError("type 0 is a user message, not a control message")
        if self.type == MessageType.DRAIN:
            raise ControlMessageError("a drain is a DrainMessage (sparza.control.drain), not a ControlMessage")
        if self.type == MessageType.WATERMARK and self.timestamp is None:
            raise ControlMessageError("a watermark needs a timestamp")
        if self.task_count < 0:
            raise ControlMessageError(f"taskCount must be >= 0, got {self.task_count}")

    @classmethod
    def watermark(cls, timestamp: int, task_name: str | None, task_count: int) -> ControlMessage:
        """A watermark: ``task_name`` has seen everything up to ``timestamp`` (ms)."""
        return cls(MessageType.WATERMARK, task_name, task_count, int(timestamp))

    @classmethod
    def end_of_stream(cls, task_name: str | None, task_count: int, timestamp: int | None = None) -> ControlMessage:
        """An end-of-stream: ``task_name`` will write nothing more to this partition."""
        return cls(MessageType.END_OF_STREAM, task_name, task_count, timestamp)


def encode_body(message: ControlMessage, body_format: str = SPARZA_FORMAT) -> bytes:
    """The JSON body as UTF-8 bytes: ``{"version", "taskName", "taskCount", "timestamp"}``, or in Samza's
    format ``{"timestamp", "taskName", "version"}`` (watermark) / ``{"taskName", "version"}`` (end-of-stream)."""
    if body_format == SAMZA_FORMAT:
        body: dict[str, Any] = {"taskName": message.task_name, "version": message.version}
        if message.type == MessageType.WATERMARK:
            body = {"timestamp": message.timestamp, **body}
    elif body_format == SPARZA_FORMAT:
        body = {"version": message.version, "taskName": message.task_name,
                "taskCount": message.task_count, "timestamp": message.timestamp}
    else:
        raise ValueError(f"unknown control-message format {body_format!r}; expected one of {', '.join(FORMATS)}")
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def samza_aggregate_partition(stream: str, partitions: int) -> int:
    """The partition Samza's upstream tasks send a stream's control messages to: Java's
    ``stream.hashCode() % partitions`` (a negative remainder made positive, as Samza's Kafka producer
    does with the partition key); ``stream`` is the physical name (for Kafka, the topic)."""
    h = 0
    data = stream.encode("utf-16-be")
    for i in range(0, len(data), 2):  # Java hashes UTF-16 code units, in 32-bit two's complement
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    remainder = abs(h) % partitions  # Java's % keeps the dividend's sign; the producer then takes abs()
    return remainder


def _field(body: dict[str, Any], *names: str) -> Any:
    # Samza's Jackson creators accepted both camelCase and dashed spellings; so do we.
    for name in names:
        if name in body:
            return body[name]
    return None


def decode_body(message_type: MessageType | int, data: bytes | str | dict[str, Any] | None) -> ControlMessage:
    """Parse a control body of the given type. Empty data (a source's bare end-of-stream) is allowed
    for end-of-stream only; everything else malformed raises :class:`ControlMessageError`.

    Byte bodies are parsed once per process: every upstream task writes the same body to every
    partition, so the downstream tasks sharing a Python worker would otherwise parse each one again
    (messages are immutable; errors are not cached)."""
    if type(data) is bytes:
        return _decode_bytes(int(message_type), data)
    return _decode(message_type, data)


@functools.lru_cache(maxsize=4096)
def _decode_bytes(message_type: int, data: bytes) -> ControlMessage:
    return _decode(message_type, data)


def _decode(message_type: MessageType | int, data: bytes | str | dict[str, Any] | None) -> ControlMessage:
    try:
        mtype = MessageType(int(message_type))
    except ValueError as exc:
        raise ControlMessageError(f"unknown message type {message_type!r}") from exc
    if mtype == MessageType.USER:
        raise ControlMessageError("type 0 is a user message, not a control message")
    if mtype == MessageType.DRAIN:
        raise ControlMessageError("type 3 is a drain message, whose body has a runId: read it with "
                                  "sparza.control.drain.decode_drain")
    raw: bytes | None = None
    if data is None or data in (b"", ""):
        if mtype == MessageType.END_OF_STREAM:
            return ControlMessage.end_of_stream(None, 0)
        raise ControlMessageError("empty watermark body")
    if isinstance(data, dict):
        body: Any = data
    else:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ControlMessageError(f"body is not JSON: {exc}", raw) from exc
    if not isinstance(body, dict):
        raise ControlMessageError("body is not a JSON object", raw)
    version = _field(body, "version")
    if version is None:
        version = CONTROL_VERSION
    if not isinstance(version, int) or isinstance(version, bool):
        raise ControlMessageError(f"version must be an integer, got {version!r}", raw)
    if version > CONTROL_VERSION:
        raise ControlMessageError(f"version {version} is newer than this reader's {CONTROL_VERSION}; upgrade sparza",
                                  raw)
    task_name = _field(body, "taskName", "task-name")
    if task_name is not None and not isinstance(task_name, str):
        raise ControlMessageError(f"taskName must be a string, got {task_name!r}", raw)
    task_count = _field(body, "taskCount", "task-count")
    if task_count is None:
        task_count = 0
    if not isinstance(task_count, int) or isinstance(task_count, bool) or task_count < 0:
        raise ControlMessageError(f"taskCount must be an integer >= 0, got {task_count!r}", raw)
    timestamp = _field(body, "timestamp")
    if timestamp is not None and (not isinstance(timestamp, int) or isinstance(timestamp, bool)):
        raise ControlMessageError(f"timestamp must be an integer (ms), got {timestamp!r}", raw)
    if mtype == MessageType.WATERMARK and timestamp is None:
        raise ControlMessageError("a watermark needs a timestamp", raw)
    return ControlMessage(mtype, task_name, task_count, timestamp, version)


def to_wire(message: ControlMessage) -> bytes:
    """The one-byte-string form: the type byte followed by the JSON body."""
    return bytes([int(message.type)]) + encode_body(message)


def from_wire(data: bytes) -> ControlMessage:
    """Parse :func:`to_wire` output; a leading 0 byte (a user message) is refused."""
    if not data:
        raise ControlMessageError("no type byte (empty message)")
    return decode_body(data[0], data[1:])
