"""The one boundary where Azure SDK exceptions become sparza errors for this package.

Transport failures (connection refused, timeouts) become :class:`StorageUnavailableError`; service
errors keep their azure-core type but callers match them through :func:`error_code` instead of
parsing messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from azure.core.exceptions import ServiceRequestError, ServiceResponseError

from sparza.azure import StorageAccount
from sparza.errors import StorageUnavailableError

__all__ = ["blob_service", "error_code", "storage_call", "table_service"]


def error_code(exc: BaseException) -> str:
    """The storage error code of an azure-core exception (``LeaseAlreadyPresent``), or ``""``."""
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


@contextmanager
def storage_call(what: str) -> Iterator[None]:
    """Run one storage request; a transport failure becomes :class:`StorageUnavailableError` naming ``what``."""
    try:
        yield
    except (ServiceRequestError, ServiceResponseError, ConnectionError) as exc:
        raise StorageUnavailableError(f"storage unreachable during {what}: {type(exc).__name__}: {exc}") from exc


def blob_service(account: StorageAccount, timeout_ms: int) -> Any:
    """A blob client tuned for coordination: one quick retry and short timeouts.

    Coordination must notice an outage within a lease period, so the default 60 s read timeout and
    long retry backoff of data clients are too slow here.
    """
    timeout_s = max(1, timeout_ms // 1000)
    return account.blob_service_client(retry_total=1, timeout_s=timeout_s, read_timeout=timeout_s)


def table_service(account: StorageAccount, timeout_ms: int) -> Any:
    """A table client with the same short timeouts as :func:`blob_service`."""
    timeout_s = max(1, timeout_ms // 1000)
    return account.table_service_client(retry_total=1, timeout_s=timeout_s, read_timeout=timeout_s)
