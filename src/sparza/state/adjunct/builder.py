"""Building an adjunct store from its stream: apply, version, commit, recover.

One :class:`StoreBuilder` per (store, task) that applies the stream: every task for a partitioned
store, the builder task for a broadcast store. It

* applies each message through the store's extractor: key ``None`` skips, value ``None`` deletes;
  messages at or before the last applied offset of their SSP are skipped, so a replayed batch (or
  an overlapping catch-up read) never applies anything twice;
* for a versioned dataset, writes into the *building* version while readers see the *serving*
  one. An end-of-dataset marker (a message of type END_OF_STREAM) ends the version in its
  partition: that partition's later messages go to the next version. The version is sealed once
  every partition the store reads has sent its marker, and the switch happens at the next commit,
  i.e. at a batch boundary; the old version is then deleted;
* at commit flushes, uploads a snapshot of every changed version (SEP-003, incremental), writes
  each version's local marker and returns the JSON entry for the task checkpoint. Cleanup of the
  previous snapshots runs one commit later, once the checkpoint that replaced them is durable;
* at restore applies the recovery table (:mod:`sparza.state.adjunct.recovery`).
"""

from __future__ import annotations

import bisect
import logging
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from sparza.config import Config
from sparza.deadletters import DROP_DESERIALIZATION
from sparza.errors import SerdeError
from sparza.serde import Serde
from sparza.state.adjunct.extractor import DefaultKeyValueExtractor, KeyValueExtractor
from sparza.state.adjunct.offsets import StreamAccess
from sparza.state.adjunct.recovery import (
    LocalCopy,
    RecoveryAction,
    RecoveryDecision,
    decide_recovery,
    judge_local_copy,
)
from sparza.state.adjunct.settings import AdjunctStoreSpec
from sparza.state.adjunct.slot import StoreMarker, StoreSlot, store_serdes
from sparza.state.adjunct.snapshots import SnapshotStore
from sparza.state.kv import InMemoryStore, KeyValueStore, safe_dir_name
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStreamPartition

__all__ = ["BootstrapProgress", "EnvelopeReader", "StoreBuilder"]

_log = logging.getLogger(__name__)
_WRITE_BATCH = 10_000  # entries per RocksDB write batch (~1-2 MB of buffered puts)
_USER = MessageType.USER
_BYTES = {bytes}
_BYTES_OR_NONE = {bytes, type(None)}

EnvelopeReader = Callable[[SystemStreamPartition, str | None, str | None], Iterable[IncomingMessageEnvelope]]
"""``read(ssp, start, end)``: messages of ``ssp`` in ``[start, end)`` (start None: the oldest)."""


class BootstrapProgress:
    """How far a bootstrap store is: the newest offsets seen when its bootstrap began (per SSP, None
    for an empty partition) and whether every SSP reached them. Checkpointed with the store, so a
    restart continues the same bootstrap instead of starting over."""

    def __init__(self, targets: dict[str, str | None] | None = None, done: bool = False) -> None:
        self.targets = targets
        self.done = done

    def to_json(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"targets": self.targets, "done": self.done}

    @classmethod
    def from_json(cls, body: dict[str, Any] | None) -> BootstrapProgress:
        """Parse :meth:`to_json`'s output (None: not started)."""
        if not body:
            return cls()
        targets = body.get("targets")
        return cls(None if targets is None else {str(k): v for k, v in targets.items()}, bool(body.get("done")))


class StoreBuilder:
    """Applies one adjunct stream to one store of one task (see the module docstring).

    ``ssps`` are the SSPs this builder applies (its partition, or the broadcast partitions): used
    for bootstrap targets. ``snapshots`` is None when the store is not backed up.
    """

    def __init__(self, spec: AdjunctStoreSpec, config: Config, task_name: str, base_dir: str | Path,
                 snapshots: SnapshotStore | None, extractor: KeyValueExtractor, access: StreamAccess,
                 ssps: list[SystemStreamPartition]) -> None:
        self.spec = spec
        self.config = config
        self.task_name = task_name
        self.base_dir = Path(base_dir)
        self.snapshots = snapshots if spec.backed_up else None
        self.extractor = extractor
        self.access = access
        self.ssps = list(ssps)
        self._ssp_set = set(self.ssps)
        self.read_ends: dict[str, str] = {}
        """Per SSP, the (exclusive) end offset up to which a batch read it (see :meth:`read_through`)."""
        self.offsets: dict[str, str] = {}
        """SSP (``system.stream#N``) → last offset applied to the store."""
        self.applied = 0
        """Messages written (puts and deletes) since the store was created (checkpointed)."""
        self.skipped = 0
        """Messages skipped in this process: already applied, no key from the extractor, or dropped."""
        self.dropped = 0
        """Messages dropped because they did not deserialize (``task.drop.deserialization.errors``)."""
        self._drop_bad = DROP_DESERIALIZATION.get(config)
        self._key_serde, self._msg_serde = store_serdes(config, spec.name)
        self._pending: dict[int, dict[bytes, bytes | None]] = {}
        """Buffered writes per version (a partition past its marker writes the next version)."""
        self._pending_count = 0
        self._last_keys: dict[str, tuple[str, Any]] = {}
        # the per-message path is a bootstrap's whole cost: what it looks up, once
        system = spec.stream.system
        self._offset_key: Callable[[str], Any] = lambda offset: access.offset_key(system, offset)
        self._plain_extractor = type(extractor) is DefaultKeyValueExtractor
        self._ssp_obj: SystemStreamPartition | None = None
        self._ssp_key = ""
        self.decision: RecoveryDecision | None = None
        self.bootstrap = BootstrapProgress()
        self.last_batch: int | None = None
        self._slots: dict[int, StoreSlot] = {}
        self._snapshot_ids: dict[int, str | None] = {}
        self.serving: int | None = None if spec.versioned else 0
        self.building = 1 if spec.versioned else 0
        self.sealed: int | None = None
        """A version sealed by end-of-dataset markers in this batch: it becomes serving at commit."""
        self.ssp_versions: dict[str, int] = {}
        """Versioned datasets: SSPs that sent their marker for ``building`` → the version they write
        now (absent: ``building``). ``building`` is sealed when every SSP the store reads is past it."""
        self._uncleaned: list[str] = []
        self._retired: list[str] = []
        self._empty: KeyValueStore | None = None

    # --- slots -------------------------------------------------------------------------------------
    def _slot(self, version: int) -> StoreSlot:
        slot = self._slots.get(version)
        if slot is None:
            dir_task = self.task_name if not self.spec.versioned else f"{self.task_name}.v{version}"
            slot_name = self.spec.name if not self.spec.versioned else f"{self.spec.name}.v{version}"
            slot = StoreSlot(self.spec.name, slot_name, self.config, dir_task, self.base_dir, self.spec.persistent)
            self._slots[version] = slot
            self._snapshot_ids.setdefault(version, None)
        return slot

    def _top_version(self) -> int:
        return max([self.building, *self.ssp_versions.values()])

    def _live_versions(self) -> list[int]:
        versions = set(range(self.building, self._top_version() + 1))
        if self.serving is not None:
            versions.add(self.serving)
        if self.sealed is not None:
            versions.add(self.sealed)
        return sorted(versions)

    def _drop_slot(self, version: int, *, retire_snapshot: bool) -> None:
        slot = self._slots.pop(version, None)
        snapshot = self._snapshot_ids.pop(version, None)
        if slot is not None:
            slot.wipe()
        if retire_snapshot and snapshot is not None:
            self._retired.append(snapshot)

    def serving_store(self) -> KeyValueStore:
        """The bytes store readers see: the serving version (an empty store before the first complete
        version). Buffered writes are applied first, so a partitioned store shows this batch's changes."""
        self._write_pending()
        if self.serving is None:
            if self._empty is None:
                self._empty = InMemoryStore(self.spec.name)
            return self._empty
        return self._slot(self.serving).store

    def serving_snapshot(self) -> str | None:
        """The snapshot-index id of the serving version at the last commit (None: none yet)."""
        return None if self.serving is None else self._snapshot_ids.get(self.serving)

    def serving_path(self) -> Path | None:
        """Local directory of the serving version (for disk-usage reports)."""
        return None if self.serving is None else self._slot(self.serving).path

    # --- applying messages ---------------------------------------------------------------------------
    def _is_applied(self, ssp_key: str, offset: str) -> bool:
        last = self.offsets.get(ssp_key)
        if last is None:
            return False
        cached = self._last_keys.get(ssp_key)
        if cached is None or cached[0] != last:
            cached = (last, self._offset_key(last))
        key = self._offset_key(offset)
        if key <= cached[1]:
            return True
        self._last_keys[ssp_key] = (offset, key)  # the caller records ``offset`` as applied next
        return False

    def apply(self, envelope: IncomingMessageEnvelope) -> bool:
        """Apply one message of the store's stream; False when it was skipped as already applied."""
        ssp = envelope.ssp
        if ssp is self._ssp_obj:  # a reader hands out one SSP object for a run of its envelopes
            ssp_key = self._ssp_key
        else:
            ssp_key = self._ssp_key = str(ssp)
            self._ssp_obj = ssp
        offset = envelope.offset
        if ssp_key in self.offsets and self._is_applied(ssp_key, offset):
            self.skipped += 1
            return False
        if envelope.type == _USER:
            if self._plain_extractor:
                key, value = envelope.key, envelope.message
            else:
                key = self.extractor.get_key(envelope)
                value = None if key is None else self.extractor.get_value(envelope)
            if key is None:
                self.skipped += 1
            else:
                try:
                    raw_key = key if type(key) is bytes else _encode(self._key_serde, key)
                    raw_value = value if value is None or type(value) is bytes else _encode(self._msg_serde, value)
                except SerdeError:
                    if not self._drop_bad:
                        raise
                    self.skipped += 1
                    self.dropped += 1
                else:
                    # Buffered and written as one batch: a later write of a key replaces an
                    # earlier one of the same batch, so order is kept. None deletes.
                    version = self.ssp_versions.get(ssp_key, self.building) if self.ssp_versions else self.building
                    writes = self._pending.get(version)
                    if writes is None:
                        writes = self._pending[version] = {}
                    writes[raw_key] = raw_value
                    self._pending_count += 1
                    self.applied += 1
                    if self._pending_count >= _WRITE_BATCH:
                        self._write_pending()
        elif envelope.type == MessageType.END_OF_STREAM and self.spec.versioned:
            self._end_of_dataset(ssp_key)
        # Other control messages (watermarks, end-of-stream of a non-versioned stream) carry no data.
        self.offsets[ssp_key] = offset
        return True

    def apply_rows(self, ssp: SystemStreamPartition, offsets: Sequence[str], keys: Sequence[Any],
                   values: Sequence[Any], timestamps: Sequence[int | None], types: Sequence[int]) -> int:
        """Apply consecutive messages of one SSP, given as columns, in offset order (as every reader
        delivers an SSP's messages); exactly what :meth:`apply` of each would do, at a fraction of the
        cost for the common case (the default extractor, byte keys and values). Returns how many were
        not skipped as already applied."""
        n = len(offsets)
        if not n:
            return 0
        if ssp is self._ssp_obj:
            ssp_key = self._ssp_key
        else:
            ssp_key = self._ssp_key = str(ssp)
            self._ssp_obj = ssp
        start = self._first_new(ssp_key, offsets) if ssp_key in self.offsets else 0
        self.skipped += start
        data_only = types.count(_USER) == n
        lo = start
        while lo < n:
            # the next run of user messages [lo, hi) (at most one write batch), then the control message at hi
            hi = min(n if data_only else _next_control(types, lo, n), lo + _WRITE_BATCH)
            if hi > lo:
                self._apply_user_run(ssp, ssp_key, offsets, keys, values, timestamps, lo, hi)
            if hi < n and types[hi] != _USER:
                self.apply(IncomingMessageEnvelope(ssp, offsets[hi], keys[hi], values[hi], timestamps[hi], 0,
                                                   MessageType(types[hi])))
                hi += 1
            lo = hi
        return n - start

    def _first_new(self, ssp_key: str, offsets: Sequence[str]) -> int:
        """Index of the first offset after the last one applied (offsets ascending)."""
        last = self._offset_key(self.offsets[ssp_key])
        if self._offset_key(offsets[0]) > last:
            return 0
        return bisect.bisect_right(range(len(offsets)), last, key=lambda i: self._offset_key(offsets[i]))

    def _apply_user_run(self, ssp: SystemStreamPartition, ssp_key: str, offsets: Sequence[str], keys: Sequence[Any],
                        values: Sequence[Any], timestamps: Sequence[int | None], lo: int, hi: int) -> None:
        ks = keys[lo:hi]
        vs = values[lo:hi]
        if not (self._plain_extractor and set(map(type, ks)) == _BYTES and set(map(type, vs)) <= _BYTES_OR_NONE):
            # an extractor, or objects to serialize: message by message, as apply() does
            for i in range(lo, hi):
                self.apply(IncomingMessageEnvelope(ssp, offsets[i], keys[i], values[i], timestamps[i]))
            return
        version = self.ssp_versions.get(ssp_key, self.building) if self.ssp_versions else self.building
        count = hi - lo
        if self._pending:
            writes = self._pending.get(version)
            if writes is None:
                writes = self._pending[version] = {}
            # in order: a later write of a key replaces an earlier one; None deletes
            writes.update(zip(ks, vs, strict=True))
            self._pending_count += count
        else:
            # nothing buffered: the run is one write batch. Deduplicated first: a store's put_all applies
            # its deletes after its puts, so a key put again after a delete must not reach it twice.
            slot = self._slot(version)
            slot.store.put_all(dict(zip(ks, vs, strict=True)))
            slot.dirty = True
        self.applied += count
        self.offsets[ssp_key] = offsets[hi - 1]
        if self._pending_count >= _WRITE_BATCH:
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        for version, writes in sorted(self._pending.items()):
            if writes:
                slot = self._slot(version)
                slot.store.put_all(writes)
                slot.dirty = True
        self._pending = {}
        self._pending_count = 0

    def _end_of_dataset(self, ssp_key: str) -> None:
        """``ssp_key`` finished the version it was writing; seal the oldest versions every SSP the
        store reads has finished (the newest of them is served from the next commit)."""
        self._write_pending()
        top = self._top_version()
        version = self.ssp_versions.get(ssp_key, self.building) + 1
        if version > top:
            self._drop_slot(version, retire_snapshot=True)  # a leftover of a crashed attempt
            self._slot(version).dirty = True
        self.ssp_versions[ssp_key] = version
        expected = {str(s) for s in self.ssps} | {ssp_key}
        complete_below = min(self.ssp_versions.get(s, self.building) for s in expected)
        if complete_below <= self.building:
            waiting = sorted(s for s in expected if self.ssp_versions.get(s, self.building) == self.building)
            _log.info("adjunct store %s: %s finished version %d; it is sealed when %s send their end-of-dataset "
                      "marker too", self.spec.name, ssp_key, self.building, ", ".join(waiting))
            return
        # Versions building .. complete_below-1 are complete: serve the newest, drop the others unserved.
        superseded = [v for v in (self.sealed, *range(self.building, complete_below - 1)) if v is not None]
        for old in superseded:
            _log.info("adjunct store %s: version %d superseded before it was served", self.spec.name, old)
            self._drop_slot(old, retire_snapshot=True)
        self.sealed = complete_below - 1
        self.building = complete_below
        self.ssp_versions = {s: v for s, v in self.ssp_versions.items() if v > self.building}
        _log.info("adjunct store %s: version %d sealed; serving from the next batch", self.spec.name, self.sealed)

    def catch_up(self, read: EnvelopeReader, until: dict[SystemStreamPartition, str | None]) -> int:
        """Apply what the store misses before the batch's first offsets ``until`` (per SSP).

        After a forced bootstrap or a restore the store may be behind the offsets the runtime
        reads from; this reads the gap directly from the stream. Returns messages applied.
        """
        count = 0
        for ssp, end in until.items():
            start = self.offsets.get(str(ssp))
            if end is None or (start is not None and self.access.compare(ssp.system, start, end) >= 0):
                continue
            for envelope in read(ssp, start, end):
                count += int(self.apply(envelope))
        return count

    def read_through(self, ends: dict[SystemStreamPartition, str]) -> None:
        """The batch read these SSPs up to these (exclusive) offsets: everything before them that is
        ever delivered was applied, which completes a bootstrap whose target offset is never
        delivered itself (a Kafka transaction marker)."""
        for ssp, end in ends.items():
            if ssp in self._ssp_set:
                self.read_ends[str(ssp)] = end

    # --- bootstrap -------------------------------------------------------------------------------------
    def _refresh_bootstrap(self) -> None:
        if not self.spec.bootstrap:
            self.bootstrap.done = True
            return
        if self.bootstrap.done:
            return
        if self.bootstrap.targets is None:
            newest = self.access.newest_offsets(self.spec.stream)
            self.bootstrap.targets = {str(ssp): newest.get(ssp.partition) for ssp in self.ssps}
        system = self.spec.stream.system
        self.bootstrap.done = all(
            target is None
            or (self.offsets.get(key) is not None and self.access.compare(system, self.offsets[key], target) >= 0)
            or (self.read_ends.get(key) is not None and self.access.compare(system, self.read_ends[key], target) > 0)
            for key, target in self.bootstrap.targets.items())
        if self.bootstrap.done:
            _log.info("adjunct store %s: bootstrap complete (%d messages applied)", self.spec.name, self.applied)

    # --- commit ---------------------------------------------------------------------------------------
    def commit(self, batch_id: int) -> dict[str, Any]:
        """Finish batch ``batch_id``: switch a sealed version, snapshot changed versions, write
        markers; returns the checkpoint entry. Deferred cleanup of the previous commit runs first."""
        if self.snapshots is not None:
            # The checkpoint of the previous commit is durable (we are past its batch), so the
            # snapshots it replaced can go. Broadcast readers of this batch read the previous
            # publication, which these calls keep.
            for index_id in self._uncleaned:
                self.snapshots.cleanup(index_id)
            for index_id in self._retired:
                self.snapshots.delete_snapshot(index_id)
        self._uncleaned = []
        self._retired = []
        self._write_pending()
        if self.sealed is not None:
            old, self.serving, self.sealed = self.serving, self.sealed, None
            if old is not None:
                self._drop_slot(old, retire_snapshot=True)
            _log.info("adjunct store %s: now serving version %d", self.spec.name, self.serving)
        for version in self._live_versions():
            slot = self._slot(version)
            if not slot.persistent:
                continue
            if self.snapshots is not None and (slot.dirty or self._snapshot_ids.get(version) is None):
                checkpoint_dir = slot.checkpoint()
                try:
                    index_id = self.snapshots.upload(slot.slot_name, checkpoint_dir,
                                                     self._snapshot_ids.get(version), str(batch_id))
                finally:
                    slot.drop_checkpoint()
                self._snapshot_ids[version] = index_id
                self._uncleaned.append(index_id)
            else:
                slot.store.flush()
            slot.dirty = False
        self.last_batch = batch_id
        self._refresh_bootstrap()
        for version in self._live_versions():
            slot = self._slot(version)
            slot.write_marker(StoreMarker(batch_id, self._snapshot_ids.get(version), self.offsets))
            if slot.persistent:
                # Release RocksDB's lock between batches: Spark may run this task's next batch in
                # another Python worker on this host. The store reopens on first use.
                slot.close()
        return self.entry()

    def committed(self) -> None:
        """The task checkpoint holding this builder's last :meth:`commit` entry is durable: make the
        snapshots uploaded in that commit permanent at once (committed means permanent, even if no
        further commit comes before ``blob.store.ttl.days`` pass). Deleting what they replaced
        still waits for the next commit, when no reader can use it any more."""
        if self.snapshots is not None:
            for index_id in self._uncleaned:
                self.snapshots.make_permanent(index_id)

    def entry(self) -> dict[str, Any]:
        """The JSON-able checkpoint entry of this store (as of the last commit)."""
        return {
            "batch": self.last_batch,
            "offsets": dict(sorted(self.offsets.items())),
            "versions": {str(v): self._snapshot_ids.get(v) for v in self._live_versions()},
            "serving": self.serving,
            "building": self.building,
            "ssp_versions": dict(sorted(self.ssp_versions.items())),
            "applied": self.applied,
            "bootstrap": self.bootstrap.to_json(),
            "uncleaned": list(self._uncleaned),
            "retired": list(self._retired),
        }

    # --- restore ---------------------------------------------------------------------------------------
    def restore(self, entry: dict[str, Any] | None) -> RecoveryDecision:
        """Bring the local store to the committed state ``entry`` (None: the task never committed).

        A no-op when this builder is already exactly at ``entry`` and its local copies are still on disk
        (the runtime may restore before every batch; a memory store must not lose its data then). A
        copy deleted under a live worker (the process outlived its host's state dir) is restored again:
        opening it would create an empty store."""
        if (entry and entry.get("batch") is not None and self.decision is not None and not self._pending
                and self.sealed is None and self.last_batch == int(entry["batch"])
                and self.offsets == {str(k): str(v) for k, v in entry.get("offsets", {}).items()}
                and all(not slot.persistent or slot.exists_locally() for slot in self._slots.values())):
            return self.decision
        self._pending = {}
        self._pending_count = 0
        self._close_stores()
        self._slots.clear()
        self._snapshot_ids.clear()
        self.sealed = None
        committed = entry if entry and entry.get("batch") is not None else None
        if committed is not None:
            self.last_batch = int(committed["batch"])
            self.offsets = {str(k): str(v) for k, v in committed.get("offsets", {}).items()}
            versions = {int(v): s for v, s in committed.get("versions", {}).items()}
            self.serving = committed.get("serving")
            self.building = int(committed.get("building", self.building))
            self.ssp_versions = {str(k): int(v) for k, v in (committed.get("ssp_versions") or {}).items()}
            self.applied = int(committed.get("applied", 0))
            self.bootstrap = BootstrapProgress.from_json(committed.get("bootstrap"))
            self._uncleaned = list(committed.get("uncleaned", []))
            self._retired = list(committed.get("retired", []))
        else:
            self.last_batch = None
            self.offsets = {}
            versions = {1: None} if self.spec.versioned else {0: None}
            self.serving = None if self.spec.versioned else 0
            self.building = 1 if self.spec.versioned else 0
            self.ssp_versions = {}
            self.applied = 0
            self.bootstrap = BootstrapProgress()
            self._uncleaned, self._retired = [], []
        local_states: dict[int, LocalCopy] = {}
        for version, snapshot in versions.items():
            slot = self._slot(version)
            self._snapshot_ids[version] = snapshot
            marker = None if committed is None else StoreMarker(self.last_batch or 0, snapshot, self.offsets)
            local_states[version] = judge_local_copy(slot.exists_locally(), slot.read_marker(), marker)
        if all(s is LocalCopy.VALID for s in local_states.values()):
            local = LocalCopy.VALID
        elif all(s is LocalCopy.NONE for s in local_states.values()):
            local = LocalCopy.NONE
        else:
            local = LocalCopy.INVALID
        restorable = (self.snapshots is not None and committed is not None
                      and all(versions.get(v) is not None for v in versions))
        decision = decide_recovery(persistent=self.spec.persistent, bootstrap=self.spec.bootstrap,
                                   reset_offset=self.spec.reset_offset, local=local,
                                   committed_snapshot=_first(versions.values()) if restorable else None)
        entry_uncleaned = list(self._uncleaned)
        self._apply_decision(decision, local_states)
        if self.snapshots is not None and committed is not None:
            # A crash between the checkpoint write and committed() left these with their TTL.
            for index_id in entry_uncleaned:
                if index_id in self._uncleaned:  # not replaced by a deleted-blob recovery
                    self.snapshots.make_permanent(index_id)
        self._remove_strays()
        self.decision = decision
        _log.info("adjunct store %s of %s: %s (%s)", self.spec.name, self.task_name, decision.action.value,
                  decision.reason)
        return decision

    def _apply_decision(self, decision: RecoveryDecision, local_states: dict[int, LocalCopy]) -> None:
        action = decision.action
        if action is RecoveryAction.CONTINUE_LOCAL:
            return
        if action is RecoveryAction.RESTORE_SNAPSHOT:
            assert self.snapshots is not None
            for version, slot in sorted(self._slots.items()):
                if local_states.get(version) is LocalCopy.VALID:
                    continue
                slot.wipe()
                snapshot = self._snapshot_ids[version]
                assert snapshot is not None
                restored = self.snapshots.restore(snapshot, slot.path)
                if restored != snapshot:
                    # Deleted blobs were re-uploaded: the fresh snapshot is committed with the next
                    # checkpoint, and made permanent then (the old one is not cleaned up any more).
                    self._uncleaned = [i for i in self._uncleaned if i != snapshot] + [restored]
                self._snapshot_ids[version] = restored
            return
        # Re-create: wipe every version; a forced bootstrap also forgets the offsets.
        for version in list(self._slots):
            self._drop_slot(version, retire_snapshot=False)
        self.serving = None if self.spec.versioned else 0
        self.building = 1 if self.spec.versioned else 0
        self.ssp_versions = {}
        self._slot(self.building).dirty = True
        if action is RecoveryAction.CREATE_BOOTSTRAP:
            self.offsets = {}
            self.applied = 0
            self.bootstrap = BootstrapProgress()

    def _remove_strays(self) -> None:
        """Delete version directories of this task that no live version owns (crash leftovers)."""
        if not self.spec.versioned or not self.spec.persistent:
            return
        parent = self.base_dir / safe_dir_name(self.spec.name)
        pattern = re.compile(re.escape(safe_dir_name(self.task_name)) + r"\.v(\d+)(\.checkpoint)?$")
        live = set(self._live_versions())
        for child in parent.glob(safe_dir_name(self.task_name) + ".v*"):
            match = pattern.match(child.name)
            if match and int(match.group(1)) not in live:
                shutil.rmtree(child, ignore_errors=True)

    def close(self) -> None:
        """Close every local store and the backup's threads (idempotent). The next ``restore``
        then rebuilds from the entry, whatever this builder held."""
        self.decision = None
        self._close_stores()
        if self.snapshots is not None:
            self.snapshots.close()

    def _close_stores(self) -> None:
        for slot in self._slots.values():
            slot.close()
        if self._empty is not None:
            self._empty.close()
            self._empty = None


def _next_control(types: Sequence[int], lo: int, n: int) -> int:
    """Index of the first control message (type != USER) in ``types[lo:n]``, else ``n``."""
    for i in range(lo, n):
        if types[i] != _USER:
            return i
    return n


def _first(values: Iterable[str | None]) -> str | None:
    return next(iter(values), None)


def _encode(serde: Serde, value: Any) -> bytes:
    """Bytes from the stream are stored as they are (already in the store's format); objects an
    extractor made go through the store's serde."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return serde.to_bytes(value)
