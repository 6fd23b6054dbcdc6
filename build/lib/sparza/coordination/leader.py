"""AzureLeaderElector: the leader is the processor holding the lease on the job's leader blob.

Every new leader takes a **term**: it reads the leader blob's ``term`` metadata and writes
``term + 1`` with its processor id, under its lease and conditional on the blob's ETag. Every
renewal then reads the metadata back and checks that the term and holder are still ours, so a
processor whose lease silently lapsed (a pause, or an emulator that accepts late renewals) finds
out at its next renewal. The term also fences writes to the job-model store (see ``store.py``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from sparza.coordination.errors import LeaseHeldError, LeaseLostError
from sparza.coordination.lease import LeaseBlobManager

__all__ = ["AzureLeaderElector", "LeaderElectorListener"]

log = logging.getLogger(__name__)


class LeaderElectorListener(Protocol):
    """Told when this processor becomes leader (with its term) and when it stops being one."""

    def on_become_leader(self, term: int) -> None:
        """Called once per won election, after the term is recorded in storage."""

    def on_leadership_lost(self, reason: str) -> None:
        """Called when the lease is lost or leadership is resigned; stop all leader work."""


class _NoListener:
    def on_become_leader(self, term: int) -> None:
        pass

    def on_leadership_lost(self, reason: str) -> None:
        pass


class AzureLeaderElector:
    """Leader election on one blob lease. Thread-safe.

    :meth:`try_become_leader` attempts the lease (cheaply: it first reads the lease state);
    :meth:`renew` is called periodically by the owner; :meth:`resign` releases it.
    """

    def __init__(self, lease: LeaseBlobManager, processor_id: str,
                 listener: LeaderElectorListener | None = None) -> None:
        self._lease = lease
        self.processor_id = processor_id
        self._listener: LeaderElectorListener = listener or _NoListener()
        self._lock = threading.RLock()
        self._term = 0
        self._leading = False  # True only once the term is recorded: the lease alone is not leadership
        self._seen_term = 0  # highest term seen anywhere, so terms keep growing even if storage lost them

    def set_listener(self, listener: LeaderElectorListener) -> None:
        """Replace the listener."""
        self._listener = listener

    @property
    def term(self) -> int:
        """Our current leader term (0 when we never led)."""
        return self._term

    def am_i_leader(self) -> bool:
        """True once our term is recorded, while we hold the lease and it cannot have expired by our clock."""
        return self._leading and self._lease.held()

    def current_leader(self) -> tuple[str | None, int]:
        """``(processor id, term)`` recorded on the leader blob, or ``(None, term)`` when the lease is free."""
        info = self._lease.info()
        term = int(info.metadata.get("term", "0") or 0)
        return (None if info.free else info.metadata.get("leader")), term

    def try_become_leader(self) -> bool:
        """Take the lease if it is free; True when we are leader afterwards."""
        with self._lock:
            if self._leading and self._lease.held():
                return True
            try:
                info = self._lease.info()
            except Exception:
                info = None
            if info is not None and not info.free:
                return False
            try:
                self._lease.acquire()
            except LeaseHeldError:
                return False
            try:
                term = self._take_term()
            except LeaseLostError as exc:
                log.warning("lost the lease while taking a term: %s", exc)
                return False
            except Exception:
                self._lease.release()
                raise
            self._term = term
            self._leading = True
        log.info("processor %s became leader with term %d", self.processor_id, term)
        self._listener.on_become_leader(term)
        return True

    def observe_term(self, term: int) -> None:
        """Remember a term seen elsewhere (the job-model store); our next term will be higher."""
        self._seen_term = max(self._seen_term, term)

    def _take_term(self) -> int:
        info = self._lease.info()
        # Above both the recorded term and any term we have seen: storage that lost the leader blob's
        # metadata (an emulator restart) must not hand out a term a live processor already used.
        term = max(int(info.metadata.get("term", "0") or 0), self._seen_term) + 1
        self._lease.set_metadata({"term": str(term), "leader": self.processor_id}, info.etag)
        return term

    def renew(self) -> None:
        """Renew the lease and verify the recorded term is still ours; on failure, give leadership up."""
        with self._lock:
            if not self._leading or self.lease_id is None:
                return
            try:
                self._lease.renew()
                info = self._lease.info()
                holder, term = info.metadata.get("leader"), int(info.metadata.get("term", "0") or 0)
                if info.free or holder != self.processor_id or term != self._term:
                    self._lease.forget()
                    raise LeaseLostError(self._lease.blob_name,
                                         f"storage records leader {holder!r} term {term}, we are term {self._term}")
            except LeaseLostError as exc:
                self._lost(str(exc))

    @property
    def lease_id(self) -> str | None:
        """Our lease id while leader."""
        return self._lease.lease_id

    def resign(self) -> None:
        """Release the lease so another processor can take over at once."""
        with self._lock:
            was_leader = self._leading
            self._leading = False
            self._lease.release()
        if was_leader:
            self._listener.on_leadership_lost("resigned")

    def _lost(self, reason: str) -> None:
        with self._lock:
            if not self._leading:
                return  # another thread already gave leadership up
            self._leading = False
            self._lease.forget()
        log.warning("processor %s lost leadership: %s", self.processor_id, reason)
        self._listener.on_leadership_lost(reason)

    def check_held(self) -> None:
        """Give leadership up (with the listener call) when our own clock says the lease may have lapsed."""
        if self._leading and not self._lease.held():
            self._lost("lease not renewed in time")

    def blob(self) -> Any:
        """The lease manager (for status and tests)."""
        return self._lease
