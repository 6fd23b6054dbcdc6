"""Helpers of the azureblob tests: configs pointing at an Azurite, and readers of committed blobs that use
only plain ``gzip`` + ``fastavro`` (so the tests check what any Azure user would read)."""

from __future__ import annotations

import gzip
import io
import json
import threading
from typing import Any

import fastavro

from sparza.azure import StorageAccount

SCHEMA = {"type": "record", "name": "Event", "namespace": "test",
          "fields": [{"name": "id", "type": "long"}, {"name": "body", "type": "string"}]}


def account_config(account: StorageAccount, container: str, **extra: Any) -> dict[str, Any]:
    """Config for ``container`` on ``account`` plus ``systems.<container>.azureblob.<k>: v`` extras."""
    prefix = f"systems.{container}.azureblob."
    cfg: dict[str, Any] = {prefix + "account.name": account.account_name,
                           prefix + "account.key": account.account_key,
                           prefix + "endpoint": account.blob_endpoint}
    for key, value in extra.items():
        cfg[key if key.startswith(("systems.", "azure.")) else prefix + key] = value
    return cfg


def list_blobs(account: StorageAccount, container: str) -> list[Any]:
    """The committed blobs of a container (with metadata), sorted by name."""
    client = account.blob_service_client().get_container_client(container)
    return sorted(client.list_blobs(include=["metadata"]), key=lambda b: b.name)


def download(account: StorageAccount, container: str, name: str) -> bytes:
    """A committed blob's bytes."""
    return account.blob_service_client().get_blob_client(container, name).download_blob().readall()


def read_avro(data: bytes, gzipped: bool = False) -> list[Any]:
    """Records of an Avro container file, through Python's gzip for gzip blobs."""
    raw = gzip.decompress(data) if gzipped else data
    return list(fastavro.reader(io.BytesIO(raw)))


def read_jsonl(data: bytes, gzipped: bool = False) -> list[Any]:
    """Documents of a JSON-lines blob."""
    raw = gzip.decompress(data) if gzipped else data
    return [json.loads(line) for line in raw.splitlines() if line]


class FaultInjector:
    """Wraps a real ``BlobServiceClient``: every call still goes to the real service, after an optional
    hook per operation (``stage_block``, ``commit_block_list``, ``upload_blob``) that may sleep, block or raise."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.hooks: dict[str, Any] = {}
        self.calls: dict[str, int] = {}
        self.returned: dict[str, int] = {}  # operation -> calls that returned (succeeded or raised)
        self._returned = threading.Condition()

    def before(self, operation: str, blob: str) -> None:
        self.calls[operation] = self.calls.get(operation, 0) + 1
        hook = self.hooks.get(operation)
        if hook is not None:
            hook(blob, self.calls[operation])

    def after(self, operation: str) -> None:
        with self._returned:
            self.returned[operation] = self.returned.get(operation, 0) + 1
            self._returned.notify_all()

    def wait_returned(self, operations: tuple[str, ...], count: int, timeout_s: float = 60.0) -> None:
        """Wait until ``count`` calls of ``operations`` (together) have returned."""
        with self._returned:
            if not self._returned.wait_for(lambda: sum(self.returned.get(o, 0) for o in operations) >= count,
                                           timeout_s):
                raise AssertionError(f"{count} calls of {operations} did not return within {timeout_s} s")

    def get_container_client(self, name: str) -> Any:
        return _FaultyContainer(self, self.real.get_container_client(name))


class _FaultyContainer:
    def __init__(self, injector: FaultInjector, real: Any) -> None:
        self._injector = injector
        self._real = real

    def create_container(self, **kwargs: Any) -> Any:
        return self._real.create_container(**kwargs)

    def get_blob_client(self, name: str) -> Any:
        return _FaultyBlob(self._injector, self._real.get_blob_client(name), name)


class _FaultyBlob:
    def __init__(self, injector: FaultInjector, real: Any, name: str) -> None:
        self._injector = injector
        self._real = real
        self._name = name

    def stage_block(self, *args: Any, **kwargs: Any) -> Any:
        self._injector.before("stage_block", self._name)
        return self._real.stage_block(*args, **kwargs)

    def commit_block_list(self, *args: Any, **kwargs: Any) -> Any:
        self._injector.before("commit_block_list", self._name)
        try:
            return self._real.commit_block_list(*args, **kwargs)
        finally:
            self._injector.after("commit_block_list")

    def upload_blob(self, *args: Any, **kwargs: Any) -> Any:
        self._injector.before("upload_blob", self._name)
        try:
            return self._real.upload_blob(*args, **kwargs)
        finally:
            self._injector.after("upload_blob")

    def get_blob_properties(self, *args: Any, **kwargs: Any) -> Any:
        return self._real.get_blob_properties(*args, **kwargs)
