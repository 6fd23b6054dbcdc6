"""The one boundary where storage failures from delta-rs and pyarrow become sparza errors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from sparza.errors import StorageUnavailableError
from sparza.systems.delta.errors import StreamNotFoundError
from sparza.systems.delta.settings import ACCOUNT_KEYS, StreamLocation

__all__ = ["ensure_container", "open_table", "storage_errors"]

_UNREACHABLE = ("error sending request", "connection refused", "tcp connect error", "timed out",
                "dns error", "connection reset")


@contextmanager
def storage_errors(uri: str) -> Iterator[None]:
    """Turn "cannot reach the storage service" ``OSError``s into :class:`StorageUnavailableError`.

    delta-rs has already retried (object_store's retry policy) when such an error reaches us.
    Not-found errors pass through unchanged: callers give them their own meaning.
    """
    try:
        yield
    except FileNotFoundError:
        raise
    except OSError as exc:
        text = str(exc)
        if any(marker in text.lower() for marker in _UNREACHABLE):
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            raise StorageUnavailableError(
                f"storage for {uri} is unreachable after retries ({first}); check the account endpoint, "
                "the network, or that dev storage runs ('sparza dev-storage status')") from exc
        raise


def ensure_container(config: Mapping[str, str], system: str, uri: str) -> None:
    """Create the blob container of an ``az://container/...`` URI if it does not exist yet."""
    from azure.core.exceptions import ResourceExistsError, ServiceRequestError

    from sparza.azure import resolve_storage_account

    container = uri.split("://", 1)[1].split("/", 1)[0]
    account = resolve_storage_account(config, ACCOUNT_KEYS, names={"system": system})
    try:
        account.blob_service_client(retry_total=2).create_container(container)
    except ResourceExistsError:
        pass
    except ServiceRequestError as exc:
        raise StorageUnavailableError(f"cannot reach {account.blob_endpoint} to create container {container!r}: "
                                      f"{exc}") from exc


def open_table(location: StreamLocation) -> object:
    """The ``deltalake.DeltaTable`` at ``location``; raises :class:`StreamNotFoundError` if there is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        with storage_errors(location.uri):
            return DeltaTable(location.uri, storage_options=location.storage_options)
    except TableNotFoundError as exc:
        raise StreamNotFoundError(location.stream, location.uri) from exc
