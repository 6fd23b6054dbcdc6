"""AzureJobCoordinator: processors of one job share its tasks through a blob lease and an Azure Table.

Protocol (``docs/coordination.md`` has the full version with bounds):

1. Every processor heartbeats its row in the processor table and polls the job-model blob.
2. Whoever holds the leader lease is leader; non-leaders try to take it whenever it is free.
3. The leader judges liveness from the service timestamps of the rows (its own fresh heartbeat is
   the reference "now"), and when the live set differs from the participants of the model in
   force it publishes a new version (balanced, sticky) with barrier ``START``.
4. A participant that sees ``START v``: stops its tasks (``on_job_model_expired``), then writes
   its row in partition *v* (the acknowledgement).
5. When every participant acknowledged, the leader writes ``END v``; each participant adopts
   *v* (``on_new_job_model``) and deletes its older rows. A participant that dies during the
   barrier, or a barrier not done within ``barrier.timeout.ms``, is superseded by version *v+1*.
6. A new leader takes a higher term and supersedes any barrier of its predecessor; the store
   refuses writes from older terms, so a deposed leader cannot publish.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from sparza.azure import StorageAccount, StorageRequests, error_code, resolve_storage_account
from sparza.coordination._azure import storage_call
from sparza.coordination.assignment import assign_tasks
from sparza.coordination.clients import CoordinationClients
from sparza.coordination.errors import StaleLeaderError
from sparza.coordination.jobmodel import JobModel
from sparza.coordination.leader import AzureLeaderElector
from sparza.coordination.lease import LeaseBlobManager
from sparza.coordination.listener import JobCoordinatorListener
from sparza.coordination.naming import CoordinationResources
from sparza.coordination.scheduler import Scheduler
from sparza.coordination.settings import CoordinationConfig
from sparza.coordination.store import BarrierState, CoordinatorState
from sparza.coordination.table import UNASSIGNED, live_processors, version_key
from sparza.metrics import MetricsRegistry

__all__ = ["AzureJobCoordinator"]

log = logging.getLogger(__name__)

_HEARTBEAT = "heartbeat"
_LEADER_CHECK = "leader-check"
_RENEW = "lease-renew"
_POLL = "jobmodel-poll"
_LEAD = "leader-duties"


class AzureJobCoordinator:
    """Coordinates one processor of a job with its peers through Azure storage.

    ``tasks`` is the job's full task list (every processor passes the same). The listener hears
    ``on_job_model_expired`` / ``on_new_job_model`` around every change and ``on_coordinator_stop``
    once. Storage errors never stop the coordinator: actions retry at their next period.
    """

    def __init__(self, processor_id: str, config: Mapping[str, str], tasks: Iterable[str],
                 listener: JobCoordinatorListener, *, account: StorageAccount | None = None,
                 metrics: MetricsRegistry | None = None) -> None:
        self.processor_id = processor_id
        self.settings = CoordinationConfig.from_config(config)
        self._tasks = sorted(set(tasks))
        self._listener = listener
        registry = metrics or MetricsRegistry()
        self._clients = CoordinationClients.create(self.settings, account or resolve_storage_account(config),
                                                   StorageRequests(registry, "coordination"))
        self._lease = LeaseBlobManager(self._clients.blob(self._clients.resources.leader_blob),
                                       self.settings.lease_duration_s)
        # Public so callers (status, tests) can ask about leadership; the coordinator drives it.
        self.elector = AzureLeaderElector(self._lease, processor_id, listener=_ElectorAdapter(self))
        self._scheduler = Scheduler(f"coordinator-{processor_id}", on_error=self._on_action_error)
        self._lock = threading.RLock()
        self._listener_lock = threading.Lock()  # listener calls never overlap
        self._adopted: JobModel | None = None
        self._acked = 0
        self._seen_excluded = 0
        self._expired = False
        self._hb_partition = UNASSIGNED
        self._barrier: tuple[int, float] | None = None  # leader: (version, monotonic start)
        self._needs_ensure = False
        self._stopped = False
        self._last_beat_ok = time.monotonic()  # own deadline only: when did a heartbeat last succeed
        self._cut_off = False  # tasks stopped because we could not heartbeat
        group = "coordination"
        self._m_models = registry.counter(group, "job-models-adopted")
        self._m_rebalances = registry.counter(group, "rebalances")  # adopted models after the first
        self._m_published = registry.counter(group, "job-models-published")
        self._m_elected = registry.counter(group, "leader-elections-won")
        self._m_errors = registry.counter(group, "storage-errors")
        self._m_beats = registry.counter(group, "heartbeats")
        self._m_version = registry.gauge(group, "job-model-version")  # the generation (fencing token)
        self._m_leader = registry.gauge(group, "is-leader")
        self._m_leader.set(0)
        self._m_barrier = registry.timer(group, "barrier-ms")  # START seen (tasks stopped) to END (adopted)
        self._m_leader_barrier = registry.timer(group, "leader-barrier-ms")  # published to every ack seen
        self._barrier_seen: float | None = None  # monotonic time this processor stopped for a barrier

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Create the job's resources if needed, write the first heartbeat and start the scheduler.

        Raises :class:`~sparza.errors.StorageUnavailableError` when storage cannot be reached at all.
        """
        s = self.settings
        self._clients.ensure()
        self._lease.ensure_blob()
        self._beat()
        sch = self._scheduler
        sch.every(_HEARTBEAT, s.heartbeat_interval_ms, self._beat, initial_delay_ms=s.heartbeat_interval_ms)
        sch.every(_LEADER_CHECK, s.leader_check_interval_ms, self._leader_check)
        sch.every(_RENEW, s.lease_renew_interval_ms, self.elector.renew, initial_delay_ms=s.lease_renew_interval_ms)
        sch.every(_POLL, s.jobmodel_poll_interval_ms, self._poll)
        sch.every(_LEAD, s.liveness_check_interval_ms, self._lead)
        sch.start()

    def stop(self) -> None:
        """Leave gracefully: stop tasks, release leadership, delete our rows (peers rebalance at once)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._scheduler.stop()
        self._expire()
        try:
            self.elector.resign()
        except Exception as exc:
            log.warning("could not release the leader lease on stop: %s", exc)
        try:
            self._clients.table.delete_processor(self.processor_id)
        except Exception as exc:
            log.warning("could not delete the rows of %s on stop: %s", self.processor_id, exc)
        with self._listener_lock:
            self._listener.on_coordinator_stop()

    @property
    def job_model(self) -> JobModel | None:
        """The model this processor adopted last (None before the first one, or when left out)."""
        return self._adopted

    @property
    def resources(self) -> CoordinationResources:
        """The job's container, blobs and table names."""
        return self._clients.resources

    def blob(self, name: str) -> Any:
        """A client for blob ``name`` in the job's coordination container (e.g. fenced task checkpoints)."""
        return self._clients.blob(name)

    # --- member notes (MemberNotes) ---------------------------------------------------------------
    def write_note(self, text: str) -> None:
        """Replace this processor's note (one blob; raises :class:`~sparza.errors.StorageUnavailableError`). Works
        before :meth:`start` too (creating the job's container if needed), so a note from an earlier run is
        replaced before peers can see this processor in a job model."""
        blob = self.blob(self.resources.note_blob(self.processor_id))
        with storage_call("writing a member note"):
            try:
                blob.upload_blob(text.encode(), overwrite=True)
            except ResourceNotFoundError:  # a new job: no coordination container yet
                self._clients.ensure()
                blob.upload_blob(text.encode(), overwrite=True)

    def clear_note(self) -> None:
        """Delete this processor's note; none there is fine."""
        with storage_call("deleting a member note"), contextlib.suppress(ResourceNotFoundError):
            self.blob(self.resources.note_blob(self.processor_id)).delete_blob()

    def read_notes(self, processor_ids: list[str]) -> dict[str, str]:
        """The notes of ``processor_ids`` that have one (one read each)."""
        notes: dict[str, str] = {}
        for pid in processor_ids:
            with storage_call("reading a member note"), contextlib.suppress(ResourceNotFoundError):
                notes[pid] = self.blob(self.resources.note_blob(pid)).download_blob().readall().decode()
        return notes

    def is_leader(self) -> bool:
        """True while this processor is the leader."""
        return self.elector.am_i_leader()

    # --- actions every processor runs -----------------------------------------------------------
    def _ensure_if_needed(self) -> None:
        if self._needs_ensure:
            self._clients.ensure()
            self._lease.ensure_blob()
            self._needs_ensure = False

    def _beat(self) -> None:
        self._ensure_if_needed()
        self._clients.table.heartbeat(self._hb_partition, self.processor_id, self.is_leader())
        self._last_beat_ok = time.monotonic()
        self._m_beats.inc()

    def _check_cut_off(self) -> None:
        """Stop our tasks when we could not heartbeat for a liveness timeout: the leader gives them away."""
        silent_ms = (time.monotonic() - self._last_beat_ok) * 1000
        if silent_ms > self.settings.liveness_timeout_ms and self._adopted is not None and not self._expired:
            log.warning("processor %s could not heartbeat for %.1f s: stopping its tasks", self.processor_id,
                        silent_ms / 1000)
            self._cut_off = True
            self._expire()

    def _leader_check(self) -> None:
        self._ensure_if_needed()
        if self.elector.am_i_leader():
            self.elector.check_held()
            return
        self.elector.check_held()  # a lapsed lease we still remember is dropped, with its listener call
        self.elector.try_become_leader()

    def _poll(self) -> None:
        if self._stopped:
            return
        self._check_cut_off()
        self._ensure_if_needed()
        state = self._clients.store.read().state
        self.elector.observe_term(state.term)
        model = state.current
        if model is None:
            return
        v = model.version
        member = self.processor_id in state.processors
        adopted_v = self._adopted.version if self._adopted else 0
        if state.barrier is BarrierState.START and member and v > self._acked:
            self._acknowledge(v)
        elif state.barrier is BarrierState.START and not member:
            self._expire()  # our tasks may move: stop before their new owners start at END
        elif self._cut_off and state.barrier is BarrierState.END and v == adopted_v and member \
                and not self._check_still_silent():
            self._cut_off = False  # storage answers again and our model is still in force: resume it
            self._adopt(model)
        elif state.barrier is BarrierState.END and v > adopted_v:
            if member:
                if self._acked < v:  # the barrier ended without us seeing START: our ack is known
                    self._acknowledge(v)
                self._adopt(model)
            elif self._seen_excluded < v:
                self._seen_excluded = v
                self._expire()  # left out of the model in force: stop, keep heartbeating, rejoin later
                with self._lock:
                    self._adopted = None

    def _check_still_silent(self) -> bool:
        return (time.monotonic() - self._last_beat_ok) * 1000 > self.settings.liveness_timeout_ms

    def _acknowledge(self, version: int) -> None:
        if self._barrier_seen is None:
            self._barrier_seen = time.monotonic()
        self._expire()
        partition = version_key(version)
        self._clients.table.heartbeat(partition, self.processor_id, self.is_leader())
        with self._lock:
            self._acked = max(self._acked, version)
            self._hb_partition = partition
        if self.is_leader():
            self._scheduler.run_soon(_LEAD)

    def _adopt(self, model: JobModel) -> None:
        with self._lock:
            self._adopted = model
            self._expired = False
            self._cut_off = False
        if self._m_models.count:
            self._m_rebalances.inc()
        self._m_models.inc()
        self._m_version.set(model.version)
        if self._barrier_seen is not None:
            self._m_barrier.update((time.monotonic() - self._barrier_seen) * 1000.0)
            self._barrier_seen = None
        try:
            self._clients.table.delete_processor(self.processor_id, keep=[version_key(model.version)])
        except Exception as exc:  # leftovers are harmless; the leader cleans them up later
            log.debug("cleanup of old rows failed: %s", exc)
        log.info("processor %s adopted job model %d: %s", self.processor_id, model.version,
                 model.tasks_of(self.processor_id))
        with self._listener_lock:
            self._listener.on_new_job_model(model)

    def _expire(self) -> None:
        with self._lock:
            if self._adopted is None or self._expired:
                return
            self._expired = True
        with self._listener_lock:
            self._listener.on_job_model_expired()

    # --- leader ---------------------------------------------------------------------------------
    def _lead(self) -> None:
        if self._stopped:
            return
        self.elector.check_held()
        if not self.elector.am_i_leader():
            return
        term = self.elector.term
        table = self._clients.table
        # Our own heartbeat, read back: a fresh service timestamp is the reference "now" for liveness.
        reference = table.heartbeat_and_read(self._hb_partition, self.processor_id, True).timestamp
        rows = table.list_all()
        alive = set(live_processors(rows, reference, self.settings.liveness_timeout_ms))
        alive.add(self.processor_id)
        snap = self._clients.store.read()
        state = snap.state
        self.elector.observe_term(state.term)
        try:
            if state.term > term or (state.term == term and state.leader not in (None, self.processor_id)):
                raise StaleLeaderError(term, state.term)
            self._lead_step(term, state, rows, alive)
        except StaleLeaderError as exc:
            log.warning("processor %s: %s; resigning", self.processor_id, exc)
            self._barrier = None
            self.elector.resign()  # the lease may still be ours on the service: release it for the next leader

    def _lead_step(self, term: int, state: CoordinatorState, rows: list[Any], alive: set[str]) -> None:
        participants = set(state.processors)
        if state.current is not None and state.barrier is BarrierState.START and state.term == term:
            v = state.version
            acked = {r.processor_id for r in rows if r.partition == version_key(v)}
            if participants <= acked:
                self._end_barrier(term, v)
                return
            started = self._barrier[1] if self._barrier and self._barrier[0] == v else None
            if started is None:
                self._barrier = (v, time.monotonic())
                started = self._barrier[1]
            dead = participants - alive
            timed_out = (time.monotonic() - started) * 1000 > self.settings.barrier_timeout_ms
            if dead or timed_out:
                # Participants that died or never acknowledged sit this round out; alive ones rejoin later.
                keep = alive - (participants - acked) if timed_out else alive
                log.info("barrier %d abandoned (dead=%s, timed out=%s); publishing a newer version",
                         v, sorted(dead), timed_out)
                self._publish(term, rows, keep or {self.processor_id})
            return
        if state.current is None or state.term < term or state.barrier is not BarrierState.END \
                or participants != alive:
            self._publish(term, rows, alive)
        else:
            self._cleanup(rows, state, alive)

    def _publish(self, term: int, rows: list[Any], participants: set[str]) -> None:
        floor = max([r.version for r in rows] + [self._acked])

        def change(state: CoordinatorState) -> CoordinatorState:
            in_force = state.effective
            version = max(state.version, floor) + 1
            assignments = assign_tasks(self._tasks, participants, in_force.assignments if in_force else None)
            return state.with_changes(leader=self.processor_id, current=JobModel(version, assignments),
                                      previous=in_force, barrier=BarrierState.START,
                                      processors=sorted(participants))

        written = self._clients.store.update(term, change, leader=self.processor_id)
        if written is not None and written.current is not None:
            self._barrier = (written.version, time.monotonic())
            self._m_published.inc()
            log.info("leader %s (term %d) published job model %d for %s", self.processor_id, term,
                     written.version, sorted(participants))
            self._scheduler.run_soon(_POLL)

    def _end_barrier(self, term: int, version: int) -> None:
        def change(state: CoordinatorState) -> CoordinatorState | None:
            if state.version != version or state.barrier is not BarrierState.START:
                return None
            return state.with_changes(barrier=BarrierState.END)

        if self._clients.store.update(term, change, leader=self.processor_id) is not None:
            if self._barrier is not None and self._barrier[0] == version:
                self._m_leader_barrier.update((time.monotonic() - self._barrier[1]) * 1000.0)
            self._barrier = None
            log.info("leader %s: barrier %d complete", self.processor_id, version)
            self._scheduler.run_soon(_POLL)

    def _cleanup(self, rows: list[Any], state: CoordinatorState, alive: set[str]) -> None:
        """Delete participants' rows of older versions and rows of processors long dead (Samza kept them)."""
        in_force = state.version
        long_dead_ms = 3 * self.settings.liveness_timeout_ms
        newest = max((r.timestamp for r in rows), default=None)
        for row in rows:
            stale_version = row.partition != UNASSIGNED and row.version < in_force and row.processor_id in alive
            long_dead = newest is not None and (newest - row.timestamp).total_seconds() * 1000 > long_dead_ms
            if (stale_version and row.processor_id in state.processors) or long_dead:
                self._clients.table.delete(row.partition, row.processor_id)

    # --- elector callbacks and errors -----------------------------------------------------------
    def _became_leader(self, term: int) -> None:
        self._barrier = None
        self._m_elected.inc()
        self._m_leader.set(1)
        self._scheduler.run_soon(_LEAD)

    def _lost_leadership(self, reason: str) -> None:
        self._barrier = None
        self._m_leader.set(0)

    def _on_action_error(self, action: str, exc: BaseException) -> None:
        self._m_errors.inc()
        if isinstance(exc, ResourceNotFoundError) and error_code(exc) in (
                "ContainerNotFound", "TableNotFound", "ResourceNotFound", "BlobNotFound"):
            self._needs_ensure = True
        log.warning("coordinator %s: %s failed: %s: %s", self.processor_id, action, type(exc).__name__, exc)


class _ElectorAdapter:
    """Routes elector events to the coordinator without making them part of its public API."""

    def __init__(self, coordinator: AzureJobCoordinator) -> None:
        self._c = coordinator

    def on_become_leader(self, term: int) -> None:
        self._c._became_leader(term)

    def on_leadership_lost(self, reason: str) -> None:
        self._c._lost_leadership(reason)
