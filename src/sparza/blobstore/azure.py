"""Azure Blob Storage as the snapshot blob store (also Azurite).

TTL is a blob index tag, ``sparza-expires-ms`` (epoch ms, zero-padded so tag queries order
correctly); ``remove_ttl`` drops it. A delete is a tombstone: the metadata ``sparzadeletedms``
(read back on ``get`` and listed for gc; one Set Blob Metadata request, older tombstones also
carry the tag ``sparza-deleted-ms``); ``sparza gc`` purges expired blobs and old
tombstones. Native blob expiry exists only on HNS accounts and lifecycle rules run at most daily
(and Azurite has neither), so sparza does not rely on them.

Azure errors are classified by :mod:`sparza.azure.errors` and become this package's here, once:
not-found → :class:`BlobNotFoundError`; timeouts, connection errors, 408/429/5xx →
:class:`RetriableError`; anything else → :class:`BlobStoreError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sparza.azure import Failure, StorageRequests, classify
from sparza.blobstore.api import (
    BlobInfo,
    BlobNotFoundError,
    BlobSource,
    BlobStoreError,
    BlobStoreManager,
    BlobTarget,
    Clock,
    DeletedError,
    Metadata,
    RetriableError,
    blob_name_for,
    system_clock_ms,
)
from sparza.blobstore.settings import AZURE_BLOCK_SIZE, AZURE_MAX_CONCURRENCY, AZURE_SDK_RETRIES, AZURE_TIMEOUT_SECONDS
from sparza.config import Config

__all__ = ["DELETED_TAG", "EXPIRES_TAG", "AzureBlobStoreManager", "translate_azure_error"]

EXPIRES_TAG = "sparza-expires-ms"
DELETED_TAG = "sparza-deleted-ms"
_DELETED_META = "sparzadeletedms"  # metadata names must be C# identifiers: no dashes
DAY_MS = 86_400_000


def _tag_ms(ms: int) -> str:
    return f"{ms:015d}"


def translate_azure_error(operation: str, blob_id: str | None, exc: BaseException) -> BlobStoreError:
    """The blob store's error for an exception of a storage request (kinds from :func:`sparza.azure.classify`)."""
    failure = classify(exc)
    kind = failure.kind if failure is not None else None
    if kind is Failure.NOT_FOUND:
        return BlobNotFoundError(operation, blob_id or "")
    if failure is not None and failure.transport:
        return RetriableError(operation, blob_id, f"{type(exc).__name__}: {exc}")
    if failure is not None and failure.answered:
        message = f"HTTP {failure.status or 0} {failure.code or ''}".strip()
        if kind is Failure.BUSY:
            return RetriableError(operation, blob_id, message)
        if kind is Failure.CREDENTIALS:
            return BlobStoreError(operation, blob_id, f"storage refused the credentials ({message}): check the "
                                  "account key (azure.storage.connect or AZURE_STORAGE_CONNECTION_STRING)")
        return BlobStoreError(operation, blob_id, message)
    return BlobStoreError(operation, blob_id, f"{type(exc).__name__}: {exc}")


class AzureBlobStoreManager(BlobStoreManager):
    """Blobs in ``container`` of the account ``config`` resolves to (``sparza.azure``).

    Large files are uploaded and downloaded as parallel blocks/ranges
    (``blob.store.azure.max.concurrency`` connections per blob, ``blob.store.azure.block.size``).
    ``clock`` (epoch ms) is injectable so tests can let TTLs pass; ``requests`` counts every request sent.
    """

    def __init__(self, container: str, config: Mapping[str, str] | None = None, *, ttl_ms: int = 30 * DAY_MS,
                 clock: Clock = system_clock_ms, max_concurrency: int | None = None,
                 block_size: int | None = None, create_container: bool = True,
                 requests: StorageRequests | None = None) -> None:
        from sparza.azure import resolve_storage_account

        cfg = Config.of(config)
        self.container = container
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.max_concurrency = max_concurrency or AZURE_MAX_CONCURRENCY.get(cfg)
        block = block_size or AZURE_BLOCK_SIZE.get(cfg)
        account = resolve_storage_account(cfg)
        # The SDK retries a little itself; sparza's policy (blob.store.retry.policy.*) does the rest.
        self._service = account.blob_service_client(
            retry_total=AZURE_SDK_RETRIES.get(cfg),
            timeout_s=AZURE_TIMEOUT_SECONDS.get(cfg),
            max_block_size=block, max_single_put_size=block, max_chunk_get_size=block,
            max_single_get_size=block, requests=requests)
        self._client = self._service.get_container_client(container)
        if create_container:
            try:
                self._client.create_container()
            except Exception as exc:
                from azure.core.exceptions import ResourceExistsError

                if not isinstance(exc, ResourceExistsError):
                    raise translate_azure_error("create_container", container, exc) from exc

    def __repr__(self) -> str:
        return f"AzureBlobStoreManager(container={self.container!r})"

    def put(self, source: BlobSource, metadata: Metadata) -> str:
        blob_id = blob_name_for(metadata)
        meta = {k: quote(v, safe="") for k, v in metadata.as_dict().items()}
        tags = {EXPIRES_TAG: _tag_ms(self.clock() + self.ttl_ms)}
        try:
            if isinstance(source, str | Path):
                size = Path(source).stat().st_size
                with open(source, "rb") as fh:
                    self._client.upload_blob(blob_id, fh, length=size, overwrite=True, metadata=meta, tags=tags,
                                             max_concurrency=self.max_concurrency)
            else:
                self._client.upload_blob(blob_id, source, overwrite=True, metadata=meta, tags=tags,
                                         max_concurrency=self.max_concurrency)
        except BlobStoreError:
            raise
        except Exception as exc:
            raise translate_azure_error("put", blob_id, exc) from exc
        return blob_id

    def get(self, blob_id: str, dest: BlobTarget, metadata: Metadata, get_deleted: bool = False) -> None:
        try:
            downloader = self._client.download_blob(blob_id, max_concurrency=self.max_concurrency)
            if (downloader.properties.metadata or {}).get(_DELETED_META) and not get_deleted:
                raise DeletedError("get", blob_id)
            if isinstance(dest, str | Path):
                with open(dest, "wb") as out:
                    downloader.readinto(out)
            else:
                start = dest.tell() if dest.seekable() else None
                written = downloader.readinto(dest)
                if start is not None:
                    # Parallel ranges are written out of order: leave the stream after the blob's last byte.
                    dest.seek(start + written)
        except BlobStoreError:
            raise
        except OSError as exc:
            if isinstance(exc, ConnectionError | TimeoutError):
                raise translate_azure_error("get", blob_id, exc) from exc
            raise BlobStoreError("get", blob_id, str(exc)) from exc
        except Exception as exc:
            raise translate_azure_error("get", blob_id, exc) from exc

    def _blob(self, blob_id: str) -> Any:
        return self._client.get_blob_client(blob_id)

    def delete(self, blob_id: str, metadata: Metadata) -> None:
        blob = self._blob(blob_id)
        try:
            props = blob.get_blob_properties()
            meta = dict(props.metadata or {})
            if meta.get(_DELETED_META):
                raise DeletedError("delete", blob_id, "blob was already deleted")
            meta[_DELETED_META] = _tag_ms(self.clock())
            blob.set_blob_metadata(meta)  # the tombstone: get() and list_blobs() read it
        except BlobStoreError:
            raise
        except Exception as exc:
            raise translate_azure_error("delete", blob_id, exc) from exc

    def delete_known(self, blob_id: str, metadata: Metadata) -> None:
        # One request: the tombstone metadata replaces the blob's (nothing reads the rest once it is deleted).
        try:
            self._blob(blob_id).set_blob_metadata({_DELETED_META: _tag_ms(self.clock())})
        except Exception as exc:
            raise translate_azure_error("delete", blob_id, exc) from exc

    def remove_ttl(self, blob_id: str, metadata: Metadata) -> None:
        blob = self._blob(blob_id)
        try:
            props = blob.get_blob_properties()
            if (props.metadata or {}).get(_DELETED_META):
                raise DeletedError("remove_ttl", blob_id)
            if props.tag_count != 0:  # None: the service did not say (Azure omits it for no tags)
                tags = blob.get_blob_tags()
                if DELETED_TAG in tags:  # an older tombstone (tag and metadata)
                    raise DeletedError("remove_ttl", blob_id)
                if EXPIRES_TAG in tags:
                    blob.set_blob_tags({k: v for k, v in tags.items() if k != EXPIRES_TAG})
        except BlobStoreError:
            raise
        except Exception as exc:
            raise translate_azure_error("remove_ttl", blob_id, exc) from exc

    def remove_fresh_ttl(self, blob_id: str, metadata: Metadata) -> None:
        # sparza puts only its own tag: clearing every tag removes the TTL in one request.
        try:
            self._blob(blob_id).set_blob_tags({})
        except Exception as exc:
            raise translate_azure_error("remove_ttl", blob_id, exc) from exc

    def list_blobs(self, prefix: str = "") -> Iterator[BlobInfo]:
        try:
            for item in self._client.list_blobs(name_starts_with=prefix or None, include=["tags", "metadata"]):
                tags = item.tags or {}
                expires = tags.get(EXPIRES_TAG)
                deleted = (item.metadata or {}).get(_DELETED_META) or tags.get(DELETED_TAG)
                yield BlobInfo(item.name, int(item.size or 0), int(expires) if expires else None,
                               int(deleted) if deleted else None)
        except Exception as exc:
            raise translate_azure_error("list", prefix, exc) from exc

    def purge(self, blob_id: str) -> int:
        blob = self._blob(blob_id)
        try:
            size = int(blob.get_blob_properties().size or 0)
            blob.delete_blob()
            return size
        except Exception as exc:
            err = translate_azure_error("purge", blob_id, exc)
            if isinstance(err, BlobNotFoundError):
                return 0
            raise err from exc

    def download_to_file(self, blob_id: str, path: str | Path) -> None:
        """Plain parallel download of a blob into ``path`` (the benchmark's ceiling)."""
        with open(path, "wb") as out:
            self._client.download_blob(blob_id, max_concurrency=self.max_concurrency).readinto(out)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()
            self._service.close()


