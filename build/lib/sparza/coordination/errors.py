"""Errors of the coordination package, each carrying the data an operator or caller needs."""

from __future__ import annotations

from sparza.errors import SparzaError

__all__ = [
    "CoordinationError",
    "FencedError",
    "LeaseHeldError",
    "LeaseLostError",
    "LockTimeoutError",
    "StaleLeaderError",
    "StoreConflictError",
]


class CoordinationError(SparzaError):
    """Root of the errors raised by :mod:`sparza.coordination`."""


class LeaseHeldError(CoordinationError):
    """A lease could not be acquired because another holder has it (Azure: 409 LeaseAlreadyPresent)."""

    def __init__(self, blob: str) -> None:
        self.blob = blob
        super().__init__(f"the lease on blob {blob!r} is held by another processor")


class LeaseLostError(CoordinationError):
    """A lease we held is gone: it expired before we renewed it, was broken, or another holder took it.

    Raised even where the emulator would accept a late renewal (Azurite #2352): the lease manager
    times its own renewals and refuses to trust a renewal sent after the lease could have expired.
    """

    def __init__(self, blob: str, reason: str) -> None:
        self.blob = blob
        self.reason = reason
        super().__init__(f"lost the lease on blob {blob!r}: {reason}")


class LockTimeoutError(CoordinationError):
    """:meth:`AzureLock.lock` did not get the lock within its timeout."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        super().__init__(f"lock {name!r} not acquired within {timeout_s:g}s (held by another processor)")


class StaleLeaderError(CoordinationError):
    """A leader's write was refused because a newer leader term is recorded in storage."""

    def __init__(self, term: int, stored_term: int) -> None:
        self.term = term
        self.stored_term = stored_term
        super().__init__(f"leader term {term} is stale: storage already records term {stored_term}")


class StoreConflictError(CoordinationError):
    """A conditional (ETag) write of the job-model store lost a race with another writer too many times."""

    def __init__(self, blob: str, attempts: int) -> None:
        self.blob = blob
        self.attempts = attempts
        super().__init__(f"conditional write of {blob!r} conflicted {attempts} times in a row")


class FencedError(CoordinationError):
    """A processor of an older generation tried to act on a task that a newer job model moved away.

    ``generation`` is the job-model version the caller works under; ``current_generation`` the newer
    one found in storage. The caller must stop the task and wait for its next job model.
    """

    def __init__(self, task: str, processor_id: str, generation: int, current_generation: int, reason: str) -> None:
        self.task = task
        self.processor_id = processor_id
        self.generation = generation
        self.current_generation = current_generation
        self.reason = reason
        super().__init__(f"processor {processor_id!r} (generation {generation}) is fenced off task {task!r}: "
                         f"{reason} (current generation {current_generation})")
