"""Azure-specific behaviour: parallel blocks, error translation, an outage and a restart of the
storage service (an Azurite of this test's own, so the shared one is not disturbed)."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError, ServiceRequestError

from sparza.blobstore import (
    BlobNotFoundError,
    BlobStoreError,
    Metadata,
    RetriableError,
    RetryingBlobStoreManager,
    RetryPolicy,
)
from sparza.blobstore.azure import EXPIRES_TAG, AzureBlobStoreManager, translate_azure_error
from sparza.devservers.storage import AzuriteProcess


def test_big_blobs_go_up_as_several_blocks_with_a_ttl_tag(azurite: AzuriteProcess, unique_name: str) -> None:
    store = AzureBlobStoreManager(unique_name, {"azure.storage.connect": azurite.connection_string},
                                  max_concurrency=3, block_size=64 << 10)
    try:
        payload = bytes(range(256)) * 1024  # 256 KiB -> 4 blocks of 64 KiB
        blob_id = store.put(io.BytesIO(payload), Metadata("big.sst", len(payload), "j", "1", "Partition 0", "s"))
        blob = store._client.get_blob_client(blob_id)
        committed, _ = blob.get_block_list("committed")
        assert len(committed) == 4
        assert EXPIRES_TAG in blob.get_blob_tags()
        assert blob.get_blob_properties().metadata["task_name"] == "Partition%200"  # quoted, ASCII only
        out = io.BytesIO(b"prefix:")
        out.seek(0, io.SEEK_END)
        store.get(blob_id, out, Metadata("big.sst"))
        assert out.getvalue() == b"prefix:" + payload and out.tell() == len(payload) + 7
    finally:
        store.close()


class _Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.reason = "reason"
        self.headers: dict[str, str] = {}

    def text(self) -> str:
        return ""


@pytest.mark.parametrize(("exc", "expected"), [
    (ResourceNotFoundError("gone"), BlobNotFoundError),
    (ServiceRequestError("connection refused"), RetriableError),
    (ConnectionResetError("reset"), RetriableError),
    (HttpResponseError(response=_Response(503)), RetriableError),
    (HttpResponseError(response=_Response(429)), RetriableError),
    (HttpResponseError(response=_Response(403)), BlobStoreError),
])
def test_azure_errors_are_translated_at_one_point(exc: BaseException, expected: type) -> None:
    err = translate_azure_error("get", "a/b", exc)
    assert type(err) is expected
    assert err.operation == "get" and err.blob_id == "a/b"


def test_outage_is_retriable_and_a_restart_loses_nothing(tmp_path: Path) -> None:
    proc = AzuriteProcess(tmp_path / "azurite")
    proc.start()
    try:
        config = {"azure.storage.connect": proc.connection_string, "blob.store.azure.sdk.retries": "0",
                  "blob.store.azure.timeout.seconds": "2"}
        store = AzureBlobStoreManager("outage", config)
        blob_id = store.put(io.BytesIO(b"kept across restarts"), Metadata("f"))
        proc.stop()
        with pytest.raises(RetriableError):
            store.get(blob_id, io.BytesIO(), Metadata("f"))
        # With the retry policy, a get issued during the outage succeeds once storage is back.
        retrying = RetryingBlobStoreManager(store, RetryPolicy(delay_ms=200, factor=1.5, max_duration_ms=60_000))
        out = io.BytesIO()
        restarter = threading.Timer(1.0, proc.start)
        restarter.start()
        try:
            retrying.get(blob_id, out, Metadata("f"))
        finally:
            restarter.join()
        assert out.getvalue() == b"kept across restarts"
        store.close()
    finally:
        proc.stop()
