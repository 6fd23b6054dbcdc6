"""Retention: which versions of a stream are still readable, and the oldest offset of a partition.

Two things end a commit's readability: Delta's own log cleanup (the commit JSON is deleted after
``delta.logRetentionDuration``) and :func:`sparza.systems.delta.maintenance.truncate`, which
records a *horizon* version in ``_sparza/retention.json`` before it removes older files. Offsets
before the larger of the two are "removed"; reading them raises ``OffsetRemovedError``.
"""

from __future__ import annotations

import json

from sparza.systems.delta.log import DeltaLog
from sparza.systems.delta.offsets import DeltaOffset
from sparza.systems.delta.storage import storage_errors

__all__ = ["HORIZON_PATH", "first_readable_version", "oldest_offset", "read_horizon", "write_horizon"]

HORIZON_PATH = "_sparza/retention.json"
"""Relative to the table root; Delta ignores paths starting with ``_`` (vacuum keeps it)."""


def read_horizon(log: DeltaLog) -> int:
    """The first version retention keeps (0 when nothing was truncated)."""
    fs = log.location.filesystem()
    try:
        with storage_errors(log.location.uri), fs.open_input_stream(HORIZON_PATH) as stream:
            return int(json.loads(stream.read())["oldest_version"])
    except FileNotFoundError:
        return 0
    except OSError as exc:
        if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
            return 0
        raise


def write_horizon(log: DeltaLog, version: int) -> None:
    """Record that versions before ``version`` are removed (only ever moves forward)."""
    if version <= read_horizon(log):
        return
    log.location.write_bytes(HORIZON_PATH, json.dumps({"oldest_version": version}).encode())


def oldest_offset(log: DeltaLog, partition: int, latest: int | None = None) -> DeltaOffset | None:
    """The offset of the oldest readable row of ``partition`` (None when it has none)."""
    present = log.present_versions()
    if not present:
        return None
    horizon = read_horizon(log)
    for version in present:
        if version < horizon or (latest is not None and version > latest):
            continue
        commit = log.commit(version)
        if commit is not None and commit.files_for(partition):
            return DeltaOffset(version, 0)
    return None


def first_readable_version(log: DeltaLog) -> int:
    """The first version whose rows can still be read (0 for a table nothing was removed from)."""
    present = log.present_versions()
    return max(present[0] if present else 0, read_horizon(log))
