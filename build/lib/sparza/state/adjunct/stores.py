"""The built-in per-store managers: partitioned and broadcast adjunct stores.

``stores.<store>.adstore.manager.factory`` may name another :class:`AdjunctStoreManagerFactory`;
its managers plug into :class:`~sparza.state.adjunct.TaskAdjunctManager` the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sparza.blobstore import BlobStoreManager
from sparza.config import Config
from sparza.state.adjunct.builder import EnvelopeReader, StoreBuilder
from sparza.state.adjunct.container import ContainerSnapshotCache, SnapshotLease
from sparza.state.adjunct.errors import AdjunctError, BroadcastSnapshotError
from sparza.state.adjunct.extractor import load_extractor
from sparza.state.adjunct.offsets import StreamAccess
from sparza.state.adjunct.publication import Publication, PublicationBoard
from sparza.state.adjunct.readonly import ReadOnlyStore
from sparza.state.adjunct.settings import AdjunctStoreSpec
from sparza.state.adjunct.slot import store_serdes
from sparza.state.adjunct.snapshots import SnapshotStore
from sparza.state.kv import InMemoryStore, KeyValueStore
from sparza.streams import IncomingMessageEnvelope, SystemStreamPartition

__all__ = [
    "AdjunctStoreContext",
    "AdjunctStoreManager",
    "AdjunctStoreManagerFactory",
    "BroadcastStoreManager",
    "DefaultAdjunctStoreManagerFactory",
    "PartitionedStoreManager",
    "SupportsCommitted",
    "SupportsReadThrough",
    "SupportsRows",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdjunctStoreContext:
    """Everything a store manager of one (store, task) may need."""

    spec: AdjunctStoreSpec
    task_name: str
    config: Config
    base_dir: Path
    blob_store: BlobStoreManager | None
    job_name: str
    job_id: str
    access: StreamAccess
    ssps: tuple[SystemStreamPartition, ...]
    container_cache: ContainerSnapshotCache


@runtime_checkable
class AdjunctStoreManager(Protocol):
    """Keeps one adjunct store of one task (the seed's AdjunctDataStoreManager, per store).

    Call order per batch: ``restore`` (once, or after a failure), ``process`` for every message of
    the store's stream, ``view`` reads at any time, ``commit`` at the end of every batch.
    """

    def restore(self, entry: dict[str, Any] | None) -> None:
        """Bring the store to the committed entry (None: never committed)."""
        ...

    def process(self, envelope: IncomingMessageEnvelope) -> bool:
        """Apply one message of the store's stream; False when it was already applied."""
        ...

    def catch_up(self, read: EnvelopeReader, until: dict[SystemStreamPartition, str | None]) -> int:
        """Read and apply what the store misses before ``until``; returns messages applied."""
        ...

    def view(self) -> KeyValueStore:
        """The read-only store tasks read."""
        ...

    def begin_batch(self, batch_id: int | None) -> None:
        """Batch ``batch_id`` starts (readers pick the snapshot published before it; None: the newest one, as
        a task that commits on its own schedule reads, see :class:`SupportsPinnedReads`)."""
        ...

    def commit(self, batch_id: int, generation: int = 0) -> dict[str, Any]:
        """Make the batch's changes durable; returns the JSON-able checkpoint entry. ``generation`` is the
        coordinator generation committing it (a broadcast store names it in its publication)."""
        ...

    def status(self) -> dict[str, Any]:
        """Bootstrap state, version and counts for progress displays and tests."""
        ...

    def close(self) -> None:
        """Release local resources (idempotent)."""
        ...


@runtime_checkable
class SupportsCommitted(Protocol):
    """Optional capability of an :class:`AdjunctStoreManager`: told when the task checkpoint holding
    its last ``commit`` entry is durable (to make the snapshots of that commit permanent)."""

    def committed(self, batch_id: int) -> None:
        """The checkpoint of batch ``batch_id`` is durable."""
        ...


@runtime_checkable
class SupportsPinnedReads(Protocol):
    """Optional capability of an :class:`AdjunctStoreManager` whose reads depend on what another task
    published (a broadcast store): which publication the batch read, so a replay of the batch can read
    the very same one. Tasks that commit on their own schedule (containers) have no common batch number to
    pick "the snapshot before this batch" by, so they read the newest and record it."""

    def read_batch(self) -> int | None:
        """The batch of the publication this batch read (None: it read none)."""
        ...

    def pin(self, batch: int) -> None:
        """Read the publication of ``batch`` in this batch (a replay of a batch that read it)."""
        ...


@runtime_checkable
class SupportsReadThrough(Protocol):
    """Optional capability of an :class:`AdjunctStoreManager`: told, after a batch delivered the store's
    messages, up to which (exclusive) offset each SSP was read. A bootstrap may end on an offset that
    is never delivered (a Kafka transaction's commit marker), so "read past the target" is how it
    knows it is complete."""

    def read_through(self, ends: dict[SystemStreamPartition, str]) -> None:
        """The batch read each SSP of ``ends`` up to that offset (exclusive)."""
        ...


@runtime_checkable
class SupportsRows(Protocol):
    """Optional capability of an :class:`AdjunctStoreManager`: apply consecutive messages of one SSP given
    as columns, in offset order, as ``process`` of each would (a bootstrap costs per message what a
    RocksDB put does, so building an envelope for each is most of it). Managers without it get
    ``process`` per message."""

    def process_rows(self, ssp: SystemStreamPartition, offsets: Sequence[str], keys: Sequence[Any],
                     values: Sequence[Any], timestamps: Sequence[int | None], types: Sequence[int]) -> int:
        """Apply the rows; returns how many ``process`` would have returned True for."""
        ...


@runtime_checkable
class AdjunctStoreManagerFactory(Protocol):
    """Builds the manager of one adjunct store for one task."""

    def get_adjunct_store_manager(self, context: AdjunctStoreContext) -> AdjunctStoreManager:
        """A new manager for ``context.spec`` in task ``context.task_name``."""
        ...


def _builder(context: AdjunctStoreContext, task_name: str) -> StoreBuilder:
    snapshots = None
    if context.spec.backed_up:
        if context.blob_store is None:
            raise AdjunctError(context.spec.name, "is backed up (stores.<store>.backup.factories or broadcast) "
                                                  "but no blob store was given; configure blob.store.manager.factory")
        snapshots = SnapshotStore(context.blob_store, context.job_name, context.job_id, task_name)
    extractor = load_extractor(context.spec.name, context.spec.extractor_factory, context.config)
    return StoreBuilder(context.spec, context.config, task_name, context.base_dir, snapshots, extractor,
                        context.access, list(context.ssps))


class PartitionedStoreManager:
    """One store per (stream, task): the task applies its partition before its main messages of the
    same batch, so a change read in batch ``b`` is visible to main messages of batch ``b`` (for a
    versioned dataset, a version sealed in batch ``b`` is served from batch ``b + 1``)."""

    def __init__(self, context: AdjunctStoreContext) -> None:
        self.context = context
        self.builder = _builder(context, context.task_name)
        self._view = ReadOnlyStore(context.spec.name, str(context.spec.stream), self.builder.serving_store,
                                   *store_serdes(context.config, context.spec.name))

    def restore(self, entry: dict[str, Any] | None) -> None:
        self.builder.restore(entry)

    def process(self, envelope: IncomingMessageEnvelope) -> bool:
        return self.builder.apply(envelope)

    def process_rows(self, ssp: SystemStreamPartition, offsets: Sequence[str], keys: Sequence[Any],
                     values: Sequence[Any], timestamps: Sequence[int | None], types: Sequence[int]) -> int:
        return self.builder.apply_rows(ssp, offsets, keys, values, timestamps, types)

    def catch_up(self, read: EnvelopeReader, until: dict[SystemStreamPartition, str | None]) -> int:
        return self.builder.catch_up(read, until)

    def read_through(self, ends: dict[SystemStreamPartition, str]) -> None:
        self.builder.read_through(ends)

    def view(self) -> KeyValueStore:
        return self._view

    def begin_batch(self, batch_id: int | None) -> None:
        """Nothing to do: the task reads its own store."""

    def commit(self, batch_id: int, generation: int = 0) -> dict[str, Any]:
        return self.builder.commit(batch_id)

    def committed(self, batch_id: int) -> None:
        self.builder.committed()

    def status(self) -> dict[str, Any]:
        return _builder_status(self.builder)

    def close(self) -> None:
        self.builder.close()


class BroadcastStoreManager:
    """A broadcast store as seen by one task.

    The builder task (``adstore.builder.task``) applies the stream to its own writable store and,
    at each commit that changed the served data, uploads a snapshot and publishes it. Every task,
    the builder included, reads the newest snapshot published *before* the current batch, from
    one host-local copy shared by the tasks of the host. So all tasks of the job see the same data
    in a batch, and a change read in batch ``b`` is visible to main messages from batch ``b + 1``.
    """

    def __init__(self, context: AdjunctStoreContext) -> None:
        if context.blob_store is None:
            raise AdjunctError(context.spec.name, "a broadcast store needs a blob store to publish snapshots; "
                                                  "configure blob.store.manager.factory")
        self.context = context
        spec = context.spec
        self.builder = _builder(context, spec.builder_task) if spec.is_builder(context.task_name) else None
        self.board = PublicationBoard(context.blob_store, context.job_name, context.job_id, spec.builder_task,
                                      spec.name)
        self._reader_snapshots = SnapshotStore(context.blob_store, context.job_name, context.job_id,
                                               spec.builder_task)
        self.publication: Publication | None = None
        self._lease: SnapshotLease | None = None
        self._empty: KeyValueStore | None = None
        self._wanted_before: int | None = None
        self._stale = True
        self._last_published: str | None = None
        self._published_bootstrapped = False  # whether the last publication said the bootstrap was complete
        self._read: dict[str, Any] | None = None  # the publication this task read last (its checkpoint's)
        self._warned_unbootstrapped = False
        self._view = ReadOnlyStore(spec.name, str(spec.stream), self._current, *store_serdes(context.config, spec.name))

    # --- reading -------------------------------------------------------------------------------
    def _current(self) -> KeyValueStore:
        if self._stale or (self._lease is None and self.publication is not None):
            self.refresh()
        if self._lease is not None:
            return self._lease.store
        if self._empty is None:
            self._empty = InMemoryStore(self.context.spec.name)
        return self._empty

    def refresh(self) -> None:
        """Open the newest snapshot published before the current batch (a no-op when unchanged)."""
        self._stale = False
        publication = self.board.latest_before(self._wanted_before)
        self.publication = publication
        if publication is None:
            read = self._read
            if read is not None and (self._wanted_before is None or int(read["batch"]) < self._wanted_before):
                # This task read a publication before: serving an empty table now would drop every join.
                raise BroadcastSnapshotError(
                    self.context.spec.name,
                    f"the publication of batch {read['batch']} (snapshot {read['snapshot']}) that task "
                    f"'{self.context.task_name}' read before is gone from the blob store ({self.board.prefix}), and "
                    "no other was published before it: the store would be served empty. Bring the publication "
                    "blob back (from a backup of the blob store), or let the builder task "
                    f"'{self.context.spec.builder_task}' commit a batch so it publishes again")
            self._release()
            return
        if self.context.spec.bootstrap and not publication.bootstrapped and not self._warned_unbootstrapped:
            self._warned_unbootstrapped = True
            _log.warning("broadcast store %s: reading a snapshot taken before its bootstrap completed "
                         "(batch %d)", self.context.spec.name, publication.batch)
        if self._lease is not None and self._lease.snapshot_id == publication.snapshot:
            return
        lease = self.context.container_cache.acquire(self.context.spec.name, publication.snapshot,
                                                     self._reader_snapshots)
        self._release()
        self._lease = lease
        self.context.container_cache.collect(self.context.spec.name, keep={publication.snapshot})

    def _release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    # --- protocol --------------------------------------------------------------------------------
    def restore(self, entry: dict[str, Any] | None) -> None:
        self._release()
        body = entry or {}
        if self.builder is not None:
            self.builder.restore(body.get("builder"))
            self._last_published = body.get("published")
            # Absent in checkpoints of older versions: publishing once more, bootstrapped, costs one small blob.
            self._published_bootstrapped = bool(body.get("published_bootstrapped", False))
        batch = body.get("batch")
        self._wanted_before = None if batch is None else int(batch) + 1
        read = body.get("read")
        self._read = dict(read) if isinstance(read, dict) and "batch" in read else None
        self._stale = True

    def process(self, envelope: IncomingMessageEnvelope) -> bool:
        # Every task reads the broadcast partitions; only the builder applies them.
        return self.builder.apply(envelope) if self.builder is not None else False

    def process_rows(self, ssp: SystemStreamPartition, offsets: Sequence[str], keys: Sequence[Any],
                     values: Sequence[Any], timestamps: Sequence[int | None], types: Sequence[int]) -> int:
        if self.builder is None:
            return 0
        return self.builder.apply_rows(ssp, offsets, keys, values, timestamps, types)

    def catch_up(self, read: EnvelopeReader, until: dict[SystemStreamPartition, str | None]) -> int:
        return self.builder.catch_up(read, until) if self.builder is not None else 0

    def read_through(self, ends: dict[SystemStreamPartition, str]) -> None:
        if self.builder is not None:
            self.builder.read_through(ends)

    def view(self) -> KeyValueStore:
        return self._view

    def begin_batch(self, batch_id: int | None) -> None:
        if self._wanted_before != batch_id:
            self._wanted_before = batch_id
            self._stale = True

    def read_batch(self) -> int | None:
        # Only what this batch opened: a batch that never read the store needs nothing pinned on a replay.
        return self.publication.batch if self.publication is not None and not self._stale else None

    def pin(self, batch: int) -> None:
        self._wanted_before = batch + 1
        self._stale = True

    def commit(self, batch_id: int, generation: int = 0) -> dict[str, Any]:
        entry: dict[str, Any] = {"batch": batch_id}
        if self.builder is not None:
            builder_entry = self.builder.commit(batch_id)
            snapshot = self.builder.serving_snapshot()
            bootstrapped = self.builder.bootstrap.done
            # Publish a changed snapshot, and the same one again when the bootstrap completed in a batch that
            # changed nothing (it read past a never-delivered offset, or an empty stream): tasks that commit on
            # their own schedule wait for a bootstrapped publication before they read main input.
            if snapshot is not None and (snapshot != self._last_published
                                         or (bootstrapped and not self._published_bootstrapped)):
                self.board.publish(Publication(
                    store=self.context.spec.name, batch=batch_id, snapshot=snapshot, version=self.builder.serving,
                    bootstrapped=bootstrapped, applied=self.builder.applied,
                    offsets=dict(self.builder.offsets), generation=generation))
                self._last_published = snapshot
                self._published_bootstrapped = bootstrapped
            entry["builder"] = builder_entry
            entry["published"] = self._last_published
            entry["published_bootstrapped"] = self._published_bootstrapped
        if self.publication is not None:
            entry["read"] = {"batch": self.publication.batch, "snapshot": self.publication.snapshot}
            self._read = entry["read"]
        # The next batch reads what was published up to this one (read lazily: the builder may
        # still be committing this batch on another executor). The snapshot is let go until then,
        # so a task that moves to another worker process does not keep an old copy alive.
        self._wanted_before = batch_id + 1
        self._stale = True
        self._release()
        return entry

    def committed(self, batch_id: int) -> None:
        if self.builder is not None:
            self.builder.committed()

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = _builder_status(self.builder) if self.builder is not None else {}
        out["builder"] = self.builder is not None
        out["reading"] = None if self.publication is None else {"batch": self.publication.batch,
                                                                 "version": self.publication.version,
                                                                 "bootstrapped": self.publication.bootstrapped}
        return out

    def close(self) -> None:
        self._release()
        self._reader_snapshots.close()
        if self.builder is not None:
            self.builder.close()
        if self._empty is not None:
            self._empty.close()
            self._empty = None
        self._stale = True


def _builder_status(builder: StoreBuilder) -> dict[str, Any]:
    return {"applied": builder.applied, "skipped": builder.skipped, "serving_version": builder.serving,
            "building_version": builder.building, "bootstrapped": builder.bootstrap.done,
            "recovery": None if builder.decision is None else builder.decision.action.value,
            "offsets": dict(builder.offsets)}


class DefaultAdjunctStoreManagerFactory:
    """The built-in managers: :class:`BroadcastStoreManager` for broadcast streams, else partitioned."""

    def get_adjunct_store_manager(self, context: AdjunctStoreContext) -> AdjunctStoreManager:
        if context.spec.broadcast:
            return BroadcastStoreManager(context)
        return PartitionedStoreManager(context)
