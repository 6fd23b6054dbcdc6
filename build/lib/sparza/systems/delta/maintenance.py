"""Maintenance of stream tables: compaction of small files and retention (truncation).

**Why offsets survive compaction.** A row's offset is defined by the commit that *added* it
(``dataChange: true``) and its position among that commit's files. Compaction (delta-rs
``optimize.compact``) commits new files with ``dataChange: false`` and tombstones the small ones;
stream readers ignore such commits and keep reading the original files named by the original
commits, which stay on storage: nothing here vacuums them while their versions are retained.
Compaction therefore speeds up snapshot readers (Spark SQL, ``stream tail``) and never moves an
offset. :func:`truncate` is the only thing that deletes data files, and only those whose rows all
precede the retention horizon.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparza.systems.delta.log import DeltaLog, log_path
from sparza.systems.delta.retention import read_horizon, write_horizon
from sparza.systems.delta.schema import PARTITION_COLUMN, TABLE_SCHEMA
from sparza.systems.delta.settings import StreamLocation
from sparza.systems.delta.storage import open_table

__all__ = ["CompactionResult", "TruncateResult", "compact", "truncate"]


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction did: files merged and written, and the version it committed (None: nothing)."""

    files_removed: int
    files_added: int
    version: int | None


@dataclass(frozen=True, slots=True)
class TruncateResult:
    """What a truncation did: the new horizon, files removed from the table and deleted from storage."""

    horizon: int
    files_removed: int
    files_deleted: int
    commits_deleted: int = 0
    """Commit files (``_delta_log/<v>.json``) deleted: versions before the horizon that a checkpoint covers."""


def compact(location: StreamLocation, *, target_size: int = 128 << 20) -> CompactionResult:
    """Merge small files of every partition into files of up to ``target_size`` bytes (offsets unchanged)."""
    table: Any = open_table(location)
    metrics = table.optimize.compact(target_size=target_size)
    added, removed = int(metrics.get("numFilesAdded", 0)), int(metrics.get("numFilesRemoved", 0))
    if not added and not removed:
        return CompactionResult(0, 0, None)
    table.update_incremental()
    return CompactionResult(removed, added, table.version())


def _source_versions(log: DeltaLog, latest: int, since: int = 0) -> dict[str, int]:
    """For every file added from version ``since`` on (or the oldest commit kept): the newest version whose rows
    it holds (compaction outputs inherit the newest version among the files they replaced; a replaced file
    older than ``since`` counts as new as the compaction, which keeps its output longer, never shorter)."""
    present = log.present_versions()
    newest: dict[str, int] = {}
    for commit in log.commits(max(present[0] if present else 0, since), latest):
        for entry in commit.files:
            newest[entry.path] = commit.version
        for _partition, added, removed in commit.rewritten:
            source = max((newest.get(path, commit.version) for path in removed), default=commit.version)
            for path in added:
                newest[path] = source
    return newest


def truncate(location: StreamLocation, before_version: int) -> TruncateResult:
    """Remove every row added before ``before_version``: offsets before it become "removed".

    Steps: 1. record the horizon (readers reject older offsets from then on); 2. commit the removal
    of live files whose rows are all older; 3. delete from storage the files of older versions that
    no live snapshot references (truncated here or compacted earlier); 4. delete the commit files
    before the horizon that a Delta checkpoint covers (:func:`_delete_commits`).
    """
    from deltalake import Schema
    from deltalake.transaction import CommitProperties, RemoveAction

    log = DeltaLog(location)
    latest = log.latest_version()
    if latest is None:
        raise FileNotFoundError(location.uri)
    horizon = min(before_version, latest + 1)
    previous = read_horizon(log)
    # Step 1. Record the horizon first, so no reader starts inside what is being removed.
    write_horizon(log, horizon)
    horizon = read_horizon(log)
    table: Any = open_table(location)
    live = pa.table(table.get_add_actions(flatten=True))
    live_paths = live.column("path").to_pylist()
    # Files before the previous horizon were removed by the truncation that set it, so the log is read from
    # there on (a truncation runs every minute on intermediate streams; the log keeps 30 days of commits).
    # A live file the shorter scan does not know (a truncation that stopped after step 1) takes the full scan.
    newest = _source_versions(log, latest, since=previous)
    if previous and any(path not in newest for path in live_paths):
        newest = _source_versions(log, latest)
    sizes = live.column("size_bytes").to_pylist()
    now = int(time.time() * 1000)
    removes = []
    for path, size in zip(live_paths, sizes, strict=True):
        if newest.get(path, latest + 1) < horizon:
            partition = path.split("/", 1)[0].partition("=")[2]
            removes.append(RemoveAction(path, True, now, size, {PARTITION_COLUMN: partition}))
    # Step 2. One commit removes them from the table (snapshot readers stop seeing them).
    if removes:
        table.create_write_transaction(removes, "append", Schema.from_arrow(TABLE_SCHEMA),
                                       partition_by=[PARTITION_COLUMN],
                                       commit_properties=CommitProperties(custom_metadata={
                                           "sparza.operation": "truncate", "sparza.horizon": horizon}))
        table.update_incremental()
    # Step 3. Delete old files nothing references any more (never a file holding rows >= horizon).
    still_live = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
    fs = location.filesystem()
    deleted = 0
    for path, version in newest.items():
        if version < horizon and path not in still_live:
            try:
                fs.delete_file(path)
                deleted += 1
            except (FileNotFoundError, OSError):
                pass  # already gone (an earlier truncation or a vacuum)
    return TruncateResult(horizon, len(removes), deleted, _delete_commits(log, horizon))


def _delete_commits(log: DeltaLog, horizon: int) -> int:
    """Step 4. Delete the commit files of versions before both the horizon (no offset of theirs is readable) and
    the newest Delta checkpoint (which holds the table's state, so no Delta reader needs them): the log of a
    stream truncated every minute stays short instead of growing for ``delta.logRetentionDuration``. Older
    checkpoints go too: the newest holds the whole state (an hour of a busy intermediate stream wrote 15). Version 0
    stays: its file names the table's incarnation (:meth:`DeltaLog.identity`)."""
    checkpoint = log.last_checkpoint()
    if checkpoint is None:
        return 0
    fs = log.location.filesystem()
    limit = min(horizon, checkpoint)
    deleted = 0
    for version in log.present_versions():
        if version >= limit:
            break
        if version == 0:
            continue
        try:
            fs.delete_file(log_path(version))
            deleted += 1
        except (FileNotFoundError, OSError):
            pass  # already gone (another truncation, or delta-rs's own log cleanup)
    for version, paths in log.checkpoint_files().items():
        if version < limit:
            for path in paths:
                with contextlib.suppress(FileNotFoundError, OSError):
                    fs.delete_file(path)
    return deleted
