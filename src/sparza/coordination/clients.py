"""CoordinationClients: the storage clients of one job's coordination, built only via ``sparza.azure``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparza.azure import StorageAccount, StorageRequests
from sparza.coordination._azure import blob_service, create_if_missing, table_service
from sparza.coordination.naming import CoordinationResources
from sparza.coordination.settings import CoordinationConfig
from sparza.coordination.store import JobModelStore
from sparza.coordination.table import ProcessorTable

__all__ = ["CoordinationClients"]


@dataclass(frozen=True)
class CoordinationClients:
    """The storage clients of one job's coordination, built only through ``sparza.azure``."""

    resources: CoordinationResources
    container: Any
    table: ProcessorTable
    store: JobModelStore

    @classmethod
    def create(cls, cfg: CoordinationConfig, account: StorageAccount,
               requests: StorageRequests | None = None) -> CoordinationClients:
        """Clients for ``cfg``'s job in ``account`` (nothing is created in storage yet); ``requests`` counts what
        they send (lease, blob and table requests)."""
        resources = CoordinationResources.for_job(cfg)
        container = blob_service(account, cfg.request_timeout_ms, requests).get_container_client(resources.container)
        table = ProcessorTable(table_service(account, cfg.request_timeout_ms, requests)
                               .get_table_client(resources.table))
        store = JobModelStore(container.get_blob_client(resources.store_blob))
        return cls(resources, container, table, store)

    def ensure(self) -> None:
        """Create the container and the table if missing (idempotent)."""
        create_if_missing(f"container {self.resources.container}", self.container.create_container)
        self.table.ensure()

    def blob(self, name: str) -> Any:
        """A client for blob ``name`` in the coordination container."""
        return self.container.get_blob_client(name)
