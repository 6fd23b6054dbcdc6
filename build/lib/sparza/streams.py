"""The core stream model, named as in Samza: systems, streams, partitions and message envelopes.

A *system* is a storage system with streams in it (``delta``, ``azureblob``); a *system stream*
names one stream of a system; a *system stream partition* (SSP) is one partition of it and is the
unit that tasks own, offsets address and checkpoints record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from sparza.errors import ConfigError

__all__ = [
    "IncomingMessageEnvelope",
    "MessageType",
    "OutgoingMessageEnvelope",
    "SystemStream",
    "SystemStreamPartition",
    "parse_input_list",
]


class MessageType(IntEnum):
    """The type byte every stream row carries (SEP control messages): user data or a control message."""

    USER = 0
    WATERMARK = 1
    END_OF_STREAM = 2
    DRAIN = 3
    """Samza's drain (1.8): the producer wrote everything it will write before the job's drain."""


@dataclass(frozen=True, slots=True, order=True)
class SystemStream:
    """A stream within a system, written ``system.stream``."""

    system: str
    stream: str

    def __str__(self) -> str:
        return f"{self.system}.{self.stream}"

    @classmethod
    def parse(cls, text: str) -> SystemStream:
        """Parse ``system.stream``; the stream part may itself contain dots."""
        system, sep, stream = text.strip().partition(".")
        if not sep or not system or not stream:
            raise ValueError(f"not a system stream (expected 'system.stream'): {text!r}")
        return cls(system, stream)

    def partition(self, partition: int) -> SystemStreamPartition:
        """The SSP of this stream with the given partition number."""
        return SystemStreamPartition(self.system, self.stream, partition)


@dataclass(frozen=True, slots=True, order=True)
class SystemStreamPartition:
    """One partition of a system stream (an SSP), written ``system.stream#partition``."""

    system: str
    stream: str
    partition: int

    @property
    def system_stream(self) -> SystemStream:
        """The stream this partition belongs to."""
        return SystemStream(self.system, self.stream)

    def __str__(self) -> str:
        return f"{self.system}.{self.stream}#{self.partition}"

    @classmethod
    def parse(cls, text: str) -> SystemStreamPartition:
        """Parse ``system.stream#N``."""
        stream_text, sep, part = text.strip().rpartition("#")
        if not sep or not part.isdigit():
            raise ValueError(f"not a system stream partition (expected 'system.stream#N'): {text!r}")
        ss = SystemStream.parse(stream_text)
        return cls(ss.system, ss.stream, int(part))


@dataclass(slots=True, unsafe_hash=True)
class IncomingMessageEnvelope:
    """A message as a task receives it: where it came from, its offset, key, message and event time.

    ``size`` is the serialized size in bytes; ``type`` tells user messages from control messages.
    Treat it as read-only (it hashes on its fields, as before). It is not frozen because one is
    built per message and a frozen dataclass costs about 9x more to construct.
    """

    ssp: SystemStreamPartition
    offset: str
    key: Any
    message: Any
    timestamp: int | None = None
    size: int = 0
    type: MessageType = MessageType.USER

    @property
    def system_stream_partition(self) -> SystemStreamPartition:
        """Samza's long name for :attr:`ssp`."""
        return self.ssp

    @property
    def is_control(self) -> bool:
        """True for watermark and end-of-stream messages."""
        return self.type != MessageType.USER


@dataclass(slots=True)
class OutgoingMessageEnvelope:
    """A message a task sends: the target stream, the message, and how to pick its partition.

    ``partition`` wins when given; otherwise ``partition_key`` (or ``key``) is hashed by the
    producer. ``timestamp`` is the event time in epoch ms (None: the producer's choice).
    """

    system_stream: SystemStream
    message: Any
    key: Any = None
    partition_key: Any = None
    partition: int | None = None
    timestamp: int | None = None
    type: MessageType = field(default=MessageType.USER)


_RANGE = re.compile(r"^(?P<stream>.+?)#(?:(?P<one>\d+)|\[(?P<lo>\d+)-(?P<hi>\d+)\])$")


def parse_input_list(key: str, items: list[str]) -> list[tuple[SystemStream, list[int] | None]]:
    """Parse ``task.inputs`` / ``task.broadcast.inputs`` items.

    ``system.stream`` means every partition (None); ``system.stream#3`` one partition and
    ``system.stream#[0-3]`` a range. ``key`` is used in the error message.
    """
    out: list[tuple[SystemStream, list[int] | None]] = []
    for item in items:
        match = _RANGE.match(item.strip())
        try:
            if match is None:
                out.append((SystemStream.parse(item), None))
            elif match.group("one") is not None:
                out.append((SystemStream.parse(match.group("stream")), [int(match.group("one"))]))
            else:
                lo, hi = int(match.group("lo")), int(match.group("hi"))
                if hi < lo:
                    raise ValueError(item)
                out.append((SystemStream.parse(match.group("stream")), list(range(lo, hi + 1))))
        except ValueError as exc:
            raise ConfigError(key, item, "system.stream, system.stream#N or system.stream#[N-M]") from exc
    return out
