"""TaskAdjunctManager: the adjunct stores of one task instance, as the runtime drives them.

Per batch the runtime calls, in order: ``restore(entry)`` when the task (re)starts, with the
``"adjunct"`` entry of its last committed checkpoint; optionally ``begin_batch(batch_id)``;
``on_envelope`` for every adjunct message of the batch *before* the main messages (it returns True
for adjunct messages, which are never delivered to the task); ``get_store(name)`` from the task;
``commit(batch_id)`` after the task's batch, putting the returned entry into the task checkpoint.

Visibility of a change read in batch ``b``: partitioned stores show it to main messages of batch
``b``; broadcast stores from batch ``b + 1`` (every task reads the snapshot published before its
batch); a dataset version sealed in batch ``b`` is served from batch ``b + 1``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparza.blobstore import BlobStoreManager
from sparza.config import Config
from sparza.errors import ConfigError
from sparza.metrics import MetricsRegistry
from sparza.state.adjunct.builder import EnvelopeReader
from sparza.state.adjunct.container import ContainerSnapshotCache
from sparza.state.adjunct.errors import UnknownAdjunctStoreError
from sparza.state.adjunct.offsets import AdminStreamAccess, StreamAccess
from sparza.state.adjunct.publication import PublicationBoard
from sparza.state.adjunct.settings import AdjunctConfig, AdjunctStoreSpec, container_store_dir
from sparza.state.adjunct.stores import (
    AdjunctStoreContext,
    AdjunctStoreManager,
    AdjunctStoreManagerFactory,
    DefaultAdjunctStoreManagerFactory,
    SupportsCommitted,
    SupportsPinnedReads,
    SupportsReadThrough,
    SupportsRows,
)
from sparza.state.kv import KeyValueStore
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStreamPartition
from sparza.systems import load_object

__all__ = ["ENTRY_VERSION", "TaskAdjunctManager", "broadcast_bootstrap_published", "task_partition"]

_log = logging.getLogger(__name__)
ENTRY_VERSION = 1
_PUBLISH_EVERY = 1024
_PARTITION = re.compile(r"^Partition (\d+)$")


def task_partition(task_name: str) -> int | None:
    """The partition number of a ``Partition N`` task (None for other names)."""
    match = _PARTITION.match(task_name)
    return int(match.group(1)) if match else None


class TaskAdjunctManager:
    """The adjunct stores of one task (see the module docstring for the call order).

    ``input_ssps`` (optional) are the task's SSPs; without them a partitioned store applies
    partition ``N`` of task ``Partition N`` and a broadcast store the partitions listed in
    ``task.broadcast.inputs``. ``access`` (optional) answers offset comparisons and newest offsets;
    by default it asks each system's admin.
    """

    def __init__(self, task_name: str, config: Mapping[str, str], base_dir: str | Path,
                 blob_store: BlobStoreManager | None, job_name: str, job_id: str, *,
                 input_ssps: list[SystemStreamPartition] | None = None, access: StreamAccess | None = None,
                 metrics: MetricsRegistry | None = None) -> None:
        self.task_name = task_name
        self.config = Config.of(config)
        self.base_dir = Path(base_dir)
        self.adjunct_config = AdjunctConfig.from_config(self.config)
        self.access = access or AdminStreamAccess(self.config)
        self.container_cache = ContainerSnapshotCache(container_store_dir(self.config, self.base_dir), self.config)
        self._metrics = metrics or MetricsRegistry()
        self._managers: dict[str, AdjunctStoreManager] = {}
        for spec in self.adjunct_config.stores:
            ssps = self._ssps_of(spec, input_ssps)
            context = AdjunctStoreContext(spec, task_name, self.config, self.base_dir, blob_store, job_name, job_id,
                                          self.access, tuple(ssps), self.container_cache)
            self._managers[spec.name] = _factory(spec).get_adjunct_store_manager(context)
        self._by_stream: dict[Any, list[str]] = {}
        for spec in self.adjunct_config.stores:
            self._by_stream.setdefault(spec.stream, []).append(spec.name)
        self._counters: dict[tuple[str, bool], Any] = {}
        # Counted here and added to the metrics every _PUBLISH_EVERY messages and before anyone reads them
        # (commit, status, a new registry): a locked counter per message cost as much as applying it.
        self._counts: dict[str, list[int]] = {name: [0, 0] for name in self._managers}  # [applied, skipped]
        self._uncounted = 0
        self.metrics = self._metrics
        self._by_ssp: dict[SystemStreamPartition, list[tuple[AdjunctStoreManager, list[int]]]] = {}
        self._hot: tuple[SystemStreamPartition | None, list[tuple[AdjunctStoreManager, list[int]]]] = (None, [])
        self._restored = False

    def _ssps_of(self, spec: AdjunctStoreSpec,
                 input_ssps: list[SystemStreamPartition] | None) -> list[SystemStreamPartition]:
        if input_ssps is not None:
            return [s for s in input_ssps if s.system_stream == spec.stream]
        if spec.broadcast:
            return [spec.stream.partition(p) for p in spec.broadcast_partitions]
        partition = task_partition(self.task_name)
        return [] if partition is None else [spec.stream.partition(partition)]

    @property
    def metrics(self) -> MetricsRegistry:
        """Where the counters go (group ``adjunct-<store>``: messages-applied, messages-skipped)."""
        return self._metrics

    @metrics.setter
    def metrics(self, registry: MetricsRegistry) -> None:
        # The runtime may hand a fresh registry per batch; counters follow it.
        if self._counters:
            self._publish_counts()  # what was counted so far belongs to the old registry
        self._metrics = registry
        self._counters = {(name, applied): registry.counter(f"adjunct-{name}",
                                                            "messages-applied" if applied else "messages-skipped")
                          for name in self._managers for applied in (True, False)}

    # --- contract ----------------------------------------------------------------------------------
    def restore(self, entry: dict[str, Any] | None) -> None:
        """Restore every adjunct store from the task checkpoint's ``"adjunct"`` entry (None: none)."""
        stores = (entry or {}).get("stores", {})
        for name, manager in self._managers.items():
            manager.restore(stores.get(name))
        self._restored = True

    def is_adjunct(self, envelope: IncomingMessageEnvelope) -> bool:
        """True when the envelope belongs to an adjunct stream (without applying it)."""
        return bool(self._by_ssp.get(envelope.ssp)) or envelope.ssp.system_stream in self._by_stream

    def on_envelope(self, envelope: IncomingMessageEnvelope) -> bool:
        """Apply an adjunct message to its store(s) and return True; False for any other message."""
        ssp = envelope.ssp
        hot_ssp, targets = self._hot
        if ssp is not hot_ssp:  # a reader hands out one SSP object for a run of its envelopes
            found = self._by_ssp.get(ssp)
            if found is None:
                found = self._by_ssp[ssp] = [(self._managers[name], self._counts[name])
                                             for name in self._by_stream.get(ssp.system_stream, [])]
            targets = found
            self._hot = (ssp, targets)
        if not targets:
            return False
        if not self._restored:
            self.restore(None)
        for manager, counts in targets:
            counts[0 if manager.process(envelope) else 1] += 1
        self._uncounted += 1
        if self._uncounted >= _PUBLISH_EVERY:
            self._publish_counts()
        return True

    def on_rows(self, ssp: SystemStreamPartition, offsets: Sequence[str], keys: Sequence[Any], values: Sequence[Any],
                timestamps: Sequence[int | None], types: Sequence[int]) -> bool:
        """:meth:`on_envelope` for consecutive messages of one SSP given as columns (raw keys and values,
        offsets ascending, types as ints), in one call: what a bootstrap's thousands of messages per
        batch cost is then mostly RocksDB's. False (nothing applied) when ``ssp`` is not an adjunct input."""
        names = self._by_stream.get(ssp.system_stream)
        if not names:
            return False
        if not self._restored:
            self.restore(None)
        n = len(offsets)
        for name in names:
            manager = self._managers[name]
            counts = self._counts[name]
            if isinstance(manager, SupportsRows):
                done = manager.process_rows(ssp, offsets, keys, values, timestamps, types)
            else:
                done = sum(bool(manager.process(IncomingMessageEnvelope(
                    ssp, offsets[i], keys[i], values[i], timestamps[i], 0, MessageType(types[i]))))
                    for i in range(n))
            counts[0] += done
            counts[1] += n - done
        self._publish_counts()
        return True

    def _publish_counts(self) -> None:
        for name, counts in self._counts.items():
            applied, skipped = counts
            if applied:
                self._counters[(name, True)].inc(applied)
            if skipped:
                self._counters[(name, False)].inc(skipped)
            counts[0] = counts[1] = 0
        self._uncounted = 0

    def get_store(self, name: str) -> KeyValueStore:
        """The read-only view of adjunct store ``name``; writes raise AdjunctStoreReadOnlyError."""
        manager = self._managers.get(name)
        if manager is None:
            raise UnknownAdjunctStoreError(name, list(self._managers))
        return manager.view()

    def commit(self, batch_id: int, generation: int = 0) -> dict[str, Any]:
        """Commit every adjunct store for batch ``batch_id`` as coordinator generation ``generation``; returns
        the JSON-able checkpoint entry."""
        if not self._restored:
            self.restore(None)
        self._publish_counts()
        stores = {name: manager.commit(batch_id, generation) for name, manager in self._managers.items()}
        for name, manager in self._managers.items():
            status = manager.status()
            self.metrics.gauge(f"adjunct-{name}", "bootstrapped").set(bool(status.get("bootstrapped", True)))
        return {"version": ENTRY_VERSION, "batch": batch_id, "stores": stores}

    def committed(self, batch_id: int) -> None:
        """The task checkpoint holding :meth:`commit`'s entry for ``batch_id`` is durable: the
        snapshots of that commit become permanent now, not at the next commit (which may come after
        ``blob.store.ttl.days``, or never, while gc runs)."""
        for manager in self._managers.values():
            if isinstance(manager, SupportsCommitted):
                manager.committed(batch_id)

    def close(self) -> None:
        """Close every store (idempotent)."""
        self._publish_counts()
        for manager in self._managers.values():
            manager.close()

    # --- extras the runtime may use ------------------------------------------------------------------
    @property
    def store_names(self) -> list[str]:
        """Names of this task's adjunct stores."""
        return list(self._managers)

    def manager(self, name: str) -> AdjunctStoreManager:
        """The per-store manager (tests, tools)."""
        manager = self._managers.get(name)
        if manager is None:
            raise UnknownAdjunctStoreError(name, list(self._managers))
        return manager

    def begin_batch(self, batch_id: int | None, pinned: Mapping[str, int] | None = None) -> None:
        """Batch ``batch_id`` starts: broadcast stores read the snapshot published before it (None: the
        newest, for a task that commits on its own schedule); ``pinned`` (store -> publication batch, from
        :meth:`reads` of an earlier attempt) makes a replay read exactly what the first attempt read.

        Optional: without it a task reads the snapshot published before the batch after its last
        commit, which is the same thing when the task commits every batch.
        """
        if not self._restored:
            self.restore(None)
        for name, manager in self._managers.items():
            manager.begin_batch(batch_id)
            if pinned and name in pinned and isinstance(manager, SupportsPinnedReads):
                manager.pin(int(pinned[name]))

    def reads(self) -> dict[str, int]:
        """Per broadcast store, the publication this batch reads (what :meth:`begin_batch` pins on a replay)."""
        out: dict[str, int] = {}
        for name, manager in self._managers.items():
            if isinstance(manager, SupportsPinnedReads):
                batch = manager.read_batch()
                if batch is not None:
                    out[name] = batch
        return out

    def catch_up(self, read: EnvelopeReader, until: dict[SystemStreamPartition, str | None]) -> int:
        """Read and apply, per adjunct SSP, what its store misses before the batch's start offsets
        ``until`` (after a forced bootstrap the store restarts from the oldest offset while the
        runtime's own offsets have moved on). Returns the messages applied."""
        if not self._restored:
            self.restore(None)
        total = 0
        for name, manager in self._managers.items():
            spec = self.adjunct_config.store(name)
            assert spec is not None
            mine = {ssp: end for ssp, end in until.items() if ssp.system_stream == spec.stream}
            if mine:
                total += manager.catch_up(read, mine)
        return total

    def read_through(self, ends: dict[SystemStreamPartition, str]) -> None:
        """The batch read these adjunct SSPs up to these (exclusive) end offsets: passed to every
        manager of their stream that can use it (:class:`SupportsReadThrough`)."""
        for name, manager in self._managers.items():
            spec = self.adjunct_config.store(name)
            assert spec is not None
            mine = {ssp: end for ssp, end in ends.items() if ssp.system_stream == spec.stream}
            if mine and isinstance(manager, SupportsReadThrough):
                manager.read_through(mine)

    def bootstrap_complete(self) -> bool:
        """True when every bootstrap store this task builds has reached its bootstrap target."""
        return all(bool(m.status().get("bootstrapped", True)) for m in self._managers.values())

    def status(self) -> dict[str, dict[str, Any]]:
        """Per store: bootstrap state, versions, counts, recovery action."""
        self._publish_counts()
        return {name: manager.status() for name, manager in self._managers.items()}


def _factory(spec: AdjunctStoreSpec) -> AdjunctStoreManagerFactory:
    if not spec.manager_factory:
        return DefaultAdjunctStoreManagerFactory()
    key = f"stores.{spec.name}.adstore.manager.factory"
    target = load_object(spec.manager_factory, key)
    factory = target() if isinstance(target, type) else target
    if not isinstance(factory, AdjunctStoreManagerFactory):
        raise ConfigError(key, spec.manager_factory,
                          "an AdjunctStoreManagerFactory (an object with get_adjunct_store_manager(context))")
    return factory


def broadcast_bootstrap_published(config: Config, stream: Any, blob_store: BlobStoreManager, job_name: str,
                                  job_id: str) -> bool:
    """True when every bootstrapped broadcast store bound to ``stream`` has published a snapshot taken after its
    bootstrap completed: from then on a reader task's main input may flow. Tasks that commit on their own
    schedule (containers) ask this, since no common batch number says the builder is done."""
    for spec in AdjunctConfig.from_config(config).stores:
        if spec.stream != stream or not spec.broadcast or not spec.bootstrap:
            continue
        newest = PublicationBoard(blob_store, job_name, job_id, spec.builder_task, spec.name).latest_before(None)
        if newest is None or not newest.bootstrapped:
            return False
    return True
