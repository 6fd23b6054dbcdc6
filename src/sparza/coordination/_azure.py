"""Azure clients tuned for coordination, and its requests' errors.

Transport failures (connection refused, timeouts) become :class:`StorageUnavailableError`
(:func:`storage_call`, through :mod:`sparza.azure.errors`); service errors keep their azure-core type
and callers match them with :func:`sparza.azure.error_code` instead of parsing messages.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from azure.core.exceptions import ResourceExistsError

from sparza.azure import StorageAccount, StorageRequests, storage_unavailable

__all__ = ["blob_service", "create_if_missing", "storage_call", "table_service"]


def storage_call(what: str) -> AbstractContextManager[None]:
    """Run one storage request; a transport failure becomes :class:`StorageUnavailableError` naming ``what``."""
    return storage_unavailable(lambda exc: f"storage unreachable during {what}: {type(exc).__name__}: {exc}")


def create_if_missing(what: str, create: Callable[[], object]) -> None:
    """``create()`` a container or table (``what`` names it in errors); one that exists already is fine."""
    with storage_call(f"create {what}"):
        try:
            create()
        except ResourceExistsError:
            pass


def blob_service(account: StorageAccount, timeout_ms: int, requests: StorageRequests | None = None) -> Any:
    """A blob client tuned for coordination: one quick retry and short timeouts (``requests`` counts its requests).

    Coordination must notice an outage within a lease period, so the default 60 s read timeout and
    long retry backoff of data clients are too slow here.
    """
    timeout_s = max(1, timeout_ms // 1000)
    return account.blob_service_client(retry_total=1, timeout_s=timeout_s, read_timeout=timeout_s, requests=requests)


def table_service(account: StorageAccount, timeout_ms: int, requests: StorageRequests | None = None) -> Any:
    """A table client with the same short timeouts as :func:`blob_service`."""
    timeout_s = max(1, timeout_ms // 1000)
    return account.table_service_client(retry_total=1, timeout_s=timeout_s, read_timeout=timeout_s,
                                        requests=requests)
