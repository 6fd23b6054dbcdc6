"""The blobs of one (source, stream, partition) between two flushes (the seed's ``AzureBlobWriter``).

Records are encoded first (so a bad message changes nothing), grouped into format chunks (Avro data
blocks of ~64 KiB), and written to the current :class:`BlobUpload`. The writer rolls over to a new
blob before a record would exceed ``maxBlobSize``, ``maxMessagesPerBlob`` or Azure's 50,000 blocks.
A rolled-over blob is staged at once but committed only by the source's next ``flush``, so an abandoned
batch leaves nothing visible, in a transaction or not.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import threading
import time
from collections.abc import Callable

from sparza.streams import OutgoingMessageEnvelope
from sparza.systems.azureblob.formats import AVRO_SYNC_INTERVAL, RecordFormat, make_format
from sparza.systems.azureblob.metrics import AzureBlobMetrics
from sparza.systems.azureblob.naming import (
    Transaction,
    blob_name,
    deterministic_token,
    producer_owner,
    random_token,
    source_slug,
    transaction_metadata,
    transaction_owner,
)
from sparza.systems.azureblob.settings import AZURE_MAX_BLOCKS
from sparza.systems.azureblob.upload import BlobNaming, BlobUpload, UploadContext

__all__ = ["BlobWriter", "ProducerIdentity"]

_PUBLISH_EVERY = 1024
_FRAME_OVERHEAD = 36  # Avro block count + size varints (<= 20) and the 16-byte sync marker


class ProducerIdentity:
    """Who writes outside a transaction: a random id per producer instance and a counter of its blobs, so
    no two producers (processes, hosts, restarts) and no two blobs of one producer share a name."""

    def __init__(self) -> None:
        self.id = secrets.token_hex(6)
        self._count = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        """The number of the producer's next non-transactional blob."""
        with self._lock:
            n = self._count
            self._count += 1
            return n


class BlobWriter:
    """Writes one stream-partition's messages of one source into blobs; thread-safe."""

    def __init__(self, ctx: UploadContext, metrics: AzureBlobMetrics, identity: ProducerIdentity, source: str,
                 stream: str, partition: str | None, transaction: Callable[[], Transaction | None],
                 next_sequence: Callable[[], int], processing_time: Callable[[], int | None] = lambda: None) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self.identity = identity
        self.source = source
        self._slug = source_slug(source)
        self._next_sequence = next_sequence
        self.stream = stream
        self.partition = partition
        self._transaction = transaction
        self._processing_time = processing_time
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
                stamp = envelope.timestamp
                self._open(stamp if stamp is not None else self._processing_time(), record)
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
        # numbered per (source, stream, partition) from the transaction's start: a replay numbers alike
        sequence = self._next_sequence()
        opened_ms = int(time.time() * 1000)
        ext = self.ctx.settings.extension
        # The Avro sync marker only has to be unlikely inside the data; hashing what a replay repeats
        # (instead of os.urandom) makes a replayed blob byte-identical even when its transaction is only
        # announced at flush.
        digest = hashlib.sha256(deterministic_token(self.source, self.stream, self.partition, sequence,
                                                    event_time_ms).encode() + first_record).digest()
        self._sync = digest[:16]
        source, stream, partition, slug = self.source, self.stream, self.partition, self._slug

        def bind() -> BlobNaming:
            txn = self._transaction()
            if txn is not None:
                app_id, version = txn
                writer = deterministic_token(app_id, source, length=12)
                name = blob_name(stream, partition, event_time_ms or 0, f"{slug}-v{version}-{sequence:04d}-{writer}",
                                 ext)
                return BlobNaming(name, deterministic_token(name, app_id, version, source, sequence),
                                  transaction_owner(app_id, version, source),
                                  transaction_metadata(app_id, version, source), True)
            identity = self.identity
            tail = f"{slug}-{identity.id}-{identity.next():04d}"
            if self.ctx.settings.suffix_random_string:
                tail += f"-{random_token()}"
            name = blob_name(stream, partition, opened_ms, tail, ext)
            return BlobNaming(name, secrets.token_hex(8), producer_owner(identity.id), {})

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

    # --- flushing ------------------------------------------------------------------------------
    def finish(self, *, whole: bool = False) -> list[BlobUpload]:
        """Close the writer: stage what is buffered; return every blob to commit (rolled-over ones too).
        With ``whole`` a blob that staged no block keeps its content for one Put Blob at commit instead."""
        with self._lock:
            self._closed = True
            self._publish()
            if self._current is not None:
                self._emit_chunk()
                if not (whole and self._current.finish_whole()):
                    self._current.stage_buffer(parts=self.ctx.settings.thread_pool_count)
                self._sealed.append(self._current)
                self._current = None
            uploads, self._sealed = self._sealed, []
            return uploads

    def discard(self) -> None:
        """Release buffered memory after a failed flush."""
        with self._lock:
            self._closed = True
            self._publish()
            self.ctx.budget.add(-self._chunk_size)
            self._chunk, self._chunk_size = [], 0
            for upload in self._sealed + ([self._current] if self._current else []):
                upload.discard()
