"""Read-side helpers for tools: the last N rows of a partition, and per-partition row counts."""

from __future__ import annotations

from sparza.systems.delta.log import DeltaLog
from sparza.systems.delta.offsets import DeltaOffset
from sparza.systems.delta.retention import read_horizon

__all__ = ["live_rows_by_partition", "start_of_last"]


def start_of_last(log: DeltaLog, partition: int, count: int) -> DeltaOffset:
    """The offset from which ``partition`` has ``count`` rows left (or its oldest readable offset).

    Walks the log backwards from the newest commit, so it reads only the commits it needs.
    """
    latest = log.latest_version()
    if latest is None:
        return DeltaOffset(0, 0)
    floor = read_horizon(log)
    needed = count
    version = latest
    start = DeltaOffset(latest + 1, 0)
    while version >= floor and needed > 0:
        commit = log.commit(version)
        if commit is None:
            break
        rows = sum(f.rows for f in commit.files_for(partition))
        if rows:
            take = min(rows, needed)
            start = DeltaOffset(version, rows - take)
            needed -= take
        version -= 1
    return start


def live_rows_by_partition(table: object) -> dict[int, int]:
    """Rows per partition in the table's current snapshot (what snapshot readers see)."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))  # type: ignore[attr-defined]
    parts = actions.column("partition.partition").to_pylist() if "partition.partition" in actions.column_names \
        else [int(p.split("/", 1)[0].partition("=")[2]) for p in actions.column("path").to_pylist()]
    counts: dict[int, int] = {}
    for part, rows in zip(parts, actions.column("num_records").to_pylist(), strict=True):
        counts[int(part)] = counts.get(int(part), 0) + int(rows or 0)
    return counts
