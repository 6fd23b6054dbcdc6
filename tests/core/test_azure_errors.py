"""The one Azure error boundary (``sparza.azure.errors``): each kind of azure-core exception, and the socket
errors that escape the SDK, becomes the same typed error with the same message at every place that
translates one (blob store, coordination and checkpoint requests, start checks, the CLI's last line).

The expected rows are written out by hand from what each place promises in its docs; the exceptions are
real azure-core exceptions (a status and error code set as the SDK sets them from a response)."""

from __future__ import annotations

from typing import Any

import pytest
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

from sparza.azure import StorageAccount, classify, explain_storage_error, storage_unreachable
from sparza.azure.errors import Failure
from sparza.blobstore.api import BlobNotFoundError, BlobStoreError, RetriableError
from sparza.blobstore.azure import translate_azure_error
from sparza.cli._errors import one_line
from sparza.errors import StorageUnavailableError


def _http(cls: type[HttpResponseError], status: int | None, code: str | None) -> HttpResponseError:
    exc = cls(message=f"the service said {status}")
    exc.status_code = status  # as azure-core sets them from the response
    exc.error_code = code
    return exc


# (exception, kind, from_sdk, blob store error type, blob store message end, transport)
CASES: list[tuple[BaseException, Failure | None, bool, type[Exception], str, bool]] = [
    (ServiceRequestError("connection refused"), Failure.UNREACHABLE, True, RetriableError,
     "ServiceRequestError: connection refused", True),
    (ServiceResponseError("read timed out"), Failure.NO_ANSWER, True, RetriableError,
     "ServiceResponseError: read timed out", True),
    (ConnectionResetError("reset by peer"), Failure.UNREACHABLE, False, RetriableError,
     "ConnectionResetError: reset by peer", True),
    (TimeoutError("socket timeout"), Failure.NO_ANSWER, False, RetriableError, "TimeoutError: socket timeout", True),
    (_http(ResourceNotFoundError, 404, "BlobNotFound"), Failure.NOT_FOUND, True, BlobNotFoundError,
     "blob does not exist", False),
    (_http(ClientAuthenticationError, 403, "AuthenticationFailed"), Failure.CREDENTIALS, True, BlobStoreError,
     "storage refused the credentials (HTTP 403 AuthenticationFailed): check the account key "
     "(azure.storage.connect or AZURE_STORAGE_CONNECTION_STRING)", False),
    (_http(HttpResponseError, 401, None), Failure.CREDENTIALS, True, BlobStoreError,
     "storage refused the credentials (HTTP 401): check the account key "
     "(azure.storage.connect or AZURE_STORAGE_CONNECTION_STRING)", False),
    (_http(HttpResponseError, 503, "ServerBusy"), Failure.BUSY, True, RetriableError, "HTTP 503 ServerBusy", False),
    (_http(HttpResponseError, 429, None), Failure.BUSY, True, RetriableError, "HTTP 429", False),
    (_http(HttpResponseError, 408, None), Failure.BUSY, True, RetriableError, "HTTP 408", False),
    (_http(ResourceExistsError, 409, "ContainerAlreadyExists"), Failure.REJECTED, True, BlobStoreError,
     "HTTP 409 ContainerAlreadyExists", False),
    (AzureError("odd"), Failure.OTHER, True, BlobStoreError, "AzureError: odd", False),
    (PermissionError("disk"), Failure.SOCKET, False, BlobStoreError, "PermissionError: disk", False),
    (ValueError("bug"), None, False, BlobStoreError, "ValueError: bug", False),
    (StorageUnavailableError("already translated"), None, False, BlobStoreError,
     "StorageUnavailableError: already translated", False),
]
IDS = [f"{type(c[0]).__name__}-{getattr(c[0], 'status_code', '')}" for c in CASES]


@pytest.mark.parametrize(("exc", "kind", "from_sdk", "store_type", "store_end", "transport"), CASES, ids=IDS)
def test_one_mapping_drives_every_translation(exc: BaseException, kind: Failure | None, from_sdk: bool,
                                              store_type: type[Exception], store_end: str, transport: bool) -> None:
    failure = classify(exc)
    assert (failure.kind if failure else None) is kind
    if failure is not None:
        assert failure.from_sdk is from_sdk
        assert failure.transport is transport
        assert failure.status == getattr(exc, "status_code", None)

    store = translate_azure_error("get", "b1", exc)
    assert type(store) is store_type
    assert str(store).endswith(store_end), str(store)

    raised: BaseException | None = None
    try:
        with storage_unreachable("task checkpoints at az://c/p"):
            raise exc
    except BaseException as caught:
        raised = caught
    if transport:
        assert type(raised) is StorageUnavailableError
        assert str(raised) == (f"task checkpoints at az://c/p unreachable: {exc}; check the storage endpoint / "
                               "Azurite and retry")
        assert raised.__cause__ is exc
    else:
        assert raised is exc  # anything else passes through untouched


ACCOUNT = StorageAccount.from_keys("acct", "a2V5", "http://127.0.0.1:9/acct")


@pytest.mark.parametrize(("exc", "start_check", "cli"), [
    (ServiceRequestError("connection refused"),
     "cannot connect to storage endpoint http://127.0.0.1:9/acct: check the endpoint in account keys and the "
     "network or start local storage with 'sparza dev-storage start'",
     "cannot connect to storage (ServiceRequestError: connection refused): check the endpoint and that the "
     "service (or Azurite) runs"),
    (ServiceResponseError("no answer"),
     "storage endpoint http://127.0.0.1:9/acct did not answer within 5 s: check that it is the Azure Storage (or "
     "Azurite) endpoint of account keys and that the service is up (azure.storage.timeout.ms sets the wait)",
     "storage failed (ServiceResponseError: no answer)"),
    (_http(ClientAuthenticationError, 403, "AuthenticationFailed"),
     "storage account 'acct' at http://127.0.0.1:9/acct refused the credentials (HTTP 403 AuthenticationFailed): "
     "check the account key in account keys",
     "storage refused the credentials (ClientAuthenticationError: the service said 403): check the account key in "
     "azure.storage.connect, the account.key of the system, or AZURE_STORAGE_CONNECTION_STRING"),
    (_http(HttpResponseError, 500, "InternalError"),
     "storage at http://127.0.0.1:9/acct answered HTTP 500 InternalError (account keys)",
     "storage failed (HttpResponseError: the service said 500)"),
    (ConnectionRefusedError("refused"),
     "cannot connect to storage endpoint http://127.0.0.1:9/acct: check the endpoint in account keys and the "
     "network or start local storage with 'sparza dev-storage start'",
     "ConnectionRefusedError: refused"),
    (ValueError("bug\nsecond line"),
     "storage at http://127.0.0.1:9/acct failed: ValueError: bug",
     "ValueError: bug"),
])
def test_operators_read_what_to_check(exc: BaseException, start_check: str, cli: str) -> None:
    assert explain_storage_error(exc, ACCOUNT, 5) == start_check
    assert one_line(exc) == cli


def test_error_codes_compare_as_their_value() -> None:
    from azure.storage.blob._generated.models import StorageErrorCode

    from sparza.azure import error_code

    exc: Any = _http(HttpResponseError, 409, None)
    exc.error_code = StorageErrorCode("LeaseAlreadyPresent")
    assert error_code(exc) == "LeaseAlreadyPresent"
    assert error_code(ValueError("x")) == ""
