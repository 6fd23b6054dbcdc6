"""ProcessorTable: one Azure Table row per (job-model version, processor) carrying heartbeats.

As in the seed, PartitionKey is the job-model version the row belongs to (``UNASSIGNED`` before
a processor's first model) and RowKey the processor id. Inserting the row of version *v* is a
processor's barrier acknowledgement of *v*. A heartbeat rewrites the row so the **service** stamps
a new ``Timestamp``; liveness compares those service timestamps with each other only (see
:func:`live_processors`), never with a local clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import UpdateMode

from sparza.coordination._azure import create_if_missing, storage_call

__all__ = ["UNASSIGNED", "ProcessorEntity", "ProcessorTable", "live_processors", "version_key"]

UNASSIGNED = "UNASSIGNED"
"""PartitionKey of a processor that has not acknowledged any job model yet."""


def version_key(version: int) -> str:
    """The PartitionKey of job-model ``version`` (zero-padded so keys sort by version)."""
    return f"{version:012d}"


def _key_version(key: str) -> int:
    return 0 if key == UNASSIGNED else int(key)


@dataclass(frozen=True, slots=True)
class ProcessorEntity:
    """One processor-table row as read back, with the service's ``timestamp`` of its last write."""

    partition: str
    processor_id: str
    liveness: int
    is_leader: bool
    timestamp: datetime

    @property
    def version(self) -> int:
        """The job-model version of the row's partition (0 for ``UNASSIGNED``)."""
        return _key_version(self.partition)


class ProcessorTable:
    """Row operations on the job's processor table (``azure.data.tables.TableClient``)."""

    def __init__(self, table_client: Any) -> None:
        self._table = table_client
        self._beats = itertools.count(1)

    @property
    def name(self) -> str:
        """The table name."""
        return str(self._table.table_name)

    def ensure(self) -> None:
        """Create the table if missing."""
        create_if_missing(f"table {self.name}", self._table.create_table)

    def heartbeat(self, partition: str, processor_id: str, is_leader: bool) -> None:
        """Write the row (creating it if needed) so the service stamps a new ``Timestamp``."""
        entity = {"PartitionKey": partition, "RowKey": processor_id,
                  "liveness": next(self._beats), "isLeader": is_leader}
        with storage_call(f"heartbeat {processor_id}"):
            self._table.upsert_entity(entity, mode=UpdateMode.REPLACE)

    def heartbeat_and_read(self, partition: str, processor_id: str, is_leader: bool) -> ProcessorEntity:
        """:meth:`heartbeat`, then read the row back: its timestamp is the service's "now" for liveness."""
        self.heartbeat(partition, processor_id, is_leader)
        with storage_call(f"read row {partition}/{processor_id}"):
            return _to_entity(self._table.get_entity(partition, processor_id))

    def delete(self, partition: str, processor_id: str) -> None:
        """Delete one row (no error when it is already gone)."""
        with storage_call(f"delete row {partition}/{processor_id}"):
            try:
                self._table.delete_entity(partition, processor_id)
            except ResourceNotFoundError:
                pass

    def delete_processor(self, processor_id: str, keep: Iterable[str] = ()) -> None:
        """Delete every row of ``processor_id`` except those in the ``keep`` partitions."""
        kept = set(keep)
        for row in self.list_all():
            if row.processor_id == processor_id and row.partition not in kept:
                self.delete(row.partition, processor_id)

    def list_all(self) -> list[ProcessorEntity]:
        """Every row of the table (one per processor and version: small)."""
        with storage_call(f"list {self.name}"):
            return [_to_entity(e) for e in self._table.list_entities()]

    def in_partition(self, partition: str) -> list[ProcessorEntity]:
        """The rows of one job-model version: the processors that acknowledged it."""
        with storage_call(f"query {self.name}"):
            rows = self._table.query_entities("PartitionKey eq @pk", parameters={"pk": partition})
            return [_to_entity(e) for e in rows]


def _to_entity(raw: Any) -> ProcessorEntity:
    return ProcessorEntity(partition=raw["PartitionKey"], processor_id=raw["RowKey"],
                           liveness=int(raw.get("liveness", 0)), is_leader=bool(raw.get("isLeader", False)),
                           timestamp=raw.metadata["timestamp"])


def live_processors(rows: Iterable[ProcessorEntity], reference: datetime, timeout_ms: int) -> dict[str, datetime]:
    """Processors whose newest row the service stamped within ``timeout_ms`` before ``reference``.

    ``reference`` must itself be a service timestamp (the caller's own heartbeat, just read back),
    so the comparison involves the storage service's clock only. Returns processor id → last seen.
    """
    last: dict[str, datetime] = {}
    for row in rows:
        if row.processor_id not in last or row.timestamp > last[row.processor_id]:
            last[row.processor_id] = row.timestamp
    return {pid: ts for pid, ts in last.items() if (reference - ts).total_seconds() * 1000 <= timeout_ms}
