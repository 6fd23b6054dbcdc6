"""One blob being written: an in-memory buffer cut into blocks, blocks staged on the upload pool, and
the block list committed at the end (the seed's ``AzureBlobOutputStream``).

The blob's name is bound lazily, when its first block is staged or when it is committed: a
transaction announced as late as ``flush`` still names every blob that had not staged a block yet.
Compression (gzip) is per block, so a gzip blob is a multi-member gzip file.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from sparza.systems.azureblob.client import BlobStorage
from sparza.systems.azureblob.errors import AzureBlobConnectionError, FlushTimeoutError
from sparza.systems.azureblob.metadata import BlobMetadataContext, BlobMetadataGenerator
from sparza.systems.azureblob.metrics import AzureBlobMetrics
from sparza.systems.azureblob.naming import block_id
from sparza.systems.azureblob.settings import AzureBlobSettings
from sparza.systems.azureblob.uploader import UploadPool

__all__ = ["BlobNaming", "BlobUpload", "BufferBudget", "PreparedBlob", "UploadContext", "wait_all"]


class BufferBudget:
    """Bytes buffered in memory by all writers of a producer, against ``maxBufferedBytes``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self.peak = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        """Count ``n`` more (negative: released) bytes."""
        with self._lock:
            self._used += n
            self.peak = max(self.peak, self._used)

    @property
    def used(self) -> int:
        """Bytes buffered now."""
        return self._used

    def over(self) -> bool:
        """True when more than the limit is buffered."""
        return self._used > self.limit


@dataclass
class UploadContext:
    """What every blob of a producer shares: settings, storage, pool, metadata and memory budget."""

    settings: AzureBlobSettings
    storage: BlobStorage
    pool: UploadPool
    metadata: BlobMetadataGenerator
    budget: BufferBudget


@dataclass(frozen=True, slots=True)
class BlobNaming:
    """A bound blob: its name, the 16-char token its block ids start with, the writer identity its commit
    is stamped and checked with (``owner``), extra metadata naming that writer, and whether all of it was
    derived from a transaction."""

    name: str
    token: str
    owner: str
    metadata: dict[str, str]
    transactional: bool = False


_SPLIT_MIN = 2 * 1024 * 1024  # below this, one request is cheaper than several


@dataclass(frozen=True)
class PreparedBlob:
    """A blob whose blocks are all staged, ready for someone else (the Spark driver) to commit.
    Picklable: it travels from executors to the driver in a commit message."""

    name: str
    block_ids: tuple[str, ...]
    metadata: dict[str, str]
    content_type: str | None
    records: int
    raw_size: int
    owner: str | None = None


def _run_counting(metrics: AzureBlobMetrics, fn: Callable[[], None]) -> None:
    try:
        fn()
    except AzureBlobConnectionError:
        metrics.inc("azure_connection_errors")
        raise


class BlobUpload:
    """The blocks of one blob: ``write`` buffers, full blocks are staged asynchronously, ``commit`` seals.

    Not thread-safe on its own: the owning writer serializes calls.
    """

    def __init__(self, ctx: UploadContext, metrics: AzureBlobMetrics, stream: str,
                 bind: Callable[[], BlobNaming], content_type: str) -> None:
        self.ctx = ctx
        self.content_type = "application/gzip" if ctx.settings.compression == "gzip" else content_type
        self.metrics = metrics
        self.stream = stream
        self._bind = bind
        self.naming: BlobNaming | None = None
        self._buffer = bytearray()
        self.block_ids: list[str] = []
        self.futures: list[Future[None]] = []
        self.raw_size = 0           # uncompressed bytes written so far (buffered + staged)
        self.records = 0
        self.committed = False

    @property
    def buffered(self) -> int:
        """Bytes not yet staged."""
        return len(self._buffer)

    @property
    def name(self) -> str:
        """The blob name (binds it now if needed)."""
        if self.naming is None:
            self.naming = self._bind()
        return self.naming.name

    def write(self, data: bytes) -> None:
        """Buffer ``data``; stage a block each time the buffer holds ``maxFlushThresholdSize`` bytes."""
        self._buffer += data
        self.raw_size += len(data)
        self.ctx.budget.add(len(data))
        threshold = self.ctx.settings.max_flush_threshold_size
        while len(self._buffer) >= threshold:
            self._stage(threshold)

    def stage_buffer(self, parts: int = 1) -> None:
        """Stage whatever is buffered (flush, rollover, memory pressure). With ``parts`` > 1 a large
        remainder is cut into that many blocks so the upload threads share the last, waited-for upload."""
        size = len(self._buffer)
        if not size:
            return
        piece = size if parts <= 1 or size < _SPLIT_MIN else -(-size // parts)
        while self._buffer:
            self._stage(min(piece, len(self._buffer)))

    def _stage(self, size: int) -> None:
        chunk = bytes(self._buffer[:size])
        del self._buffer[:size]
        self.ctx.budget.add(-size)
        name = self.name
        assert self.naming is not None
        bid = block_id(self.naming.token, len(self.block_ids))
        self.block_ids.append(bid)
        gzip_on = self.ctx.settings.compression == "gzip"
        storage, metrics = self.ctx.storage, self.metrics

        def upload() -> None:
            # compressing here keeps the sending thread free; zlib releases the GIL on large inputs
            payload = gzip.compress(chunk, compresslevel=6, mtime=0) if gzip_on else chunk
            _run_counting(metrics, lambda: storage.stage_block(name, bid, payload))
            metrics.inc("blocks_uploaded")
            metrics.inc("bytes_sent", len(chunk))
            metrics.inc("bytes_compressed", len(payload))

        self.futures.append(self.ctx.pool.submit(upload))

    def uploads_done(self) -> bool:
        """True when every staged block finished (successfully or not)."""
        return all(f.done() for f in self.futures)

    def discard(self) -> None:
        """Drop the buffer (a failed flush): release its memory from the budget."""
        self.ctx.budget.add(-len(self._buffer))
        self._buffer = bytearray()

    def _metadata(self) -> dict[str, str]:
        context = BlobMetadataContext(self.stream, self.name, self.raw_size, self.records)
        naming = self.naming
        assert naming is not None
        # the writer's identity goes last: a custom generator cannot drop it
        return {**self.ctx.metadata.get_blob_metadata(context), **naming.metadata}

    @property
    def owner(self) -> str:
        """The writer identity the commit is stamped and checked with."""
        _ = self.name
        assert self.naming is not None
        return self.naming.owner

    def prepared(self) -> PreparedBlob:
        """What a commit needs, for committing elsewhere (uploads must have finished)."""
        return PreparedBlob(self.name, tuple(self.block_ids), self._metadata(), self.content_type, self.records,
                            self.raw_size, self.owner)

    def commit(self) -> None:
        """Commit the staged block list with its metadata (uploads must have finished); refuses to replace
        a blob another writer committed (:class:`~sparza.systems.azureblob.errors.BlobOwnedError`)."""
        if not self.block_ids or self.committed:
            return
        metadata = self._metadata()
        owner = self.owner
        _run_counting(self.metrics, lambda: self.ctx.storage.commit_block_list(
            self.name, self.block_ids, metadata, content_type=self.content_type, owner=owner))
        self.committed = True
        self.metrics.inc("blobs_committed")


def wait_all(futures: list[Future[None]], timeout_ms: int, phase: str, key: str) -> None:
    """Wait for every future within one deadline; raise the first failure, or FlushTimeoutError."""
    deadline = time.monotonic() + timeout_ms / 1000.0
    first_error: BaseException | None = None
    for future in futures:
        remaining = deadline - time.monotonic()
        try:
            future.result(timeout=max(remaining, 0.0))
        except FutureTimeout:
            pending = sum(1 for f in futures if not f.done())
            raise FlushTimeoutError(phase, key, timeout_ms, pending) from None
        except BaseException as exc:
            if first_error is None:
                first_error = exc
    if first_error is not None:
        raise first_error
