"""AzureLock: a mutual-exclusion lock across processes, backed by a lease on one blob.

``lock(timeout_s)`` retries the lease with a short random sleep until it gets it or times out;
while held, a background thread renews the lease every third of its duration, so a lock may be
held longer than the lease. If renewal fails the lock is marked lost and :meth:`unlock` raises
:class:`LeaseLostError`, so the caller learns that exclusion may have been broken.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from sparza.azure import StorageAccount, resolve_storage_account
from sparza.coordination.errors import LeaseHeldError, LeaseLostError, LockTimeoutError
from sparza.coordination.lease import LeaseBlobManager

__all__ = ["AzureLock"]


class AzureLock:
    """A named lock for one job. Use ``with lock:`` or ``lock()``/``unlock()``.

    Not re-entrant: a second ``lock()`` by the same holder waits like anyone else.
    """

    def __init__(self, blob_client: Any, name: str, *, lease_duration_s: int = 15,
                 default_timeout_s: float = 60.0) -> None:
        self.name = name
        self._lease = LeaseBlobManager(blob_client, lease_duration_s)
        self._default_timeout_s = default_timeout_s
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: str | None = None

    @classmethod
    def for_job(cls, config: Mapping[str, str], name: str, *, account: StorageAccount | None = None,
                default_timeout_s: float = 60.0) -> AzureLock:
        """The lock ``name`` of the job in ``config`` (blob ``locks/<name>`` in its coordination container)."""
        from sparza.coordination.clients import CoordinationClients
        from sparza.coordination.settings import CoordinationConfig

        cfg = CoordinationConfig.from_config(config)
        clients = CoordinationClients.create(cfg, account or resolve_storage_account(config))
        clients.ensure()
        return cls(clients.blob(clients.resources.lock_blob(name)), name, lease_duration_s=cfg.lease_duration_s,
                   default_timeout_s=default_timeout_s)

    @property
    def locked(self) -> bool:
        """True while we hold the lock."""
        return self._lease.held() and self._lost is None

    def lock(self, timeout_s: float | None = None) -> None:
        """Block until the lock is ours; :class:`LockTimeoutError` after ``timeout_s`` seconds."""
        timeout = self._default_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._lease.acquire()
                break
            except LeaseHeldError:
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(self.name, timeout) from None
                time.sleep(random.uniform(0.05, 0.3))
        self._lost = None
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name=f"azurelock-{self.name}", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        period = self._lease.duration_s / 3
        while not self._stop.wait(period):
            try:
                self._lease.renew()
            except LeaseLostError as exc:
                self._lost = exc.reason
                return
            except Exception:
                continue  # transient storage error: the next try may still be in time

    def unlock(self) -> None:
        """Release the lock; :class:`LeaseLostError` if it was lost while held (exclusion not guaranteed)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        lost = self._lost
        if lost is None and self._lease.lease_id is not None and not self._lease.held():
            lost = "not renewed within its duration"
        self._lease.release()
        if lost is not None:
            raise LeaseLostError(self._lease.blob_name, lost)

    def __enter__(self) -> AzureLock:
        self.lock()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.unlock()
