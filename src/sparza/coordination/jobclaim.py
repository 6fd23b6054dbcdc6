"""An exclusive, fenced claim on a job for a standalone processor, kept next to the task checkpoints.

A standalone processor owns every task of its job, so two of them on one job would write the same
outputs, checkpoints and local stores. :class:`JobClaim` makes that impossible: before it runs, a
processor writes a small claim document (holder, host, pid, epoch) with a conditional write, renews
it every ``renew.interval.ms`` with a write conditional on the version it last wrote, and releases
it when it stops. A second processor finds a live claim and is refused (:class:`ClaimHeldError`)
with the holder's name and what to do. A claim not renewed for ``timeout.ms`` (its holder died) is
taken over; the new holder's **epoch** is higher than any before, and the runtime uses it as the
fencing generation of task-checkpoint writes, so the old holder, should it wake up, cannot commit.

Age is measured by the store itself: on Azure the blob's ``Last-Modified`` against the ``Date`` of
the same response (both service time, so no clocks of two hosts are compared); in a local directory
the file's mtime against the local clock. A holder on this host whose process is gone is known to be
dead at once (same boot, pid not running), so a crashed processor restarts without waiting. A processor
that keeps trying also counts a claim as expired once it has seen the very same version of it (same
tag) stay unchanged for ``timeout.ms`` by its own :data:`~sparza.clock.Clock`: that needs no clock but
its own, and lets tests (and :class:`sparza.testing.TestRunner`) move time with a
:class:`~sparza.clock.ManualClock` instead of sleeping.

Backends: :class:`LocalClaimBackend` (numbered files, conditional by linking the next number) and
:class:`AzureClaimBackend` (a blob, ``If-Match`` / ``If-None-Match`` on its ETag).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from sparza.azure import storage_unreachable
from sparza.clock import Clock, monotonic_ms
from sparza.config import INT, define_key
from sparza.coordination.errors import CoordinationError
from sparza.host import fsync_dir, pid_alive

__all__ = [
    "CLAIM_RENEW_INTERVAL_MS",
    "CLAIM_TIMEOUT_MS",
    "AzureClaimBackend",
    "ClaimBackend",
    "ClaimError",
    "ClaimHeldError",
    "ClaimLostError",
    "ClaimRecord",
    "ClaimState",
    "JobClaim",
    "LocalClaimBackend",
]

_log = logging.getLogger(__name__)

KEY_TIMEOUT = "job.coordinator.standalone.claim.timeout.ms"
KEY_RENEW = "job.coordinator.standalone.claim.renew.interval.ms"
CLAIM_TIMEOUT_MS = define_key(KEY_TIMEOUT, 30000,
                              "Standalone: a job claim not renewed for this long belongs to a dead processor and may "
                              "be taken over (bounds how long a crashed processor on another host blocks a new one).",
                              "coordination", kind=INT)
CLAIM_RENEW_INTERVAL_MS = define_key(KEY_RENEW, 5000,
                                     "Standalone: how often the running processor renews its job claim; at most a "
                                     "third of the timeout, so two renewals may fail before the claim lapses.",
                                     "coordination", kind=INT)


class ClaimError(CoordinationError):
    """Root of the job-claim errors (``sparza run`` exits with code 3 on them)."""


@dataclass(frozen=True)
class ClaimRecord:
    """The stored claim: who holds the job (``holder`` processor id, ``host``, ``pid``, ``token`` of this
    acquisition), its fencing ``epoch``, when it was taken (``since_ms``, the holder's clock, shown
    only), how long it lives unrenewed (``timeout_ms``), and whether the holder let it go."""

    job: str
    holder: str
    host: str
    pid: int
    token: str
    epoch: int
    since_ms: int
    timeout_ms: int
    boot_id: str = ""
    released: bool = False
    renewals: int = 0

    def to_json(self) -> bytes:
        """The stored form (sorted-key JSON)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, source: str) -> ClaimRecord:
        """Parse the stored form; unknown fields are ignored."""
        try:
            body = json.loads(data)
            return cls(job=str(body["job"]), holder=str(body["holder"]), host=str(body.get("host", "?")),
                       pid=int(body.get("pid", 0)), token=str(body["token"]), epoch=int(body["epoch"]),
                       since_ms=int(body.get("since_ms", 0)), timeout_ms=int(body["timeout_ms"]),
                       boot_id=str(body.get("boot_id", "")), released=bool(body.get("released", False)),
                       renewals=int(body.get("renewals", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ClaimError(f"unreadable job claim {source}: {exc}; delete it only if no processor of the job "
                             "runs") from exc

    def describe(self) -> str:
        """``processor 0 (pid 123 on host h) since 2026-…Z``."""
        since = dt.datetime.fromtimestamp(self.since_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"processor {self.holder} (pid {self.pid} on host {self.host}) since {since}"


@dataclass(frozen=True)
class ClaimState:
    """A claim as read: the record, the version tag a conditional write must present, and its age in
    ms (time since it was last written, measured by the store's clock)."""

    record: ClaimRecord
    tag: str
    age_ms: int


class ClaimHeldError(ClaimError):
    """Another live processor holds the job: this one must not start."""

    def __init__(self, state: ClaimState, where: str, processor_id: str, *, observed_ms: int = 0) -> None:
        self.state = state
        rec = state.record
        left = max(0.0, (rec.timeout_ms - max(state.age_ms, observed_ms)) / 1000)
        same = " (the same processor id: another process)" if rec.holder == processor_id else ""
        super().__init__(
            f"job {rec.job} is claimed by {rec.describe()}{same}, renewed {state.age_ms / 1000:.1f} s ago "
            f"({where}); a standalone job runs in one processor only: stop that one first (or set "
            "job.coordinator.factory: azure to share the tasks). If it died, its claim expires in "
            f"{left:.0f} s ({KEY_TIMEOUT}): start again then")


class ClaimLostError(ClaimError):
    """The running processor's claim was taken over (or could not be renewed in time): it must stop."""

    def __init__(self, job: str, processor_id: str, reason: str) -> None:
        self.job = job
        self.reason = reason
        super().__init__(f"processor {processor_id} lost its claim on job {job}: {reason}; it stopped and its "
                         "uncommitted batch is refused (fenced). Make sure only one processor runs the job")


class _RaceError(Exception):
    """A conditional write lost against another writer (internal: callers read again)."""


class ClaimBackend(Protocol):
    """Where one job's claim document lives, with conditional writes."""

    def read(self) -> ClaimState | None:
        """The claim, its version tag and age; None when there is none."""
        ...

    def write(self, record: ClaimRecord, expected_tag: str | None) -> str:
        """Write if the stored version is still ``expected_tag`` (None: nothing stored); the new tag.

        Raises ``_RaceError`` when it is not.
        """
        ...

    def describe(self) -> str:
        """Where the claim is, for messages (no secrets)."""
        ...


class LocalClaimBackend:
    """A claim kept as numbered files ``<path>.<n>``, the newest being the claim (a lone ``<path>`` file, as older
    versions kept it, counts as number 0).

    A write writes and syncs its version to a temporary file, then links it to the next number: the link fails
    when another writer took that number first (the conditional write). There is no lock, so a process stopped in
    the middle of a write (SIGSTOP, a suspended VM) holds nothing the others wait for: the file lock of before,
    held across a write's fsync by a holder stopped there, kept the processor taking the expired claim over
    waiting until the holder woke. Versions older than the one before the newest are deleted.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.base = Path(path)

    @property
    def path(self) -> Path:
        """The file holding the claim now (``<path>`` itself when there is none yet)."""
        versions = self._versions()
        return versions[-1][1] if versions else self.base

    def describe(self) -> str:
        """The claim's path (without its version number)."""
        return str(self.base)

    def _file(self, number: int) -> Path:
        return self.base.with_name(f"{self.base.name}.{number:012d}")

    def _versions(self) -> list[tuple[int, Path]]:
        prefix = self.base.name + "."
        out: list[tuple[int, Path]] = []
        try:
            with os.scandir(self.base.parent) as entries:
                for entry in entries:
                    if entry.name == self.base.name:
                        out.append((0, Path(entry.path)))
                    elif entry.name.startswith(prefix) and entry.name[len(prefix):].isdigit():
                        out.append((int(entry.name[len(prefix):]), Path(entry.path)))
        except FileNotFoundError:
            return []
        return sorted(out)

    def read(self) -> ClaimState | None:
        """The newest version, its number (the tag), and now minus its mtime."""
        while True:
            versions = self._versions()
            if not versions:
                return None
            number, path = versions[-1]
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
                    mtime_ns = os.fstat(fh.fileno()).st_mtime_ns
            except FileNotFoundError:  # a writer that lost took its own version back: list again
                continue
            age = max(0, (time.time_ns() - mtime_ns) // 1_000_000)
            return ClaimState(ClaimRecord.from_json(data, str(path)), str(number), age)

    def write(self, record: ClaimRecord, expected_tag: str | None) -> str:
        """Link the new version to the number after ``expected_tag`` (1 when nothing is stored); the new tag."""
        number = int(expected_tag) if expected_tag is not None else 0
        if expected_tag is None and self._versions():
            raise _RaceError(str(self.base))
        self.base.parent.mkdir(parents=True, exist_ok=True)
        target = self._file(number + 1)
        fd, tmp = tempfile.mkstemp(dir=self.base.parent, prefix=".tmp-claim-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(record.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise _RaceError(str(self.base)) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        versions = self._versions()
        if versions[-1][0] > number + 1:
            # Our number was free only because it had been deleted as old: a newer version is in force.
            target.unlink(missing_ok=True)
            raise _RaceError(str(self.base))
        for old, path in versions:
            if old < number:
                path.unlink(missing_ok=True)
        fsync_dir(self.base.parent)  # the claim survives a crash of the host
        return str(number + 1)


class AzureClaimBackend:
    """A claim blob; writes are ``If-Match`` its ETag (``If-None-Match: *`` when creating it)."""

    def __init__(self, container_client: Any, blob_name: str) -> None:
        self.container = container_client
        self.blob = container_client.get_blob_client(blob_name)

    def describe(self) -> str:
        """Container and blob name."""
        return f"azure blob {self.container.container_name}/{self.blob.blob_name}"

    def read(self) -> ClaimState | None:
        """Download with the ETag; age = the response's ``Date`` minus the blob's ``Last-Modified``."""
        from azure.core.exceptions import ResourceNotFoundError

        dates: list[str] = []

        def hook(response: Any) -> None:
            date = response.http_response.headers.get("Date")
            if date:
                dates.append(date)

        try:
            with _azure_errors(self.describe()):
                stream = self.blob.download_blob(raw_response_hook=hook)
                data = stream.readall()
        except ResourceNotFoundError:
            return None
        modified = stream.properties.last_modified
        age = 0
        if dates and modified is not None:
            now = email.utils.parsedate_to_datetime(dates[0])
            age = max(0, int((now - modified).total_seconds() * 1000))
        return ClaimState(ClaimRecord.from_json(data, self.describe()), str(stream.properties.etag), age)

    def write(self, record: ClaimRecord, expected_tag: str | None) -> str:
        """Conditional upload (creating the container when missing)."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError

        for attempt in range(2):
            try:
                with _azure_errors(self.describe()):
                    if expected_tag is None:
                        result = self.blob.upload_blob(record.to_json(), overwrite=False)
                    else:
                        result = self.blob.upload_blob(record.to_json(), overwrite=True, etag=expected_tag,
                                                       match_condition=MatchConditions.IfNotModified)
                return str(result["etag"])
            except (ResourceModifiedError, ResourceExistsError) as exc:
                raise _RaceError(self.describe()) from exc
            except ResourceNotFoundError:
                if attempt or expected_tag is not None:
                    raise _RaceError(self.describe()) from None
                with _azure_errors(self.describe()), contextlib.suppress(ResourceExistsError):
                    self.container.create_container()
        raise _RaceError(self.describe())


def _azure_errors(where: str) -> contextlib.AbstractContextManager[None]:
    return storage_unreachable(f"job claim at {where}")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _holder_dead_here(record: ClaimRecord) -> bool:
    """True only when the holder certainly died: same host and boot, and its pid does not run.

    (A reused pid makes this say "alive": the claim then simply waits for its timeout.)
    """
    return (record.host == socket.gethostname() and bool(record.boot_id) and record.boot_id == _boot_id()
            and record.pid != os.getpid() and not pid_alive(record.pid))


class JobClaim:
    """This processor's claim on ``job``: :meth:`acquire`, renewed in the background, :meth:`release`.

    ``epoch_floor()`` returns the highest fencing generation already used by the job (e.g. the
    highest task-checkpoint generation), so a new epoch is above it even if the claim document was
    deleted. ``on_lost(error)`` is called once, from the renewal thread, when the claim is lost.
    ``clock`` measures this processor's own durations (since the last renewal, how long a claim was
    seen unchanged); tests pass a :class:`~sparza.clock.ManualClock`.
    """

    def __init__(self, backend: ClaimBackend, job: str, processor_id: str, *, timeout_ms: int = 30000,
                 renew_interval_ms: int = 5000, epoch_floor: Callable[[], int] = lambda: 0,
                 clock: Clock = monotonic_ms) -> None:
        if renew_interval_ms * 3 > timeout_ms:
            from sparza.errors import ConfigError

            raise ConfigError(KEY_RENEW, renew_interval_ms, f"at most a third of {KEY_TIMEOUT} ({timeout_ms})")
        self.backend = backend
        self.job = job
        self.processor_id = processor_id
        self.timeout_ms = timeout_ms
        self.renew_interval_ms = renew_interval_ms
        self._epoch_floor = epoch_floor
        self.clock = clock
        self._record: ClaimRecord | None = None
        self._tag: str | None = None
        self._renewed_at = 0  # clock time (ms) of the last successful write
        self._seen: tuple[str, int] | None = None  # (tag, clock time first seen) of another holder's claim
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: ClaimLostError | None = None

    @property
    def epoch(self) -> int:
        """The fencing epoch of the held claim (0 before :meth:`acquire`)."""
        return self._record.epoch if self._record else 0

    @property
    def held(self) -> bool:
        """True between a successful :meth:`acquire` and :meth:`release` or the loss of the claim."""
        return self._record is not None and self.lost is None

    def _observed_ms(self, state: ClaimState) -> int:
        """How long (by our clock) we have seen this very version of the claim unchanged; 0 the first time."""
        now = self.clock()
        if self._seen is None or self._seen[0] != state.tag:
            self._seen = (state.tag, now)
        return now - self._seen[1]

    def acquire(self) -> int:
        """Take the claim (free, released, expired, or its holder died here); returns the new epoch.

        Raises :class:`ClaimHeldError` when a live processor holds it. A claim counts as expired when the
        store says it was not renewed for its timeout, or when this object has seen the same version of it
        unchanged for that long (call again after the timeout: no clock but our own is involved).
        """
        for _ in range(10):
            current = self.backend.read()
            if current is not None:
                rec = current.record
                observed = self._observed_ms(current)
                silent_ms = max(current.age_ms, observed)
                expired = rec.released or silent_ms >= rec.timeout_ms or _holder_dead_here(rec)
                if not expired:
                    raise ClaimHeldError(current, self.backend.describe(), self.processor_id, observed_ms=observed)
                if not rec.released:
                    _log.warning("taking over the claim on job %s from %s: not renewed for %.1f s", self.job,
                                 rec.describe(), silent_ms / 1000)
            previous_epoch = current.record.epoch if current else 0
            record = ClaimRecord(job=self.job, holder=self.processor_id, host=socket.gethostname(), pid=os.getpid(),
                                 token=uuid.uuid4().hex, epoch=max(previous_epoch, self._epoch_floor()) + 1,
                                 since_ms=int(time.time() * 1000), timeout_ms=self.timeout_ms, boot_id=_boot_id())
            started = self.clock()
            try:
                tag = self.backend.write(record, current.tag if current else None)
            except _RaceError:
                continue  # another processor wrote meanwhile: look again
            with self._lock:
                self._record, self._tag, self._renewed_at = record, tag, started
                self.lost = None
            self._seen = None
            return record.epoch
        raise ClaimError(f"could not take the claim on job {self.job} at {self.backend.describe()}: it kept changing")

    def renew(self) -> None:
        """Rewrite the claim conditional on our last version; :class:`ClaimLostError` when it is not ours."""
        with self._lock:
            record, tag = self._record, self._tag
        if record is None or self.lost is not None:
            raise self.lost or ClaimError(f"the claim on job {self.job} is not held")
        started = self.clock()
        renewed = replace(record, renewals=record.renewals + 1)
        try:
            new_tag = self.backend.write(renewed, tag)
        except _RaceError:
            current = self.backend.read()
            if current is not None and current.record.token == record.token:
                # Our own earlier write landed although its answer was lost: continue from it.
                with self._lock:
                    self._record, self._tag = current.record, current.tag
                return self.renew()
            holder = current.record.describe() + f" at epoch {current.record.epoch}" if current else "nobody"
            raise ClaimLostError(self.job, self.processor_id, f"the claim now belongs to {holder}") from None
        with self._lock:
            self._record, self._tag, self._renewed_at = renewed, new_tag, started

    def start_renewing(self, on_lost: Callable[[ClaimLostError], None]) -> None:
        """Renew every ``renew_interval_ms`` in a daemon thread until :meth:`release`.

        Storage errors are retried; when no renewal succeeded for ``timeout_ms`` (by this claim's
        clock) another processor may take over, so the claim counts as lost.
        """
        def loop() -> None:
            while not self._stop.wait(self.renew_interval_ms / 1000):
                try:
                    self.renew()
                except ClaimLostError as exc:
                    self._lose(exc, on_lost)
                    return
                except Exception as exc:  # storage unreachable: retry until our own deadline
                    silent_ms = self.clock() - self._renewed_at
                    _log.warning("renewing the claim on job %s failed (%s); last renewal %.1f s ago", self.job,
                                 exc, silent_ms / 1000)
                    if silent_ms >= self.timeout_ms:
                        self._lose(ClaimLostError(self.job, self.processor_id,
                                                  f"no renewal succeeded for {silent_ms / 1000:.0f} s ({exc})"),
                                   on_lost)
                        return

        self._stop.clear()
        self._thread = threading.Thread(target=loop, name=f"claim-{self.job}", daemon=True)
        self._thread.start()

    def _lose(self, error: ClaimLostError, on_lost: Callable[[ClaimLostError], None]) -> None:
        self.lost = error
        _log.error("%s", error)
        on_lost(error)

    def release(self) -> None:
        """Stop renewing and mark the claim released (keeping its epoch), if it is still ours."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self._thread = None
        with self._lock:
            record, tag = self._record, self._tag
            self._record = None
        if record is None or self.lost is not None:
            return
        try:
            self.backend.write(replace(record, released=True), tag)
        except _RaceError:
            _log.warning("the claim on job %s was no longer ours at release", self.job)
        except Exception as exc:  # it expires by itself
            _log.warning("could not release the claim on job %s (%s); it expires after %d ms", self.job, exc,
                         self.timeout_ms)
