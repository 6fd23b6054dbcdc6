"""Offset arithmetic the planner needs beyond the SystemAdmin protocol: compare, cap and count.

Offsets are opaque strings ordered by the system's admin. To cap a batch at N messages the
planner must know the offset N messages after a start; to report lag it must count messages
between two offsets. Delta streams answer both from their log (per-commit row counts per
partition) without reading data; other systems may offer ``offset_after`` / ``count_between`` on
their admin, else batches are uncapped and lag is unknown.
"""

from __future__ import annotations

from typing import Any

from sparza.streams import SystemStreamPartition

__all__ = ["OffsetOps"]


class OffsetOps:
    """Offset operations for the SSPs of one system, backed by that system's admin."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin
        self._delta_logs: dict[str, Any] = {}

    def compare(self, a: str, b: str) -> int:
        """Negative, zero or positive as ``a`` is before, equal to or after ``b``."""
        return int(self.admin.offset_comparator(a, b))

    def min(self, a: str, b: str) -> str:
        """The earlier offset."""
        return a if self.compare(a, b) <= 0 else b

    def _delta_log(self, stream: str) -> Any:
        log = self._delta_logs.get(stream)
        if log is None:
            from sparza.systems.delta.log import DeltaLog

            log = DeltaLog(self.admin.location(stream))
            self._delta_logs[stream] = log
        return log

    def _is_delta(self) -> bool:
        return type(self.admin).__name__ == "DeltaSystemAdmin" and hasattr(self.admin, "location")

    def offset_after(self, ssp: SystemStreamPartition, start: str, end: str, n: int) -> str:
        """The offset ``n`` messages after ``start``, or ``end`` when fewer than ``n`` lie in ``[start, end)``."""
        if hasattr(self.admin, "offset_after"):
            return str(self.admin.offset_after(ssp, start, end, n))
        if not self._is_delta():
            return end
        from sparza.systems.delta.offsets import DeltaOffset

        begin, stop = DeltaOffset.parse(start), DeltaOffset.parse(end)
        remaining = n
        log = self._delta_log(ssp.stream)
        for commit in log.commits(begin.version, stop.version):
            rows = commit.rows_by_partition().get(ssp.partition, 0)
            first = begin.index if commit.version == begin.version else 0
            last = stop.index if commit.version == stop.version else rows
            available = max(0, min(rows, last) - first)
            if available >= remaining:
                if first + remaining >= rows:
                    # The batch ends exactly at the end of this version: name it as the start of the
                    # next one, so it equals ``upcoming`` when nothing follows (no empty extra batch).
                    return str(DeltaOffset(commit.version + 1, 0))
                return str(DeltaOffset(commit.version, first + remaining))
            remaining -= available
        return end

    def count_between(self, ssp: SystemStreamPartition, start: str, end: str) -> int | None:
        """How many messages lie in ``[start, end)``; None when the system cannot tell cheaply."""
        if self.compare(start, end) >= 0:
            return 0
        if hasattr(self.admin, "count_between"):
            return int(self.admin.count_between(ssp, start, end))
        if not self._is_delta():
            return None
        from sparza.systems.delta.offsets import DeltaOffset

        begin, stop = DeltaOffset.parse(start), DeltaOffset.parse(end)
        total = 0
        for commit in self._delta_log(ssp.stream).commits(begin.version, stop.version):
            rows = commit.rows_by_partition().get(ssp.partition, 0)
            first = begin.index if commit.version == begin.version else 0
            last = stop.index if commit.version == stop.version else rows
            total += max(0, min(rows, last) - first)
        return total
