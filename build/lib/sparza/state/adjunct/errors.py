"""Errors of adjunct data stores: each carries the store it is about and says what to do next."""

from __future__ import annotations

from sparza.errors import SparzaError
from sparza.state.kv.api import StoreReadOnlyError

__all__ = [
    "AdjunctError",
    "AdjunctStoreReadOnlyError",
    "BroadcastSnapshotError",
    "UnknownAdjunctStoreError",
]


class AdjunctError(SparzaError):
    """An adjunct data store could not be configured, restored, filled or published."""

    def __init__(self, store: str, message: str) -> None:
        self.store = store
        super().__init__(f"adjunct store {store!r}: {message}")


class AdjunctStoreReadOnlyError(StoreReadOnlyError, AdjunctError):
    """A task tried to write an adjunct store. Adjunct stores are filled only from their input stream.

    Catchable both as :class:`~sparza.state.kv.StoreReadOnlyError` and as :class:`AdjunctError`.
    """

    def __init__(self, store: str, operation: str, stream: str) -> None:
        self.operation = operation
        self.stream = stream
        SparzaError.__init__(
            self,
            f"adjunct store {store!r} is read-only: {operation}() is not allowed. It is filled from "
            f"stream {stream}; write to that stream instead (or use a regular store for task state).")
        self.store = store


class UnknownAdjunctStoreError(AdjunctError, KeyError):
    """``get_store(name)`` named no adjunct store of this task."""

    def __init__(self, store: str, known: list[str]) -> None:
        super().__init__(store, "is not an adjunct store of this job; adjunct stores: "
                         + (", ".join(sorted(known)) or "none") + " (bind one with stores.<store>.adstore.input)")

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return str(self.args[0])


class BroadcastSnapshotError(AdjunctError):
    """A broadcast store's published snapshot could not be found, downloaded or opened."""
