"""This package's one boundary to Azure: create the container, stage a block, commit a block list or put a whole
blob (conditionally: a blob committed by one writer is never replaced by another). Blocks and whole
blobs are sent with a Content-MD5 the service verifies (``validate_content``).

Azure SDK exceptions, as :func:`sparza.azure.classify` sees them, become this package's errors here and
nowhere else: unreachable storage becomes :class:`AzureBlobConnectionError`, an error answer
:class:`AzureBlobRequestError`. The SDK's own retry policy (exponential, from
:func:`sparza.azure.resolve_storage_account`) is the only retry layer, as in Samza after SAMZA-2699.
Tests inject faults by wrapping the real ``BlobServiceClient``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sparza.azure import Failure, classify
from sparza.systems.azureblob.errors import AzureBlobConnectionError, AzureBlobRequestError, BlobOwnedError
from sparza.systems.azureblob.naming import OWNER_KEY

__all__ = ["BlobStorage"]

_T = TypeVar("_T")


class BlobStorage:
    """Block-blob operations on one container of a real ``BlobServiceClient`` (or a wrapper of one).

    ``request_timeout_s`` bounds each HTTP read, so an upload stuck on a silent server ends even when
    the sending thread does it itself (Samza's SAMZA-2712).
    """

    def __init__(self, service_client: Any, container: str, *, request_timeout_s: float = 60.0) -> None:
        self.service_client = service_client
        self.container = container
        self.request_timeout_s = request_timeout_s
        self._container_client = service_client.get_container_client(container)

    def _call(self, operation: str, blob: str, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except Exception as exc:
            failure = classify(exc)
            if failure is None or failure.kind is Failure.OTHER:
                raise
            if failure.answered:
                raise AzureBlobRequestError(operation, blob, failure.status, failure.code,
                                            str(getattr(exc, "reason", None) or type(exc).__name__)) from exc
            # Unreachable, no answer, or a socket error that escaped the SDK's wrapping.
            raise AzureBlobConnectionError(operation, blob, type(exc).__name__) from exc

    def create_container(self) -> bool:
        """Create the container; False when it already exists."""
        from azure.core.exceptions import ResourceExistsError

        def create() -> bool:
            try:
                self._container_client.create_container(read_timeout=self.request_timeout_s)
                return True
            except ResourceExistsError:
                return False

        return self._call("create container", self.container, create)

    def stage_block(self, blob: str, block_id: str, data: bytes) -> None:
        """Upload one uncommitted block (re-staging the same id replaces it)."""
        client = self._container_client.get_blob_client(blob)
        self._call("stage block", blob, lambda: client.stage_block(
            block_id, data, length=len(data), validate_content=True, read_timeout=self.request_timeout_s))

    def commit_block_list(self, blob: str, block_ids: Sequence[str], metadata: dict[str, str] | None,
                          content_type: str | None = None, content_encoding: str | None = None,
                          *, owner: str | None = None) -> None:
        """Commit ``block_ids`` in order as the blob's content.

        Without ``owner`` an existing blob is replaced. With ``owner`` the blob is created only if absent
        (If-None-Match: *) and stamped ``metadata[OWNER_KEY] = owner``; an existing blob is replaced only
        when it carries the same owner (a replay of the same writer), conditionally on the ETag just read,
        else :class:`BlobOwnedError` is raised and the blob is left untouched.
        """
        from azure.storage.blob import BlobBlock, ContentSettings

        client = self._container_client.get_blob_client(blob)
        settings = ContentSettings(content_type=content_type, content_encoding=content_encoding)
        blocks = [BlobBlock(block_id=b) for b in block_ids]

        def write(meta: dict[str, str] | None, **conditions: Any) -> None:
            client.commit_block_list(blocks, content_settings=settings, metadata=meta,
                                     read_timeout=self.request_timeout_s, **conditions)

        self._write("commit block list", blob, client, write, metadata, owner)

    def put_blob(self, blob: str, data: bytes, metadata: dict[str, str] | None, content_type: str | None = None,
                 *, owner: str | None = None) -> None:
        """Write the whole blob in one request (Put Blob), with the ownership rule of
        :meth:`commit_block_list`; the service checks the content against its MD5."""
        from azure.storage.blob import ContentSettings

        client = self._container_client.get_blob_client(blob)
        settings = ContentSettings(content_type=content_type)

        def write(meta: dict[str, str] | None, **conditions: Any) -> None:
            client.upload_blob(data, length=len(data), overwrite=True, content_settings=settings, metadata=meta,
                               validate_content=True, max_concurrency=1, read_timeout=self.request_timeout_s,
                               **conditions)

        self._write("put blob", blob, client, write, metadata, owner)

    def _write(self, operation: str, blob: str, client: Any, write: Callable[..., None],
               metadata: dict[str, str] | None, owner: str | None) -> None:
        """Run ``write(metadata, **conditions)`` unconditionally, or (with ``owner``) as an owned write."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError

        if owner is None:
            self._call(operation, blob, lambda: write(metadata or None))
            return
        stamped = {**(metadata or {}), OWNER_KEY: owner}

        def write_owned() -> None:
            # Created if absent; else replaced only under our own name, at the ETag read (a concurrent
            # rewrite by the same writer makes us read again; anyone else's blob is never touched).
            for _ in range(5):
                try:
                    write(stamped, match_condition=MatchConditions.IfMissing)
                    return
                except (ResourceExistsError, ResourceModifiedError):
                    pass
                try:
                    props = client.get_blob_properties(timeout=self.request_timeout_s)
                except ResourceNotFoundError:
                    continue  # deleted meanwhile: create it
                found = {k.lower(): v for k, v in (props.metadata or {}).items()}.get(OWNER_KEY.lower())
                if found != owner:
                    raise BlobOwnedError(blob, found, owner)
                try:
                    write(stamped, etag=props.etag, match_condition=MatchConditions.IfNotModified)
                    return
                except (ResourceModifiedError, ResourceNotFoundError):
                    continue
            raise BlobOwnedError(blob, "unknown (it kept changing while this commit ran)", owner)

        self._call(operation, blob, write_owned)

    def owner_of(self, blob: str) -> str | None:
        """The :data:`OWNER_KEY` metadata of a committed blob (None when absent or not stamped)."""
        from azure.core.exceptions import ResourceNotFoundError

        client = self._container_client.get_blob_client(blob)

        def get() -> str | None:
            try:
                props = client.get_blob_properties(timeout=self.request_timeout_s)
            except ResourceNotFoundError:
                return None
            return {k.lower(): v for k, v in (props.metadata or {}).items()}.get(OWNER_KEY.lower())

        return self._call("get properties", blob, get)

    def download(self, blob: str) -> bytes | None:
        """A committed blob's content, or None when it does not exist."""
        from azure.core.exceptions import ResourceNotFoundError

        client = self._container_client.get_blob_client(blob)

        def get() -> bytes | None:
            try:
                return bytes(client.download_blob(read_timeout=self.request_timeout_s).readall())
            except ResourceNotFoundError:
                return None

        return self._call("download", blob, get)

    def put_if_absent(self, blob: str, data: bytes) -> bool:
        """Create a small blob unless it exists (If-None-Match: *); False when it already existed."""
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

        client = self._container_client.get_blob_client(blob)

        def put() -> bool:
            try:
                client.upload_blob(data, overwrite=False, read_timeout=self.request_timeout_s)
                return True
            except (ResourceExistsError, ResourceModifiedError):
                return False

        return self._call("upload", blob, put)

