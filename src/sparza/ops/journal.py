"""The operations journal: every rewind and savepoint restore of a job, written next to its task checkpoints.

An operator who finds a job reading from an unexpected offset must be able to see who moved it, when, and from
where to where. Each operation appends one :class:`Operation` to the job's ``_operations`` document (a job-wide
document of the checkpoint store, :class:`~sparza.engine.checkpoint.SupportsJobDocuments`), and
``sparza checkpoints show`` prints the newest ones under the task table (``--history`` prints them all).
The journal keeps the newest :data:`JOURNAL_LIMIT` operations.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from sparza.engine.checkpoint import CheckpointStore, SupportsJobDocuments
from sparza.errors import SparzaError

__all__ = ["JOURNAL_DOCUMENT", "JOURNAL_LIMIT", "Operation", "TaskChange", "append_operation", "operator_name",
           "read_journal"]

JOURNAL_DOCUMENT = "_operations"
"""The journal's name among the job's task checkpoints (not ``*.json``: not a task)."""
JOURNAL_LIMIT = 500
"""Operations kept; older ones are dropped when a new one is written."""


@dataclass(frozen=True)
class TaskChange:
    """What one operation did to one task: its offsets and store snapshots before and after, the state choice
    (``keep``, ``reset`` or ``savepoint:<name>``) and the batch its checkpoint holds afterwards."""

    offsets_from: dict[str, str]
    offsets_to: dict[str, str]
    stores_from: dict[str, str] = field(default_factory=dict)
    stores_to: dict[str, str] = field(default_factory=dict)
    state: str = "keep"
    batch: int = 0


@dataclass(frozen=True)
class Operation:
    """One journal entry: ``kind`` (``rewind``, ``savepoint-restore``), who (``by``: user@host), when
    (``at_ms``), what was asked (``target``, e.g. ``time 2026-05-01T09:00:00Z``), the per-task changes, and
    anything else it did (``notes``: upsert tables emptied, snapshots dropped)."""

    kind: str
    target: str
    tasks: dict[str, TaskChange]
    by: str = ""
    at_ms: int = 0
    id: str = ""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Operation:
        """Inverse of :meth:`to_json` (unknown fields ignored)."""
        tasks = {str(t): TaskChange(**{k: v for k, v in c.items() if k in TaskChange.__dataclass_fields__})
                 for t, c in (body.get("tasks") or {}).items()}
        return cls(kind=str(body["kind"]), target=str(body.get("target", "")), tasks=tasks,
                   by=str(body.get("by", "")), at_ms=int(body.get("at_ms", 0)), id=str(body.get("id", "")),
                   notes=[str(n) for n in body.get("notes") or []])


def operator_name() -> str:
    """``user@host`` of whoever runs this process (what the journal records as ``by``)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _documents(store: CheckpointStore) -> SupportsJobDocuments:
    if not isinstance(store, SupportsJobDocuments):
        raise SparzaError(f"the checkpoint store {store.describe()} cannot keep an operations journal")
    return store


def read_journal(store: CheckpointStore) -> list[Operation]:
    """Every operation recorded for the job of ``store``, oldest first (empty when there is none)."""
    data = _documents(store).read_document(JOURNAL_DOCUMENT)
    if data is None:
        return []
    try:
        return [Operation.from_json(body) for body in json.loads(data)["operations"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise SparzaError(f"the operations journal at {store.describe()}/{JOURNAL_DOCUMENT} is unreadable "
                          f"({exc}); move it aside to record new operations") from exc


def append_operation(store: CheckpointStore, operation: Operation) -> Operation:
    """Record ``operation`` (stamping ``by``, ``at_ms`` and ``id`` when empty); returns what was stored.

    Operations run with the job stopped and its claim held (:func:`sparza.ops.stopped.stopped_job`), so no
    other writer appends meanwhile.
    """
    stamped = Operation(kind=operation.kind, target=operation.target, tasks=operation.tasks,
                        by=operation.by or operator_name(), at_ms=operation.at_ms or int(time.time() * 1000),
                        id=operation.id or uuid.uuid4().hex[:12], notes=list(operation.notes))
    entries = [op.to_json() for op in read_journal(store)] + [stamped.to_json()]
    body = {"operations": entries[-JOURNAL_LIMIT:]}
    _documents(store).write_document(JOURNAL_DOCUMENT, json.dumps(body, sort_keys=True).encode("utf-8"))
    return stamped
