"""One blob being written: an in-memory buffer cut into blocks, blocks staged on the upload pool, and
the block list committed at the end (the seed's ``AzureBlobOutputStream``).

The blob's name is bound lazily, when its first block is staged or when it is committed: a
transaction announced as late as ``flush`` still names every blob that had not staged a block yet.
Compression (gzip) is per block, so a gzip blob is a multi-member gzip file.

In a transactional flush, a blob that never filled a block (its whole content is still buffered when
the flush begins) is not staged at all: its commit is one Put Blob of the buffer, with the same owner
check as a block-list commit. Half the requests for the small blobs most batches write, and still
nothing visible before phase 2 of the flush. Every request carries a Content-MD5 that the service
checks, so a block or blob corrupted on the way is refused, not committed.

The buffer is a list of the written pieces; a block is joined from them once when it is staged (no
growing bytearray that is copied on every append and again when cut).
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
_WHOLE_MAX = 64 * 1024 * 1024  # the SDK's max_single_put_size: above it upload_blob would stage blocks itself


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
        self._parts: list[bytes | memoryview] = []  # written and not yet staged, in order
        self._buffered = 0
        self._threshold = ctx.settings.max_flush_threshold_size
        self._whole: bytes | None = None  # the content of a blob committed by one Put Blob (see module)
        self.block_ids: list[str] = []
        self.futures: list[Future[None]] = []
        self.raw_size = 0           # uncompressed bytes written so far (buffered + staged)
        self.records = 0
        self.committed = False

    @property
    def buffered(self) -> int:
        """Bytes not yet staged."""
        return self._buffered

    @property
    def name(self) -> str:
        """The blob name (binds it now if needed)."""
        if self.naming is None:
            self.naming = self._bind()
        return self.naming.name

    def write(self, data: bytes) -> None:
        """Buffer ``data``; stage a block each time the buffer holds ``maxFlushThresholdSize`` bytes."""
        n = len(data)
        self._parts.append(data)
        self._buffered += n
        self.raw_size += n
        self.ctx.budget.add(n)
        while self._buffered >= self._threshold:
            self._stage(self._take(self._threshold))

    def _take(self, size: int) -> bytes:
        """Remove the first ``size`` buffered bytes and return them as one object (the one copy)."""
        parts = self._parts
        taken: list[bytes | memoryview] = []
        need = size
        used = 0
        while need:
            part = parts[used]
            if len(part) <= need:
                taken.append(part)
                need -= len(part)
                used += 1
            else:  # cut the piece: its head ends this block, its tail starts the next one
                view = memoryview(part)
                taken.append(view[:need])
                parts[used] = view[need:]
                need = 0
        del parts[:used]
        self._buffered -= size
        self.ctx.budget.add(-size)
        if len(taken) == 1 and type(taken[0]) is bytes:
            return taken[0]
        return b"".join(taken)

    def stage_buffer(self, parts: int = 1) -> None:
        """Stage whatever is buffered (flush, rollover, memory pressure). With ``parts`` > 1 a large
        remainder is cut into that many blocks so the upload threads share the last, waited-for upload."""
        size = self._buffered
        if not size:
            return
        piece = size if parts <= 1 or size < _SPLIT_MIN else -(-size // parts)
        while self._buffered:
            self._stage(self._take(min(piece, self._buffered)))

    @property
    def whole(self) -> bool:
        """True when the commit is one Put Blob of the whole content (:meth:`finish_whole`)."""
        return self._whole is not None

    def finish_whole(self) -> bool:
        """At a flush: when no block was staged, keep the whole buffer for one Put Blob at commit time
        instead of staging it (True). False when blocks were staged: the rest must be staged too."""
        if self.block_ids or not self._buffered or self._buffered > _WHOLE_MAX:
            return False
        self._whole = self._take(self._buffered)
        return True

    def _stage(self, chunk: bytes) -> None:
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
        self.ctx.budget.add(-self._buffered)
        self._parts = []
        self._buffered = 0
        self._whole = None

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
        """Commit the staged block list, or put the whole blob (:meth:`finish_whole`), with its metadata
        (uploads must have finished); refuses to replace a blob another writer committed
        (:class:`~sparza.systems.azureblob.errors.BlobOwnedError`)."""
        if self.committed or (not self.block_ids and self._whole is None):
            return
        metadata = self._metadata()
        owner = self.owner
        storage, metrics = self.ctx.storage, self.metrics
        whole = self._whole
        if whole is not None:
            payload = gzip.compress(whole, compresslevel=6, mtime=0) if self.ctx.settings.compression == "gzip" \
                else whole
            _run_counting(metrics, lambda: storage.put_blob(
                self.name, payload, metadata, content_type=self.content_type, owner=owner))
            metrics.inc("bytes_sent", len(whole))
            metrics.inc("bytes_compressed", len(payload))
            self._whole = None
        else:
            _run_counting(metrics, lambda: storage.commit_block_list(
                self.name, self.block_ids, metadata, content_type=self.content_type, owner=owner))
        self.committed = True
        metrics.inc("blobs_committed")


def wait_all(futures: list[Future[None]], timeout_ms: int, phase: str, key: str, *,
             started: float | None = None) -> None:
    """Wait for every future within one deadline (``timeout_ms`` after ``started``, a monotonic time,
    default now); raise the first failure, or FlushTimeoutError."""
    deadline = (time.monotonic() if started is None else started) + timeout_ms / 1000.0
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
