"""Day-two operations on a stopped job: rewind its inputs, take and restore savepoints, and the journal of both.

- :mod:`sparza.ops.rewind`: :func:`plan_rewind` / :func:`apply_rewind` (``sparza rewind``);
- :mod:`sparza.ops.savepoints`: :func:`create_savepoint`, :func:`list_savepoints`, :func:`delete_savepoint`,
  :func:`restore_savepoint` (``sparza savepoint create|list|delete``, ``sparza run --from-savepoint``);
- :mod:`sparza.ops.journal`: what was done, by whom, when (``sparza checkpoints show``);
- :mod:`sparza.ops.stopped`: every operation holds the job's claim, so it never races a running processor.

See ``docs/operations.md``, "Day two".
"""

from __future__ import annotations

from sparza.ops.journal import JOURNAL_DOCUMENT, Operation, TaskChange, append_operation, read_journal
from sparza.ops.positions import RewindTarget, parse_time, read_offsets_file, resolve_positions
from sparza.ops.rewind import RewindError, RewindPlan, TaskRewind, apply_rewind, plan_rewind
from sparza.ops.savepoints import (
    Savepoint,
    SavepointError,
    create_savepoint,
    delete_savepoint,
    find_savepoint,
    list_savepoints,
    restore_savepoint,
)
from sparza.ops.stopped import StoppedJob, stopped_job
from sparza.ops.tables import empty_upsert_tables, upsert_tables

__all__ = [
    "JOURNAL_DOCUMENT",
    "Operation",
    "RewindError",
    "RewindPlan",
    "RewindTarget",
    "Savepoint",
    "SavepointError",
    "StoppedJob",
    "TaskChange",
    "TaskRewind",
    "append_operation",
    "apply_rewind",
    "create_savepoint",
    "delete_savepoint",
    "empty_upsert_tables",
    "find_savepoint",
    "list_savepoints",
    "parse_time",
    "plan_rewind",
    "read_journal",
    "read_offsets_file",
    "resolve_positions",
    "restore_savepoint",
    "stopped_job",
    "upsert_tables",
]
