"""Errors of the Azure blob producer. Each carries the data a caller needs to act on it.

Every Azure SDK exception is translated in :mod:`sparza.systems.azureblob.client`, so callers see only
these (and :class:`~sparza.errors.StorageUnavailableError`, whose subclass is raised for connection
failures).
"""

from __future__ import annotations

from sparza.errors import SparzaError, StorageUnavailableError

__all__ = [
    "AzureBlobConnectionError",
    "AzureBlobError",
    "AzureBlobRequestError",
    "BlobOwnedError",
    "FlushTimeoutError",
    "SchemaChangeError",
    "TransactionStateError",
    "UnsupportedMessageError",
    "WriteOnlySystemError",
    "WriterClosedError",
]


class AzureBlobError(SparzaError):
    """Root of the producer's errors. A failed flush raises one; the caller may replay the batch."""


class AzureBlobConnectionError(AzureBlobError, StorageUnavailableError):
    """Azure (or Azurite) could not be reached for ``operation`` on ``blob`` (after the SDK's retries)."""

    def __init__(self, operation: str, blob: str, cause: str) -> None:
        self.operation = operation
        self.blob = blob
        super().__init__(f"{operation} of blob {blob!r} failed: storage unreachable ({cause}); "
                         "check the endpoint and network, then replay the batch")


class AzureBlobRequestError(AzureBlobError):
    """Azure answered ``operation`` on ``blob`` with an error ``status`` / ``error_code``."""

    def __init__(self, operation: str, blob: str, status: int | None, error_code: str | None, cause: str) -> None:
        self.operation = operation
        self.blob = blob
        self.status = status
        self.error_code = error_code
        super().__init__(f"{operation} of blob {blob!r} failed with HTTP {status} {error_code or ''}: {cause}")


class BlobOwnedError(AzureBlobError):
    """A commit found ``blob`` already committed by another writer (another transaction or producer
    instance); it was not overwritten. Names are unique per writer, so this means two writers were given
    the same identity (two jobs with one job name and id, or a hand-made name)."""

    def __init__(self, blob: str, owner: str | None, ours: str) -> None:
        self.blob = blob
        self.owner = owner
        self.ours = ours
        super().__init__(f"blob {blob!r} was already committed by writer {owner or 'unknown (not sparza)'}, not by "
                         f"this one ({ours}); it was left as it is and this flush failed. Two writers share one "
                         "identity: give each job its own job.name/job.id (or sink id), or write to another "
                         "container or stream")


class TransactionStateError(AzureBlobError):
    """``begin`` or ``flush`` named a different transaction than the one the source's unflushed messages
    belong to; nothing was changed."""


class FlushTimeoutError(AzureBlobError, TimeoutError):
    """Pending block uploads (``flushTimeoutMs``) or block-list commits (``closeTimeoutMs``) did not
    finish in time. Nothing of the affected blobs was committed; replay the batch."""

    def __init__(self, phase: str, key: str, timeout_ms: int, pending: int) -> None:
        self.phase = phase
        self.key = key
        self.timeout_ms = timeout_ms
        self.pending = pending
        super().__init__(f"{phase} timed out after {timeout_ms} ms with {pending} operation(s) pending "
                         f"(raise '{key}' if uploads are slow); nothing of those blobs was committed")


class SchemaChangeError(AzureBlobError, ValueError):
    """An Avro record's schema differs from the schema of the blob being written."""

    def __init__(self, stream: str, blob_schema: str, record_schema: str) -> None:
        self.stream = stream
        super().__init__(f"stream {stream!r}: record schema differs from the open blob's schema; "
                         f"flush before changing the schema (blob: {blob_schema[:80]}..., "
                         f"record: {record_schema[:80]}...)")


class UnsupportedMessageError(AzureBlobError, TypeError):
    """A message of a type the configured ``writer.format`` cannot write (the message is not written)."""


class WriterClosedError(AzureBlobError):
    """An operation on a producer that was stopped, or a writer that was closed."""


class WriteOnlySystemError(AzureBlobError, NotImplementedError):
    """azureblob is write-only: it has no consumer and no stream metadata."""

    def __init__(self, system: str, what: str) -> None:
        super().__init__(f"system {system!r} (azureblob) is write-only: it has no {what}; "
                         "read results with 'sparza blobs ls/cat'")

