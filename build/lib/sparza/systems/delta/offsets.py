"""Offsets of Delta stream rows: ``(version, index)`` of a row, written ``"<version>:<index>"``.

``version`` is the Delta table version (commit) that added the row; ``index`` is the row's position
among the rows that commit added to the row's partition, counting the commit's ``add`` actions for
that partition in log order and the rows of each file in file order. Both are fixed once the commit
exists, so offsets are stable, strictly increasing within a partition, and need no offset column.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering

from sparza.systems.delta.errors import InvalidOffsetError

__all__ = ["DeltaOffset", "next_offset", "offset_key"]


@total_ordering
@dataclass(frozen=True, slots=True)
class DeltaOffset:
    """The position of one row in a partition: Delta ``version`` and ``index`` within that version.

    ``str()`` gives the compact checkpoint form ``"12:3"``; :meth:`parse` reads it back.
    """

    version: int
    index: int = 0

    def __post_init__(self) -> None:
        if self.version < 0 or self.index < 0:
            raise InvalidOffsetError(f"{self.version}:{self.index}", "version and index must be >= 0")

    def __str__(self) -> str:
        return f"{self.version}:{self.index}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, DeltaOffset):
            return NotImplemented
        return (self.version, self.index) < (other.version, other.index)

    @classmethod
    def parse(cls, text: str | DeltaOffset) -> DeltaOffset:
        """Parse ``"<version>:<index>"``; raises :class:`InvalidOffsetError` on anything else."""
        if isinstance(text, DeltaOffset):
            return text
        if not isinstance(text, str):
            raise InvalidOffsetError(text, f"an offset is a string, got {type(text).__name__}")
        version, sep, index = text.strip().partition(":")
        if not sep:
            raise InvalidOffsetError(text, "missing ':'")
        if not (version.isascii() and version.isdigit() and index.isascii() and index.isdigit()):
            raise InvalidOffsetError(text, "version and index must be non-negative integers")
        return cls(int(version), int(index))

    def next(self) -> DeltaOffset:
        """The offset right after this one (same version, next index)."""
        return DeltaOffset(self.version, self.index + 1)


def next_offset(offset: str | DeltaOffset) -> str:
    """The offset right after ``offset``: what a checkpoint stores as "next offset to read".

    Reading from it returns every row after ``offset`` and nothing before, even when ``offset``
    was the last row of its version (the next version's rows all sort after it).
    """
    return str(DeltaOffset.parse(offset).next())


def offset_key(offset: str) -> tuple[int, int]:
    """``(version, index)`` of ``offset``: tuples sort as the offsets do, and the documented ``"<version>:<index>"``
    form is split without building a :class:`DeltaOffset` (this runs once per adjunct message)."""
    if type(offset) is str:
        version, sep, index = offset.partition(":")
        if sep and version.isascii() and version.isdigit() and index.isascii() and index.isdigit():
            return (int(version), int(index))
    parsed = DeltaOffset.parse(offset)  # raises InvalidOffsetError, naming what is wrong
    return (parsed.version, parsed.index)
