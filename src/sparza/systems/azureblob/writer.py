"""The blobs of one (source, stream, partition) between two flushes (the seed's ``AzureBlobWriter``).

Records are encoded first (so a bad message changes nothing), grouped into format chunks (Avro data
blocks of ~64 KiB), and written to the current :class:`BlobUpload`. The writer rolls over to a new
blob before a record would exceed ``maxBlobSize``, ``maxMessagesPerBlob`` or Azure's 50,000 blocks.
A rolled-over blob is committed as soon as its uploads are done, except inside a transaction, where
every commit waits for ``flush`` so an aborted batch leaves nothing visible.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from sparza.streams import OutgoingMessageEnvelope
from sparza.systems.azureblob.formats import AVRO_SYNC_INTERVAL, RecordFormat, make_format
from sparza.systems.azureblob.metrics import AzureBlobMetrics
from sparza.systems.azureblob.naming import Transaction, blob_name, deterministic_token, random_token
from sparza.systems.azureblob.settings import AZURE_MAX_BLOCKS
from sparza.systems.azureblob.upload import BlobNaming, BlobUpload, UploadContext

__all__ = ["BlobWriter", "NameRegistry"]

_PUBLISH_EVERY = 1024
_FRAME_OVERHEAD = 36  # Avro block count + size varints (<= 20) and the 16-byte sync marker


class NameRegistry:
    """Blob names a producer has used: without a random suffix, a second blob of the same stream and
    partition in the same second gets a counter suffix instead of overwriting the first."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def claim(self, base: Callable[[str | None], str]) -> str:
        """``base(None)`` if unused, else ``base("%08d" % n)`` for the next free ``n``."""
        with self._lock:
            name = base(None)
            n = self._counts.get(name, 0)
            self._counts[name] = n + 1
            return name if n == 0 else base(f"{n:08d}")


class BlobWriter:
    """Writes one stream-partition's messages of one source into blobs; thread-safe."""

    def __init__(self, ctx: UploadContext, metrics: AzureBlobMetrics, names: NameRegistry, source: str,
                 stream: str, partition: str | None, transaction: Callable[[], Transaction | None]) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self.names = names
        self.source = source
        self.stream = stream
        self.partition = partition
        self._transaction = transaction
        settings = ctx.settings
        self._format: RecordFormat = make_format(settings.writer_format, stream, settings.stream_schemas.get(stream))
        self._lock = threading.Lock()
        self._current: BlobUpload | None = None
        self._sync = b""
        self._chunk: list[bytes] = []
        self._chunk_size = 0
        self._chunk_limit = min(AVRO_SYNC_INTERVAL, settings.max_flush_threshold_size)
        self._threshold = settings.max_flush_threshold_size
        self._max_records = settings.max_messages_per_blob
        self._size_guard = settings.max_blob_size - _FRAME_OVERHEAD
        # staged + buffered + chunk can add 2 blocks, and the final split up to threadPoolCount - 1 more
        self._block_guard = AZURE_MAX_BLOCKS - 3 - settings.thread_pool_count
        self._sealed: list[BlobUpload] = []
        self._early_commits: list[Future[None]] = []
        self._sequence = 0
        self._closed = False
        self._unpublished = 0

    # --- writing -------------------------------------------------------------------------------
    def write(self, envelope: OutgoingMessageEnvelope) -> bool:
        """Append one message; False when the writer was closed by a flush (send it to a new writer).
        Raises before changing anything when the message cannot be written."""
        with self._lock:
            if self._closed:
                return False
            record = self._format.encode(envelope.message)
            size = len(record)
            current = self._current
            # cheap bounds first; the exact rollover test runs only near a limit
            if current is not None and (current.records >= self._max_records
                                        or current.raw_size + self._chunk_size + size > self._size_guard
                                        or len(current.block_ids) + size // self._threshold > self._block_guard) \
                    and self._must_roll(size):
                self._roll()
                current = None
            if current is None:
                self._open(envelope.timestamp, record)
                current = self._current
                assert current is not None
            self._chunk.append(record)
            self._chunk_size += size
            current.records += 1
            budget = self.ctx.budget
            budget.add(size)
            if self._chunk_size >= self._chunk_limit:
                self._emit_chunk()
            if budget.over():
                # memory cap (maxBufferedBytes): stage this blob's bytes now rather than hold them
                self._emit_chunk()
                current.stage_buffer()
            if self._sealed and self._transaction() is None:
                self._commit_finished_sealed()
            # counted per writer and published in batches: three locked counters per message cost more
            # than encoding it
            self._unpublished += 1
            if self._unpublished >= _PUBLISH_EVERY:
                self._publish()
            return True

    def _publish(self) -> None:
        if self._unpublished:
            self.metrics.inc("messages_sent", self._unpublished)
            self._unpublished = 0

    def _must_roll(self, size: int) -> bool:
        current = self._current
        assert current is not None
        settings = self.ctx.settings
        if current.records + 1 > settings.max_messages_per_blob:
            return True
        pending = self._chunk_size + size + _FRAME_OVERHEAD
        if current.raw_size + pending > settings.max_blob_size:
            return True
        blocks = len(current.block_ids) + math.ceil((current.buffered + pending) / settings.max_flush_threshold_size)
        return blocks + settings.thread_pool_count - 1 > AZURE_MAX_BLOCKS  # room for the final split

    def _open(self, event_time_ms: int | None, first_record: bytes) -> None:
        sequence = self._sequence
        self._sequence += 1
        opened_ms = int(time.time() * 1000)
        ext = self.ctx.settings.extension
        # The Avro sync marker only has to be unlikely inside the data; hashing what a replay repeats
        # (instead of os.urandom) makes a replayed blob byte-identical even when its transaction is only
        # announced at flush.
        digest = hashlib.sha256(deterministic_token(self.source, self.stream, self.partition, sequence,
                                                    event_time_ms).encode() + first_record).digest()
        self._sync = digest[:16]

        def bind() -> BlobNaming:
            txn = self._transaction()
            if txn is not None:
                app_id, version = txn
                suffix = deterministic_token(app_id, version, self.source, self.stream, self.partition, sequence)[:8]
                name = blob_name(self.stream, self.partition, event_time_ms or 0, suffix, ext)
                return BlobNaming(name, deterministic_token(name, app_id, version, self.source, sequence), True)
            if self.ctx.settings.suffix_random_string:
                name = blob_name(self.stream, self.partition, opened_ms, random_token(), ext)
            else:
                name = self.names.claim(lambda s: blob_name(self.stream, self.partition, opened_ms, s, ext))
            return BlobNaming(name, secrets.token_hex(8))

        self._current = BlobUpload(self.ctx, self.metrics, self.stream, bind, self._format.content_type)
        self._current.write(self._format.header(self._sync))

    def _emit_chunk(self) -> None:
        if not self._chunk or self._current is None:
            return
        data = self._format.frame(self._chunk, self._chunk_size, self._sync)
        self.ctx.budget.add(-self._chunk_size)
        self._chunk = []
        self._chunk_size = 0
        self._current.write(data)

    def _roll(self) -> None:
        self._emit_chunk()
        assert self._current is not None
        self._current.stage_buffer()
        self._sealed.append(self._current)
        self._current = None

    def _commit_finished_sealed(self) -> None:
        ready = [u for u in self._sealed if u.uploads_done()]
        for upload in ready:
            self._sealed.remove(upload)
            self._early_commits.append(self.ctx.pool.submit(_commit_after_uploads(upload)))

    # --- flushing ------------------------------------------------------------------------------
    def finish(self) -> tuple[list[BlobUpload], list[Future[None]]]:
        """Close the writer: stage what is buffered; return the blobs still to commit and the commits
        already running for rolled-over blobs."""
        with self._lock:
            self._closed = True
            self._publish()
            if self._current is not None:
                self._emit_chunk()
                self._current.stage_buffer(parts=self.ctx.settings.thread_pool_count)
                self._sealed.append(self._current)
                self._current = None
            uploads, self._sealed = self._sealed, []
            return uploads, self._early_commits

    def discard(self) -> None:
        """Release buffered memory after a failed flush."""
        with self._lock:
            self._closed = True
            self._publish()
            self.ctx.budget.add(-self._chunk_size)
            self._chunk, self._chunk_size = [], 0
            for upload in self._sealed + ([self._current] if self._current else []):
                upload.discard()


def _commit_after_uploads(upload: BlobUpload) -> Callable[[], None]:
    def commit() -> None:
        for future in upload.futures:
            future.result()  # already done: re-raises an upload failure instead of committing
        upload.commit()
    return commit
