"""The job-model store: one JSON blob with the current and previous job model, barrier and processors.

Unlike Samza's fixed page-blob slots (which silently truncated big models), the state is a
block blob of any size. Every write is conditional on the ETag read just before it, and carries
the writer's leader term: a write is refused (:class:`StaleLeaderError`) when the stored term is
newer, so a deposed leader can never overwrite its successor's model, even if the emulator lets
its lease linger.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

from sparza.coordination._azure import storage_call
from sparza.coordination.errors import StaleLeaderError, StoreConflictError
from sparza.coordination.jobmodel import JobModel

__all__ = ["BarrierState", "CoordinatorState", "JobModelStore", "StoreSnapshot"]

_FORMAT = 1


class BarrierState(StrEnum):
    """Where the barrier of the newest job model stands (an abandoned one is superseded by a newer START)."""

    START = "START"      # published; participants stop their tasks and acknowledge
    END = "END"          # every participant acknowledged: the model is in force


@dataclass(frozen=True)
class CoordinatorState:
    """Everything the leader publishes. ``current`` is the newest model (in force once its barrier ENDs);
    ``previous`` the last model whose barrier ended before it."""

    term: int = 0
    leader: str | None = None
    current: JobModel | None = None
    previous: JobModel | None = None
    barrier: BarrierState = BarrierState.END
    processors: list[str] = field(default_factory=list)

    @property
    def version(self) -> int:
        """The newest published version (0 when nothing was published)."""
        return self.current.version if self.current else 0

    @property
    def effective(self) -> JobModel | None:
        """The model in force: ``current`` once its barrier ended, else ``previous``."""
        return self.current if self.barrier is BarrierState.END else self.previous

    def to_json(self) -> bytes:
        """The blob's content."""
        doc: dict[str, Any] = {
            "format": _FORMAT, "term": self.term, "leader": self.leader, "barrier": self.barrier.value,
            "processors": sorted(self.processors),
            "current": self.current.to_dict() if self.current else None,
            "previous": self.previous.to_dict() if self.previous else None,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CoordinatorState:
        """Parse the blob's content."""
        doc = json.loads(data)
        return cls(term=int(doc["term"]), leader=doc.get("leader"),
                   current=JobModel.from_dict(doc["current"]) if doc.get("current") else None,
                   previous=JobModel.from_dict(doc["previous"]) if doc.get("previous") else None,
                   barrier=BarrierState(doc["barrier"]), processors=list(doc.get("processors", [])))

    def with_changes(self, **changes: Any) -> CoordinatorState:
        """A copy with some fields replaced."""
        return replace(self, **changes)


@dataclass(frozen=True)
class StoreSnapshot:
    """A state as read, with the ETag that a conditional write must match (None: blob absent)."""

    state: CoordinatorState
    etag: str | None


class JobModelStore:
    """Reads and conditionally writes the store blob (a ``BlobClient``)."""

    def __init__(self, blob_client: Any, max_attempts: int = 5) -> None:
        self._blob = blob_client
        self._max_attempts = max_attempts

    @property
    def blob_name(self) -> str:
        """The store blob's name."""
        return str(self._blob.blob_name)

    def read(self) -> StoreSnapshot:
        """The current state and its ETag (an empty state when nothing was published)."""
        with storage_call(f"read {self.blob_name}"):
            try:
                downloader = self._blob.download_blob()
                data = downloader.readall()
                etag = downloader.properties.etag
            except ResourceNotFoundError:
                return StoreSnapshot(CoordinatorState(), None)
        return StoreSnapshot(CoordinatorState.from_json(data), etag)

    def update(self, term: int, change: Callable[[CoordinatorState], CoordinatorState | None],
               leader: str | None = None) -> CoordinatorState | None:
        """Read, apply ``change``, write back conditionally; retried on a concurrent write.

        ``change`` returns the new state, or None to write nothing. Raises :class:`StaleLeaderError`
        when storage records a newer term than ``term``, or the same term held by another ``leader``,
        and :class:`StoreConflictError` after ``max_attempts`` lost races. Returns the state written.
        """
        for _ in range(self._max_attempts):
            snap = self.read()
            stored = snap.state
            if stored.term > term or (leader is not None and stored.term == term
                                      and stored.leader not in (None, leader)):
                raise StaleLeaderError(term, stored.term)
            new = change(stored)
            if new is None:
                return None
            new = new.with_changes(term=term, leader=leader if leader is not None else new.leader)
            try:
                self._write(new, snap.etag)
                return new
            except _Conflict:
                continue
        raise StoreConflictError(self.blob_name, self._max_attempts)

    def _write(self, state: CoordinatorState, etag: str | None) -> None:
        with storage_call(f"write {self.blob_name}"):
            try:
                if etag is None:
                    self._blob.upload_blob(state.to_json(), overwrite=False)
                else:
                    self._blob.upload_blob(state.to_json(), overwrite=True, etag=etag,
                                           match_condition=MatchConditions.IfNotModified)
            except ResourceExistsError as exc:
                raise _Conflict from exc
            except HttpResponseError as exc:
                if exc.status_code in (409, 412):
                    raise _Conflict from exc
                raise


class _Conflict(Exception):
    """The blob changed between our read and our write."""
