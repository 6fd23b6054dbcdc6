"""The one boundary where Azure SDK exceptions (azure-core, azure-storage-blob, azure-data-tables) become
sparza's: :func:`classify` is the one mapping from an exception to what went wrong (:class:`Failure`).

Each package turns a failure into its own typed error: the blob store into ``BlobNotFoundError`` /
``RetriableError`` / ``BlobStoreError``, the Azure Blob producer into ``AzureBlobConnectionError`` /
``AzureBlobRequestError``, coordination, job claims and task checkpoints into
:class:`~sparza.errors.StorageUnavailableError` (:func:`storage_unavailable`, :func:`storage_unreachable`);
start checks and the CLI word it for an operator (:func:`explain_storage_error`). Service errors a caller
expects (a lease already held, a changed ETag) keep their azure-core type; match them by
:func:`error_code`, not by message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sparza.azure.account import TIMEOUT_KEY, StorageAccount
from sparza.errors import SparzaError, StorageUnavailableError

__all__ = [
    "Failure",
    "StorageFailure",
    "classify",
    "error_code",
    "explain_storage_error",
    "storage_unavailable",
    "storage_unreachable",
]


class Failure(Enum):
    """What went wrong talking to Azure Storage."""

    NOT_FOUND = "not found"
    """The service answered 404 (``ResourceNotFoundError``)."""
    CREDENTIALS = "credentials refused"
    """The service refused the credentials (``ClientAuthenticationError``, HTTP 401 or 403)."""
    UNREACHABLE = "unreachable"
    """The request could not be sent (``ServiceRequestError``; a ``ConnectionError`` under the SDK)."""
    NO_ANSWER = "no answer"
    """The request was sent but no answer came (``ServiceResponseError``; a ``TimeoutError`` under the SDK)."""
    BUSY = "busy"
    """The service answered HTTP 408, 429 or 5xx: worth retrying."""
    REJECTED = "rejected"
    """The service answered with another HTTP error."""
    SOCKET = "socket"
    """Another ``OSError`` raised under the SDK (a socket error it did not wrap)."""
    OTHER = "other"
    """Any other Azure SDK error."""


_TRANSPORT = (Failure.UNREACHABLE, Failure.NO_ANSWER)
_ANSWERED = (Failure.NOT_FOUND, Failure.CREDENTIALS, Failure.BUSY, Failure.REJECTED)


@dataclass(frozen=True, slots=True)
class StorageFailure:
    """What :func:`classify` found: the kind, the HTTP status and the service's error code when the service
    answered (``code`` as the SDK gives it: a ``StorageErrorCode`` or a string), and whether the exception
    came from the Azure SDK itself (``from_sdk``) rather than from the socket under it."""

    kind: Failure
    status: int | None = None
    code: Any = None
    from_sdk: bool = True

    @property
    def transport(self) -> bool:
        """True when storage could not be reached or did not answer (the request may be retried)."""
        return self.kind in _TRANSPORT

    @property
    def answered(self) -> bool:
        """True when the service answered with an HTTP error (an ``HttpResponseError``)."""
        return self.from_sdk and self.kind in _ANSWERED


def classify(exc: BaseException) -> StorageFailure | None:
    """What ``exc`` says about storage, or None when it is not a storage failure (sparza's own errors
    included: they are translated already)."""
    from azure.core.exceptions import (
        AzureError,
        ClientAuthenticationError,
        HttpResponseError,
        ResourceNotFoundError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(exc, SparzaError):
        return None
    if not isinstance(exc, AzureError):
        if isinstance(exc, ConnectionError):
            return StorageFailure(Failure.UNREACHABLE, from_sdk=False)
        if isinstance(exc, TimeoutError):
            return StorageFailure(Failure.NO_ANSWER, from_sdk=False)
        if isinstance(exc, OSError):
            return StorageFailure(Failure.SOCKET, from_sdk=False)
        return None
    status = getattr(exc, "status_code", None)
    code = getattr(exc, "error_code", None)
    if isinstance(exc, ResourceNotFoundError):
        kind = Failure.NOT_FOUND
    elif isinstance(exc, ClientAuthenticationError) or status in (401, 403):
        kind = Failure.CREDENTIALS
    elif isinstance(exc, ServiceRequestError):
        kind = Failure.UNREACHABLE
    elif isinstance(exc, ServiceResponseError):
        kind = Failure.NO_ANSWER
    elif isinstance(exc, HttpResponseError):
        kind = Failure.BUSY if status in (408, 429) or (status or 0) >= 500 else Failure.REJECTED
    else:
        kind = Failure.OTHER
    return StorageFailure(kind, status, code)


def error_code(exc: BaseException) -> str:
    """The storage error code of an azure-core exception (``LeaseAlreadyPresent``), or ``""``."""
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


@contextmanager
def storage_unavailable(message: Callable[[BaseException], str]) -> Iterator[None]:
    """Run storage requests; a transport failure (:attr:`StorageFailure.transport`) becomes
    :class:`~sparza.errors.StorageUnavailableError` with ``message(exc)``."""
    try:
        yield
    except Exception as exc:
        failure = classify(exc)
        if failure is not None and failure.transport:
            raise StorageUnavailableError(message(exc)) from exc
        raise


def storage_unreachable(subject: str) -> AbstractContextManager[None]:
    """:func:`storage_unavailable` saying ``<subject> unreachable: <cause>; check the storage endpoint /
    Azurite and retry``."""
    return storage_unavailable(lambda exc: f"{subject} unreachable: {exc}; check the storage endpoint / "
                                           "Azurite and retry")


def explain_storage_error(exc: BaseException, account: StorageAccount, timeout_s: float | None = None) -> str:
    """One line saying what went wrong talking to ``account`` and what to check (never the key)."""
    failure = classify(exc)
    kind = failure.kind if failure is not None else None
    endpoint = account.blob_endpoint
    if failure is not None and kind is Failure.CREDENTIALS:
        return (f"storage account '{account.account_name}' at {endpoint} refused the credentials (HTTP "
                f"{failure.status} {failure.code or ''}".rstrip() + f"): check the account key in {account.source}")
    text = f"{type(exc).__name__}: {exc}"
    waited = f" within {timeout_s:g} s" if timeout_s is not None else ""
    if kind is Failure.NO_ANSWER or "timed out" in text.lower():
        return (f"storage endpoint {endpoint} did not answer{waited}: check that it is the Azure Storage (or "
                f"Azurite) endpoint of {account.source} and that the service is up ({TIMEOUT_KEY} sets the wait)")
    if kind is Failure.UNREACHABLE:
        hint = " or start local storage with 'sparza dev-storage start'" if account.is_emulator else ""
        return (f"cannot connect to storage endpoint {endpoint}: check the endpoint in {account.source} and "
                f"the network{hint}")
    if failure is not None and failure.answered:
        answer = f"HTTP {failure.status} {failure.code or ''}".rstrip()
        return f"storage at {endpoint} answered {answer} ({account.source})"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"storage at {endpoint} failed: {type(exc).__name__}: {first}"
