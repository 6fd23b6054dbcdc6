"""Helpers of the azureblob tests: configs pointing at an Azurite, and readers of committed blobs that use
only plain ``gzip`` + ``fastavro`` (so the tests check what any Azure user would read)."""

from __future__ import annotations

import gzip
import io
import json
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
