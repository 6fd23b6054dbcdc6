"""Errors of the Delta stream system; each carries the data a caller needs to act on it."""

from __future__ import annotations

from sparza.errors import JOB_CONFIG_PLACEHOLDER, DataError, SparzaError

__all__ = [
    "DeltaStreamError",
    "InvalidOffsetError",
    "OffsetRemovedError",
    "PartitionCountMismatchError",
    "StreamNotFoundError",
    "TableError",
    "TableRowError",
]


class DeltaStreamError(SparzaError):
    """Root of the errors raised by :mod:`sparza.systems.delta`."""


class InvalidOffsetError(DeltaStreamError, ValueError):
    """An offset string is not a Delta stream offset (``<version>:<index>``)."""

    def __init__(self, text: object, reason: str) -> None:
        self.text = text
        self.reason = reason
        super().__init__(f"not a delta stream offset: {text!r} ({reason}); expected '<version>:<index>', "
                         "e.g. '12:0'")


class StreamNotFoundError(DeltaStreamError, LookupError):
    """The stream's Delta table does not exist at its location."""

    def __init__(self, stream: str, location: str) -> None:
        self.stream = stream
        self.location = location
        super().__init__(f"stream {stream!r} does not exist at {location} "
                         f"(create it with 'sparza stream create {stream} --partitions N --config "
                         f"{JOB_CONFIG_PLACEHOLDER}')")


class PartitionCountMismatchError(DeltaStreamError):
    """A stream exists with another partition count than the one asked for."""

    def __init__(self, stream: str, existing: int, requested: int) -> None:
        self.stream = stream
        self.existing = existing
        self.requested = requested
        super().__init__(f"stream {stream!r} already exists with {existing} partitions, not {requested}; "
                         "use the existing count or another stream name")


class OffsetRemovedError(DeltaStreamError, LookupError):
    """A read started at an offset whose rows retention already removed."""

    def __init__(self, stream: str, partition: int, offset: str, oldest: str | None) -> None:
        self.stream = stream
        self.partition = partition
        self.offset = offset
        self.oldest = oldest
        where = f"the oldest available is {oldest}" if oldest else "the partition has no readable rows"
        super().__init__(f"offset {offset} of {stream}#{partition} was removed by retention; {where} "
                         "(reset the consumer to 'oldest' or to a newer offset)")


class TableError(SparzaError, ValueError):
    """A message does not fit its typed table, or the table cannot take the declared schema."""


class TableRowError(TableError, DataError):
    """One message does not fit its typed table (a NOT NULL column without a value, a value of another
    type, an unknown column): a data error, deterministic, naming the ``column``."""
