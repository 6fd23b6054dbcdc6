"""LeaseBlobManager: acquire, renew, release and break a lease on one blob, with our own expiry check.

Azure refuses a renewal once another client has taken the lease, but Azurite accepts a renewal
after expiry when another client modified the blob (Azurite #2352). So the manager times its own
lease with its own clock (:func:`~sparza.clock.monotonic_ms` by default: only ever comparing two
readings of the same clock in the same process; tests pass a :class:`~sparza.clock.ManualClock`): a
renewal *sent* after the lease could have expired is not trusted, the lease is dropped and
:class:`LeaseLostError` raised, whatever the service answers.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobLeaseClient

from sparza.azure import error_code
from sparza.clock import Clock, monotonic_ms
from sparza.coordination._azure import storage_call
from sparza.coordination.errors import LeaseHeldError, LeaseLostError

__all__ = ["LeaseBlobManager", "LeaseInfo"]

_FREE_STATES = ("available", "expired", "broken")


class LeaseInfo:
    """What the service reports about a blob's lease, plus its metadata and ETag."""

    __slots__ = ("etag", "last_modified", "metadata", "state")

    def __init__(self, state: str, metadata: dict[str, str], etag: str, last_modified: Any) -> None:
        self.state = state
        self.metadata = metadata
        self.etag = etag
        self.last_modified = last_modified

    @property
    def free(self) -> bool:
        """True when nobody holds the lease (available, expired or broken)."""
        return self.state in _FREE_STATES


class LeaseBlobManager:
    """Lease operations on one blob (created empty when missing). Thread-safe.

    ``duration_s`` is 15-60 (Azure's limits). Failures are typed: :class:`LeaseHeldError` when another
    holder has the lease, :class:`LeaseLostError` when ours is gone; never ``None``/``False``. ``clock``
    times our own lease (see the module docstring).
    """

    def __init__(self, blob_client: Any, duration_s: int, *, clock: Clock = monotonic_ms) -> None:
        if not 15 <= duration_s <= 60:
            raise ValueError(f"lease duration must be 15-60 s, got {duration_s}")
        self._blob = blob_client
        self.duration_s = duration_s
        self.clock = clock
        self._lock = threading.RLock()
        self._lease: BlobLeaseClient | None = None
        self._sent_at = 0  # clock time (ms) the last successful acquire/renew was *sent*

    @property
    def blob_name(self) -> str:
        """The leased blob's name."""
        return str(self._blob.blob_name)

    @property
    def lease_id(self) -> str | None:
        """Our lease id while we believe we hold the lease."""
        with self._lock:
            return self._lease.id if self._lease is not None else None

    def held(self) -> bool:
        """True when we hold the lease and it cannot have expired yet by our own clock."""
        with self._lock:
            return self._lease is not None and self.clock() - self._sent_at < self.duration_s * 1000

    def remaining_s(self) -> float:
        """Seconds our lease is still guaranteed for (0 when not held)."""
        with self._lock:
            if self._lease is None:
                return 0.0
            return max(0.0, self.duration_s - (self.clock() - self._sent_at) / 1000)

    def ensure_blob(self) -> None:
        """Create the (empty) blob if it does not exist; the lease needs an existing blob."""
        with storage_call(f"create {self.blob_name}"):
            try:
                self._blob.upload_blob(b"", overwrite=False)
            except ResourceExistsError:
                pass  # exists (409 BlobAlreadyExists) or leased by someone (412): both fine
            except HttpResponseError as exc:
                if exc.status_code != 412:
                    raise

    def acquire(self, proposed_lease_id: str | None = None) -> str:
        """Take the lease and return its id; :class:`LeaseHeldError` if someone else holds it."""
        lease_id = proposed_lease_id or str(uuid.uuid4())
        with self._lock:
            sent = self.clock()
            for attempt in range(2):
                try:
                    with storage_call(f"acquire lease on {self.blob_name}"):
                        lease = BlobLeaseClient(self._blob, lease_id=lease_id)
                        lease.acquire(lease_duration=self.duration_s)
                    break
                except ResourceNotFoundError:
                    if attempt:
                        raise
                    self.ensure_blob()
                except ResourceExistsError as exc:
                    raise LeaseHeldError(self.blob_name) from exc
                except HttpResponseError as exc:
                    if error_code(exc) in ("LeaseAlreadyPresent", "LeaseIdMismatchWithLeaseOperation"):
                        raise LeaseHeldError(self.blob_name) from exc
                    raise
            self._lease = lease
            self._sent_at = sent
            return lease_id

    def renew(self) -> None:
        """Renew our lease; :class:`LeaseLostError` if we do not hold it, it may have expired, or Azure refuses."""
        with self._lock:
            lease = self._lease
            if lease is None:
                raise LeaseLostError(self.blob_name, "not held")
            sent = self.clock()
            if sent - self._sent_at >= self.duration_s * 1000:
                # The service might accept this late renewal (Azurite does); we must not trust it.
                self._lease = None
                raise LeaseLostError(self.blob_name,
                                     f"not renewed within its {self.duration_s}s duration (renewal would be late)")
            try:
                with storage_call(f"renew lease on {self.blob_name}"):
                    lease.renew()
            except HttpResponseError as exc:
                self._lease = None
                raise LeaseLostError(self.blob_name, f"renewal refused ({error_code(exc) or exc.status_code})") from exc
            self._sent_at = sent

    def release(self) -> None:
        """Give the lease up so another processor can take it at once (a no-op when not held)."""
        with self._lock:
            lease, self._lease = self._lease, None
            if lease is None:
                return
            try:
                with storage_call(f"release lease on {self.blob_name}"):
                    lease.release()
            except HttpResponseError:
                pass  # already expired or taken: it is not ours either way

    def break_lease(self, break_period_s: int = 0) -> None:
        """Break whoever's lease is on the blob (operator action; the holder's next renewal fails)."""
        with storage_call(f"break lease on {self.blob_name}"):
            try:
                BlobLeaseClient(self._blob).break_lease(lease_break_period=break_period_s)
            except HttpResponseError as exc:
                if error_code(exc) != "LeaseNotPresentWithLeaseOperation":
                    raise
        with self._lock:
            self._lease = None

    def forget(self) -> None:
        """Drop our lease locally without telling the service (after a pause, when it may be gone)."""
        with self._lock:
            self._lease = None

    def info(self) -> LeaseInfo:
        """The blob's lease state, metadata and ETag as the service reports them now."""
        with storage_call(f"read {self.blob_name}"):
            props = self._blob.get_blob_properties()
        return LeaseInfo(str(props.lease.state or "available"), dict(props.metadata or {}), props.etag,
                         props.last_modified)

    def set_metadata(self, metadata: dict[str, str], etag: str) -> str:
        """Write the blob's metadata under our lease, only if its ETag is still ``etag``; returns the new ETag.

        :class:`LeaseLostError` when the service refuses (lease gone, or someone wrote in between).
        """
        with self._lock:
            lease = self._lease
            if lease is None or not self.held():
                raise LeaseLostError(self.blob_name, "not held")
            try:
                with storage_call(f"write metadata of {self.blob_name}"):
                    result = self._blob.set_blob_metadata(metadata, lease=lease, etag=etag,
                                                          match_condition=MatchConditions.IfNotModified)
            except HttpResponseError as exc:
                self._lease = None
                raise LeaseLostError(self.blob_name,
                                     f"conditional write refused ({error_code(exc) or exc.status_code})") from exc
            return str(result["etag"])
