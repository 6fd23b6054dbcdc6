"""``AzureBlobSystemProducer``: sends messages to block blobs of one container (the system name).

Lifecycle: ``register(source)`` for each source, ``start()`` (creates the container if missing), then per
batch ``begin(source, transaction)``, ``send(source, envelope)`` from any number of threads, and either
``flush(source, transaction=...)`` or ``abandon(source)``; finally ``stop()``. This is the
:class:`~sparza.systems.SystemProducer` contract.

``flush(source)`` makes everything the source sent durable, in two phases under one lock that keeps
that source's sends out: (1) stage what is buffered and wait for every block upload
(``flushTimeoutMs``); (2) commit each block list (``closeTimeoutMs``). In a transaction, a blob that
never filled a block is not staged in (1) but written in (2) by one Put Blob (an upload, so bounded by
``flushTimeoutMs`` from the start of phase 2): half the requests for small blobs. A request of phase 2
that timed out may still land later; a transaction's replay rewrites the same blobs, which is why
outside a transaction every blob's data is staged in phase 1. If any upload of the flush
failed or timed out, nothing is committed and the error is raised; the writers are dropped
either way, so messages sent afterwards go to new blobs and the caller replays the batch. Nothing a
source sends becomes visible before its flush: rolled-over blobs are staged early but committed there.

Exactly-once with the task runtime: after ``begin(source, (app_id, version))`` blob names, block ids and
Avro sync markers derive from the transaction, the source, the stream, the partition and the blob's
sequence, and the time in the name is the first message's event timestamp (or, for a message without
one, the batch's processing time: :meth:`AzureBlobSystemProducer.set_processing_time`). A replay of the same batch
that sends the same messages in the same order writes byte-identical blobs under the same names. Every
commit is stamped with its writer (the transaction, or this producer instance outside one) and replaces
an existing blob only when that blob carries the same writer, so a replay rewrites its own blobs and a
different batch, task, job or producer can never overwrite them (:class:`BlobOwnedError` instead).
A transaction announced only at ``flush`` cannot rename blobs that had to stage a block before it (a
buffer over ``maxFlushThresholdSize`` or a rollover); those keep per-producer names and are counted in
``non_transactional_blobs``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.streams import OutgoingMessageEnvelope
from sparza.systems.azureblob.client import BlobStorage
from sparza.systems.azureblob.errors import (
    AzureBlobConnectionError,
    AzureBlobError,
    TransactionStateError,
    WriterClosedError,
)
from sparza.systems.azureblob.metadata import load_metadata_generator
from sparza.systems.azureblob.metrics import AzureBlobMetrics
from sparza.systems.azureblob.naming import BlobKey, Transaction
from sparza.systems.azureblob.settings import ACCOUNT_KEYS, AzureBlobSettings
from sparza.systems.azureblob.upload import BlobUpload, BufferBudget, PreparedBlob, UploadContext, wait_all
from sparza.systems.azureblob.uploader import UploadPool
from sparza.systems.azureblob.writer import BlobWriter, ProducerIdentity

__all__ = ["AzureBlobSystemProducer", "partition_segment"]

log = logging.getLogger(__name__)


def partition_segment(envelope: OutgoingMessageEnvelope) -> str | None:
    """The blob name's partition segment: the envelope's partition key as text (as the seed's
    ``ome.partition``); the partition number when only that is set; None for neither."""
    key = envelope.partition_key
    if key is not None:
        if isinstance(key, bytes | bytearray):
            return bytes(key).decode("utf-8", errors="replace")
        return str(key)
    if envelope.partition is not None:
        return str(envelope.partition)
    return None


def _account_name(service_client: Any, config: Config, system: str) -> str | None:
    """The storage account's name, for Samza's metric group ``<account>_<system>`` (None when the config
    names none: ``start`` then fails with the reason)."""
    if service_client is not None:
        return getattr(service_client, "account_name", None)
    from sparza.azure import resolve_storage_account
    from sparza.errors import ConfigError

    try:
        return resolve_storage_account(config, ACCOUNT_KEYS, names={"container": system}).account_name
    except ConfigError:
        return None


class _Source:
    """A source's open writers. Sends need no source-wide lock: a flush swaps the writer map and closes
    each writer under the writer's own lock, and a send that finds its writer closed retries on a new
    one (its message then belongs to the next blob, as any message sent after the flush began may)."""

    def __init__(self, metrics: AzureBlobMetrics) -> None:
        self.metrics = metrics
        self.flush_lock = threading.Lock()
        self.create_lock = threading.Lock()
        self.writers: dict[BlobKey, BlobWriter] = {}
        self.transaction: Transaction | None = None
        self.sequences: dict[BlobKey, int] = {}  # blobs opened per key since the transaction began
        self.processing_time_ms: int | None = None  # the batch's (set_processing_time): names untimed messages

    def next_sequence(self, key: BlobKey) -> int:
        """The number of the next blob of ``key`` in the running transaction (0, 1, ... per key)."""
        with self.create_lock:
            n = self.sequences.get(key, 0)
            self.sequences[key] = n + 1
            return n

    def reset(self) -> None:
        """Forget the transaction and its blob numbers (after a flush or an abandon)."""
        self.transaction = None
        self.sequences = {}

    def has_unflushed(self) -> bool:
        """True when the source sent something since its last flush or abandon."""
        return bool(self.writers)


class AzureBlobSystemProducer:
    """A SystemProducer writing Avro (or JSON-lines, or raw) block blobs to the container ``system_name``.

    ``service_client`` replaces the ``BlobServiceClient`` built from config (tests wrap the real one
    to inject faults); the client is otherwise built by :func:`sparza.azure.resolve_storage_account`.
    """

    def __init__(self, system_name: str, config: Config | dict[str, Any], metrics: MetricsRegistry | None = None,
                 *, service_client: Any = None) -> None:
        self.system = system_name
        self.config = Config.of(config)
        self.settings = AzureBlobSettings.from_config(system_name, self.config)
        self.registry = metrics if metrics is not None else MetricsRegistry()
        self._generator = load_metadata_generator(
            self.settings.metadata_generator, self.settings.metadata_generator_config,
            self.settings.prefix + "metadataPropertiesGeneratorFactory")
        self._service_client = service_client
        self._ctx: UploadContext | None = None
        self._sources: dict[str, _Source] = {}
        self._sources_lock = threading.Lock()
        self.identity = ProducerIdentity()
        self._started = False
        self._stopped = False
        self._account = _account_name(service_client, self.config, self.system)
        self._system_metrics = AzureBlobMetrics(self.registry, system_name, None, self._account)
        self.budget = BufferBudget(self.settings.max_buffered_bytes)

    # --- lifecycle -------------------------------------------------------------------------------
    def register(self, source: str) -> None:
        """Declare a source (a task name). Sources may also be registered implicitly by ``send``."""
        self._source(source)

    def _source(self, source: str) -> _Source:
        state = self._sources.get(source)
        if state is None:
            with self._sources_lock:
                state = self._sources.get(source)
                if state is None:
                    state = _Source(AzureBlobMetrics(self.registry, self.system, source, self._account))
                    self._sources[source] = state
        return state

    def start(self) -> None:
        """Connect and create the container if it is missing."""
        if self._started:
            return
        if self._stopped:
            raise WriterClosedError(f"producer of {self.system!r} was stopped; create a new one")
        client = self._service_client
        if client is None:
            from sparza.azure import resolve_storage_account

            account = resolve_storage_account(self.config, ACCOUNT_KEYS, names={"container": self.system})
            from sparza.azure import StorageRequests

            client = account.blob_service_client(requests=StorageRequests(self.registry, f"system.{self.system}"))
        request_timeout_s = max(self.settings.flush_timeout_ms, self.settings.close_timeout_ms) / 1000.0
        storage = BlobStorage(client, self.system, request_timeout_s=request_timeout_s)
        try:
            storage.create_container()
        except AzureBlobConnectionError:
            self._system_metrics.inc("azure_connection_errors")
            raise
        pool = UploadPool(self.settings.thread_pool_count, self.settings.blocking_queue_size,
                          name=f"azureblob-{self.system}")
        self._ctx = UploadContext(self.settings, storage, pool, self._generator, self.budget)
        self._started = True

    def stop(self) -> None:
        """Flush what any source sent and neither flushed nor abandoned (in its begun transaction if any, as
        Samza's stop does), then stop the upload threads. Raises the first flush failure."""
        if self._stopped:
            return
        error: BaseException | None = None
        if self._started:
            for source in list(self._sources):
                try:
                    self.flush(source)
                except AzureBlobError as exc:
                    error = error or exc
        self._stopped = True
        if self._ctx is not None:
            self._ctx.pool.shutdown(wait=error is None)
        if error is not None:
            raise error

    def abandon(self, source: str | None = None) -> None:
        """Drop what ``source`` sent since its last flush (every source when None) without committing any
        of it: buffered messages are released and staged blocks stay uncommitted (invisible; Azure
        discards them after 7 days). For a batch that failed. With no source the producer also stops."""
        states = list(self._sources.values()) if source is None else [self._source(source)]
        for state in states:
            with state.flush_lock:
                with state.create_lock:
                    writers, state.writers = list(state.writers.values()), {}
                state.reset()
                for writer in writers:
                    writer.discard()
        if source is None and not self._stopped:
            self._stopped = True
            if self._ctx is not None:
                self._ctx.pool.shutdown(wait=False)

    def _context(self) -> UploadContext:
        if self._stopped:
            raise WriterClosedError(f"producer of {self.system!r} was stopped")
        if self._ctx is None:
            raise WriterClosedError(f"producer of {self.system!r} is not started: call start() first")
        return self._ctx

    # --- sending ---------------------------------------------------------------------------------
    def begin(self, source: str, transaction: Transaction) -> None:
        """Announce the transaction of the messages ``source`` sends until its next flush or abandon.
        Refused (:class:`TransactionStateError`) while the source holds unflushed messages of another one."""
        txn = (str(transaction[0]), int(transaction[1]))
        state = self._source(source)
        with state.create_lock:
            if state.transaction == txn:
                return
            if state.has_unflushed():
                raise TransactionStateError(
                    f"begin({source!r}, {txn}) while the source holds unflushed messages of "
                    f"{state.transaction or 'no transaction'}: flush or abandon them first")
            state.transaction = txn
            state.sequences = {}

    def set_processing_time(self, source: str, epoch_ms: int) -> None:
        """The batch's processing time: the time in the name of a blob whose first message has no event
        timestamp (Samza names blobs by the time they are written; the batch's planned time is that time,
        and the same when the batch is replayed). Without it such blobs are named 1970/01/01."""
        self._source(source).processing_time_ms = int(epoch_ms)

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Buffer one message into the blob of its (source, stream, partition); may upload a block in this
        thread when the upload queue is full (backpressure); never drops the message."""
        state = self._sources.get(source) or self._source(source)
        try:
            ctx = self._ctx if (self._ctx is not None and not self._stopped) else self._context()
            pkey = envelope.partition_key
            key: BlobKey = (envelope.system_stream.stream,
                            pkey if type(pkey) is str else partition_segment(envelope))
            while True:
                writer = state.writers.get(key)
                if writer is None:
                    with state.create_lock:
                        writer = state.writers.get(key)
                        if writer is None:
                            writer = BlobWriter(ctx, state.metrics, self.identity, source, key[0], key[1],
                                                lambda: state.transaction,
                                                functools.partial(state.next_sequence, key),
                                                lambda: state.processing_time_ms)
                            state.writers[key] = writer
                if writer.write(envelope):
                    return
        except Exception:
            state.metrics.inc("send_errors")
            raise

    def flush(self, source: str, *, transaction: Transaction | None = None) -> None:
        """Make everything ``source`` sent durable (see the module docstring for the exact guarantee)."""
        self._complete(source, transaction, commit=True)

    def prepare(self, source: str, *, transaction: Transaction) -> list[PreparedBlob]:
        """Phase 1 of a flush only: stage everything ``source`` sent and wait for the uploads, then return
        the block lists uncommitted, for a coordinator (the Spark driver) to commit. Call ``begin`` with
        the same transaction before sending, so that no rolled-over blob is committed early."""
        return self._complete(source, transaction, commit=False)

    def _complete(self, source: str, transaction: Transaction | None, *, commit: bool) -> list[PreparedBlob]:
        state = self._source(source)
        ctx = self._context()
        state.flush_lock.acquire()
        try:
            if transaction is not None:
                txn = (str(transaction[0]), int(transaction[1]))
                if state.transaction is not None and state.transaction != txn:
                    raise TransactionStateError(
                        f"flush({source!r}, transaction={txn}) but the source began {state.transaction}: "
                        "a flush commits the transaction its messages were sent in")
                state.transaction = txn
            with state.create_lock:
                writers = list(state.writers.values())
                state.writers = {}
            try:
                # Put Blob carries the data in phase 2, where a timed-out request may still land later:
                # only a transaction makes that harmless (its replay rewrites the same names).
                uploads = self._stage_all(state, writers, whole=commit and state.transaction is not None)
                if not commit:
                    return [u.prepared() for u in uploads if u.block_ids]
                # Phase 2 (on the pool): put each blob that filled no block, bounded by flushTimeoutMs as it
                # uploads data, and commit each block list, bounded by closeTimeoutMs; both clocks start now.
                started = time.monotonic()
                puts = [ctx.pool.submit(upload.commit) for upload in uploads if upload.whole]
                commits = [ctx.pool.submit(upload.commit) for upload in uploads if not upload.whole]
                wait_all(puts, self.settings.flush_timeout_ms, "blob uploads",
                         self.settings.prefix + "flushTimeoutMs", started=started)
                wait_all(commits, self.settings.close_timeout_ms, "block list commits",
                         self.settings.prefix + "closeTimeoutMs", started=started)
                return []
            except Exception:
                state.metrics.inc("send_errors")
                for writer in writers:
                    writer.discard()
                raise
        finally:
            state.reset()
            state.flush_lock.release()

    def _stage_all(self, state: _Source, writers: list[BlobWriter], *, whole: bool) -> list[BlobUpload]:
        """Phase 1: stage every buffer, then wait for all block uploads of this source. With ``whole``,
        blobs that staged no block are left for one Put Blob each in phase 2."""
        uploads: list[BlobUpload] = []
        for writer in writers:
            uploads.extend(writer.finish(whole=whole))
        if state.transaction is not None:
            for upload in uploads:
                naming = upload.naming
                if naming is not None and not naming.transactional:
                    state.metrics.inc("non_transactional_blobs")
                    log.warning("blob %s staged before its transaction was known: its name is not "
                                "deterministic (call begin() before sending)", naming.name)
        wait_all([f for u in uploads for f in u.futures], self.settings.flush_timeout_ms, "block uploads",
                 self.settings.prefix + "flushTimeoutMs")
        return uploads
