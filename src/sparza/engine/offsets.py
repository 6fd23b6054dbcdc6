"""Offset arithmetic the planner needs beyond the SystemAdmin protocol: compare, cap and count.

Offsets are opaque strings ordered by the system's admin. To cap a batch at N messages the
planner must know the offset N messages after a start; to report lag it must count messages
between two offsets. Admins that can answer cheaply implement :class:`~sparza.systems.SupportsOffsetArithmetic` (the
Delta admin does, from its log's row counts); for other systems batches are uncapped and lag is
unknown.
"""

from __future__ import annotations

from typing import Any

from sparza.streams import SystemStreamPartition
from sparza.systems import SupportsMessageCount, SupportsOffsetArithmetic

__all__ = ["LagCounts", "OffsetOps"]


class OffsetOps:
    """Offset operations for the SSPs of one system, backed by that system's admin."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def compare(self, a: str, b: str) -> int:
        """Negative, zero or positive as ``a`` is before, equal to or after ``b``."""
        return int(self.admin.offset_comparator(a, b))

    def min(self, a: str, b: str) -> str:
        """The earlier offset."""
        return a if self.compare(a, b) <= 0 else b

    def offset_after(self, ssp: SystemStreamPartition, start: str, end: str, n: int) -> str:
        """The offset ``n`` messages after ``start``, or ``end`` when fewer than ``n`` lie in ``[start, end)``
        (always ``end`` when the admin cannot tell: the batch is then uncapped)."""
        if isinstance(self.admin, SupportsOffsetArithmetic):
            return str(self.admin.offset_after(ssp, start, end, n))
        return end

    def count_between(self, ssp: SystemStreamPartition, start: str, end: str) -> int | None:
        """How many messages lie in ``[start, end)``; None when the system cannot tell cheaply."""
        if self.compare(start, end) >= 0:
            return 0
        if isinstance(self.admin, SupportsOffsetArithmetic):
            return int(self.admin.count_between(ssp, start, end))
        return None

    def count_messages(self, ssp: SystemStreamPartition, start: str, end: str) -> int | None:
        """How many messages lie in ``[start, end)``, exactly where the system can count them by reading
        (:class:`~sparza.systems.SupportsMessageCount`; else as :meth:`count_between`). For decisions, not lag."""
        if self.compare(start, end) >= 0:
            return 0
        if isinstance(self.admin, SupportsMessageCount):
            return int(self.admin.count_messages(ssp, start, end))
        return self.count_between(ssp, start, end)


class LagCounts:
    """Messages between readers' offsets and their SSPs' upcoming offsets (lag), each kept up to date by counting only
    what moved since the last count: what the reader read, and what arrived.

    A full count costs what lies between the two offsets (for Delta: every commit in the range), so a job of a
    thousand tasks behind by a hundred commits each counted a hundred thousand commits a report (0.35 s). Counted from
    the moves, a report costs what was read and written since the last one. A pair that moved back (a stream created
    again, a reset offset) or a reader ahead of the upcoming offset read is counted in full.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[str, str, int]] = {}

    def count(self, key: tuple[str, str], ops: OffsetOps, ssp: SystemStreamPartition, offset: str,
              upcoming: str) -> int | None:
        """The lag of reader ``key`` (e.g. task and SSP) at ``offset`` on ``ssp`` whose next offset is ``upcoming``;
        None when the system cannot count."""
        known = self._known.get(key)
        if known is not None:
            before, then, lag = known
            if before == offset and then == upcoming:
                return lag
            if (ops.compare(before, then) <= 0 and ops.compare(before, offset) <= 0
                    and ops.compare(then, upcoming) <= 0 and ops.compare(offset, upcoming) <= 0):
                read = ops.count_between(ssp, before, offset)
                arrived = ops.count_between(ssp, then, upcoming)
                if read is not None and arrived is not None:
                    lag = lag - read + arrived
                    self._known[key] = (offset, upcoming, lag)
                    return lag
        counted = ops.count_between(ssp, offset, upcoming)
        if counted is None:
            self._known.pop(key, None)
            return None
        self._known[key] = (offset, upcoming, counted)
        return counted

    def clear(self) -> None:
        """Forget every count (the next ones are full counts)."""
        self._known.clear()
