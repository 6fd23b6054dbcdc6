"""A read-only view of a job's coordination state, for ``sparza coordinator status`` and tests.

Heartbeat ages are given relative to the newest row timestamp in the table, so they compare the
storage service's timestamps only (no local clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sparza.azure import StorageAccount, resolve_storage_account
from sparza.coordination.clients import CoordinationClients
from sparza.coordination.lease import LeaseBlobManager
from sparza.coordination.settings import CoordinationConfig
from sparza.coordination.store import CoordinatorState
from sparza.coordination.table import ProcessorEntity, live_processors

__all__ = ["CoordinationStatus", "ProcessorStatus", "read_status"]


@dataclass(frozen=True)
class ProcessorStatus:
    """One processor as the table shows it."""

    processor_id: str
    partition: str
    last_heartbeat: datetime
    age_s: float
    alive: bool
    is_leader: bool


@dataclass(frozen=True)
class CoordinationStatus:
    """Leader, lease, job model and processors of one job."""

    container: str
    table: str
    leader: str | None
    term: int
    lease_state: str
    state: CoordinatorState
    processors: list[ProcessorStatus]


def read_status(config: Mapping[str, str], *, account: StorageAccount | None = None) -> CoordinationStatus:
    """Read the job's coordination state (nothing is written)."""
    cfg = CoordinationConfig.from_config(config)
    clients = CoordinationClients.create(cfg, account or resolve_storage_account(config))
    lease = LeaseBlobManager(clients.blob(clients.resources.leader_blob), cfg.lease_duration_s)
    try:
        info = lease.info()
        lease_state, meta = info.state, info.metadata
    except Exception:
        lease_state, meta = "missing", {}
    state = clients.store.read().state
    try:
        rows = clients.table.list_all()
    except Exception:
        rows = []
    newest = max((r.timestamp for r in rows), default=None)
    alive = live_processors(rows, newest, cfg.liveness_timeout_ms) if newest else {}
    latest: dict[str, ProcessorEntity] = {}
    for row in rows:
        cur = latest.get(row.processor_id)
        if cur is None or row.timestamp > cur.timestamp:
            latest[row.processor_id] = row
    procs = [ProcessorStatus(r.processor_id, r.partition, r.timestamp,
                             (newest - r.timestamp).total_seconds() if newest else 0.0,
                             r.processor_id in alive, r.is_leader)
             for r in sorted(latest.values(), key=lambda r: r.processor_id)]
    leader = meta.get("leader") if lease_state == "leased" else None
    return CoordinationStatus(clients.resources.container, clients.resources.table, leader,
                              int(meta.get("term", "0") or 0), lease_state, state, procs)
