"""Task checkpoints (Samza's CheckpointV2): what a task committed, stored per task as one JSON document.

A checkpoint says, for one task, the last batch it committed (``batch``: the runtime's batch
sequence number), the coordinator generation that wrote it, the next offset to read per SSP, the
snapshot-index blob id of each store, and the control-message state. It is written after the
task's producers flushed and its stores were backed up, so everything it points at is durable.

Writes are conditional: a task reads its checkpoint (and the version tag that came with it) at the
start of a batch and writes the new one only if the stored one is still that version (ETag on
Azure, a content hash under a file lock locally) and the stored generation is not newer than its
own. A stale or fenced-off writer gets :class:`CheckpointConflictError` /
:class:`CheckpointFencedError` and cannot overwrite newer state.

Backends: a local directory and an Azure blob container. The default location is the configured
blob store's (``blob.store.manager.factory``), under ``checkpoints/<job.name>-<job.id>/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import quote, unquote

from sparza.config import Config
from sparza.engine.errors import CheckpointConflictError, CheckpointFencedError
from sparza.errors import ConfigError
from sparza.host import fsync_dir

if TYPE_CHECKING:  # the claim is the driver's business: executors never import it
    from sparza.coordination.jobclaim import ClaimBackend
    from sparza.metrics import MetricsRegistry

__all__ = [
    "CHECKPOINTS_SCOPE",
    "AzureCheckpointStore",
    "CheckpointStore",
    "Intent",
    "LocalCheckpointStore",
    "SupportsJobClaim",
    "SupportsJobDocuments",
    "TaskCheckpoint",
    "VersionedCheckpoint",
    "checkpoint_store_from_config",
    "stamp_generation",
]


CHECKPOINT_VERSION = 2
"""Format version: 2 adds ``pending`` (written as 2 only when an intent is open, so older readers refuse it)."""


@dataclass(frozen=True)
class Intent:
    """What a task announces before its producers flush batch ``batch``: the exact input range and the
    planning time, so that a restart which lost Spark's offset log re-plans exactly that batch with that
    output version (its outputs may already be partly visible: replaying anything else would repeat or
    lose them).

    ``starts``/``ends``: SSP → offset range read; ``bounded_ends``: where bounded SSPs end, as the first
    attempt saw it (end-of-stream is decided the same way on replay); ``planned_at_ms``: the plan's time.
    Stored as JSON keys ``batch``, ``planned_at``, ``starts``, ``ends``, ``bounded_ends``.
    """

    batch: int
    planned_at_ms: int
    starts: dict[str, str]
    ends: dict[str, str]
    bounded_ends: dict[str, str] = field(default_factory=dict)
    adjunct_reads: dict[str, int] = field(default_factory=dict)
    """Broadcast store → the batch of the publication the first attempt read (a replay reads the same)."""
    drain: dict[str, Any] | None = None
    """The drain the batch ran under, as its split said (:attr:`~sparza.engine.split.TaskSplit.drain`): a replay
    decides the same, whether a drain was requested since or ended."""
    systems: tuple[str, ...] = ()
    """The systems whose producers flush the batch: a task started while this intent is open fences them first
    (:class:`~sparza.systems.SupportsFencing`), in case the instance that wrote it died mid-flush."""

    def to_json(self) -> dict[str, Any]:
        """The stored form (a JSON object inside the task checkpoint)."""
        body: dict[str, Any] = {"batch": self.batch, "planned_at": self.planned_at_ms, "starts": dict(self.starts),
                                "ends": dict(self.ends), "bounded_ends": dict(self.bounded_ends)}
        if self.adjunct_reads:
            body["adjunct_reads"] = dict(self.adjunct_reads)
        if self.drain is not None:
            body["drain"] = dict(self.drain)
        if self.systems:
            body["systems"] = list(self.systems)
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Intent:
        """Parse the stored form (``bounded_ends`` is absent in intents written by sparza 0.1)."""
        return cls(batch=int(body["batch"]), planned_at_ms=int(body["planned_at"]),
                   starts={str(k): str(v) for k, v in body["starts"].items()},
                   ends={str(k): str(v) for k, v in body["ends"].items()},
                   bounded_ends={str(k): str(v) for k, v in (body.get("bounded_ends") or {}).items()},
                   adjunct_reads={str(k): int(v) for k, v in (body.get("adjunct_reads") or {}).items()},
                   drain=dict(body["drain"]) if body.get("drain") is not None else None,
                   systems=tuple(str(x) for x in body.get("systems") or ()))


@dataclass(frozen=True)
class TaskCheckpoint:
    """What one task committed at the end of batch ``batch``.

    ``offsets``: SSP (``system.stream#N``) → the next offset to read. ``stores``: store name →
    snapshot-index blob id (or a local marker when the store is not backed up). ``control``: the
    control-message state (watermarks, end-of-stream counts). ``ended``: the task delivered
    end-of-stream to its task code. ``spark_batch_id`` and ``written_at_ms`` are informational.
    ``location``: the state dir (host and dir, :func:`sparza.engine.container.location_of`) where the batch
    ran, so the next placement can run the task where its local state is (host affinity). ``outputs``: the
    systems the task's latest batch with output wrote through, whose producers its next instance opens before its
    first batch (:class:`~sparza.systems.SupportsFencing`). ``drain``: the drain
    messages read on intermediate inputs and the drain the task completed
    (:meth:`sparza.control.drain.DrainTracker.snapshot`).

    ``pending`` is the task's :class:`Intent` for a batch it started to flush but has not committed,
    written before its producers flush. ``batch == 0`` means nothing is committed yet (only an intent).
    """

    task: str
    batch: int
    generation: int
    offsets: dict[str, str]
    stores: dict[str, str] = field(default_factory=dict)
    control: dict[str, Any] | None = None
    ended: bool = False
    spark_batch_id: int | None = None
    written_at_ms: int | None = None
    window_at_ms: int = 0
    adjunct: dict[str, Any] | None = None
    pending: Intent | None = None
    location: str | None = None
    drain: dict[str, Any] | None = None
    outputs: tuple[str, ...] = ()

    @property
    def committed(self) -> bool:
        """True when a batch was committed (False for a document holding only a first intent)."""
        return self.batch > 0

    def fence_systems(self) -> tuple[str, ...]:
        """The systems a new instance of the task fences before its first batch: those an open intent names (its
        batch may have died mid-flush), else ``outputs``."""
        intent = self.open_intent()
        return intent.systems if intent is not None and intent.systems else self.outputs

    def open_intent(self) -> Intent | None:
        """``pending`` when it is newer than the committed batch (else None: it was committed)."""
        if self.pending is not None and self.pending.batch > self.batch:
            return self.pending
        return None

    def to_json(self) -> bytes:
        """The stored form: sorted-key JSON with a format version."""
        body = {"version": CHECKPOINT_VERSION if self.pending is not None else 1, **asdict(self)}
        body["pending"] = self.pending.to_json() if self.pending is not None else None
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, *, source: str = "checkpoint") -> TaskCheckpoint:
        """Parse the stored form; unknown fields are ignored (newer writers may add some)."""
        try:
            body = json.loads(data)
            version = int(body.get("version", 1))
            if version > CHECKPOINT_VERSION:
                raise ValueError(f"format version {version} is newer than this sparza understands")
            return cls(task=str(body["task"]), batch=int(body["batch"]), generation=int(body.get("generation", 0)),
                       offsets={str(k): str(v) for k, v in body.get("offsets", {}).items()},
                       stores={str(k): str(v) for k, v in body.get("stores", {}).items()},
                       control=body.get("control"), ended=bool(body.get("ended", False)),
                       spark_batch_id=body.get("spark_batch_id"), written_at_ms=body.get("written_at_ms"),
                       window_at_ms=int(body.get("window_at_ms") or 0), adjunct=body.get("adjunct"),
                       pending=Intent.from_json(body["pending"]) if body.get("pending") else None,
                       location=body.get("location"), drain=body.get("drain"),
                       outputs=tuple(str(x) for x in body.get("outputs") or ()))
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointConflictError("?", f"unreadable task checkpoint {source}: {exc}") from exc


@dataclass(frozen=True)
class VersionedCheckpoint:
    """A checkpoint as read, with the version tag a conditional write must present."""

    checkpoint: TaskCheckpoint
    etag: str


class CheckpointStore(Protocol):
    """Where task checkpoints of one job live."""

    def read(self, task: str) -> VersionedCheckpoint | None:
        """The task's checkpoint and its version tag; None when the task never committed."""
        ...

    def write(self, checkpoint: TaskCheckpoint, expected_etag: str | None) -> str:
        """Write if the stored version is still ``expected_etag`` (None: none stored); returns the new tag."""
        ...

    def read_all(self) -> dict[str, TaskCheckpoint]:
        """Every task's checkpoint, by task name."""
        ...

    def describe(self) -> str:
        """Where the checkpoints are, for messages (no secrets)."""
        ...


@runtime_checkable
class SupportsJobClaim(Protocol):
    """A checkpoint store that can also keep the job's standalone claim (so it works across hosts)."""

    def claim_backend(self) -> ClaimBackend:
        """The claim document of this job, next to its checkpoints."""
        ...


@runtime_checkable
class SupportsJobDocuments(Protocol):
    """A checkpoint store that keeps small job-wide documents next to the task checkpoints (names start with
    ``_``, never ``.json``: not tasks), e.g. a drain request (:mod:`sparza.engine.drain`)."""

    def read_document(self, name: str) -> bytes | None:
        """The document's bytes; None when there is none."""
        ...

    def write_document(self, name: str, data: bytes) -> None:
        """Create or replace the document (atomically: a reader sees the old or the new bytes)."""
        ...

    def delete_document(self, name: str) -> None:
        """Remove the document (nothing when there is none)."""
        ...


CLAIM_NAME = "_claim"
"""The claim document's name inside the job's checkpoint dir / prefix (not ``*.json``: not a task)."""


def stamp_generation(store: CheckpointStore, tasks: list[str], generation: int) -> None:
    """Raise every task's stored generation to ``generation`` (conditional writes), before running them.

    A task with no checkpoint gets a document holding only the generation (``batch`` 0: nothing
    committed), so even the first write of an older processor is refused. Content is kept, open
    intents included.
    """
    for task in tasks:
        for _ in range(10):
            current = store.read(task)
            if current is not None and current.checkpoint.generation >= generation:
                break
            stamped = (dataclasses.replace(current.checkpoint, generation=generation) if current is not None
                       else TaskCheckpoint(task=task, batch=0, generation=generation, offsets={}))
            try:
                store.write(stamped, current.etag if current is not None else None)
                break
            except CheckpointFencedError:
                raise
            except CheckpointConflictError:
                continue  # the previous holder wrote meanwhile: read again and stamp that
        else:
            raise CheckpointConflictError(task, f"could not stamp generation {generation}: it kept changing")


def _slug(task: str) -> str:
    return quote(task.replace(" ", "_"), safe="_-.")


def _unslug(name: str) -> str:
    return unquote(name).replace("_", " ")


def _check_generation(task: str, new: TaskCheckpoint, stored: TaskCheckpoint | None) -> None:
    if stored is not None and stored.generation > new.generation:
        raise CheckpointFencedError(task, new.generation, stored.generation)


class LocalCheckpointStore:
    """Task checkpoints as files ``<root>/<job>/<task>.json``: atomic rename, checked under a file lock per task
    (tasks of one job commit beside each other: a lock per job made every task's write wait for the others')."""

    def __init__(self, root: str | os.PathLike[str], job_key: str) -> None:
        self.dir = Path(root) / job_key
        self.job_key = job_key

    def describe(self) -> str:
        """The directory."""
        return str(self.dir)

    def _path(self, task: str) -> Path:
        return self.dir / f"{_slug(task)}.json"

    def claim_backend(self) -> ClaimBackend:
        """The claim file ``<root>/<job>/_claim``."""
        from sparza.coordination.jobclaim import LocalClaimBackend

        return LocalClaimBackend(self.dir / CLAIM_NAME)

    def read_document(self, name: str) -> bytes | None:
        """The file ``<root>/<job>/<name>``."""
        try:
            return (self.dir / name).read_bytes()
        except FileNotFoundError:
            return None

    def write_document(self, name: str, data: bytes) -> None:
        """Write ``<root>/<job>/<name>`` through a temporary file and a rename."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._replace(self.dir / name, data)

    def _replace(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically (a temporary file, fsynced, then renamed over it) and sync the dir."""
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        fsync_dir(self.dir)

    def delete_document(self, name: str) -> None:
        """Remove ``<root>/<job>/<name>``."""
        (self.dir / name).unlink(missing_ok=True)

    @contextlib.contextmanager
    def _locked(self, task: str) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f".{_slug(task)}.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def read(self, task: str) -> VersionedCheckpoint | None:
        """The checkpoint file and the hash of its bytes as version tag."""
        try:
            data = self._path(task).read_bytes()
        except FileNotFoundError:
            return None
        return VersionedCheckpoint(TaskCheckpoint.from_json(data, source=str(self._path(task))),
                                   hashlib.sha256(data).hexdigest())

    def write(self, checkpoint: TaskCheckpoint, expected_etag: str | None) -> str:
        """Compare the stored hash and generation under the lock, then replace the file atomically."""
        data = checkpoint.to_json()
        with self._locked(checkpoint.task):
            current = self.read(checkpoint.task)
            current_tag = current.etag if current else None
            if current_tag != expected_etag:
                _check_generation(checkpoint.task, checkpoint, current.checkpoint if current else None)
                raise CheckpointConflictError(checkpoint.task, f"expected version {expected_etag}, found {current_tag}")
            _check_generation(checkpoint.task, checkpoint, current.checkpoint if current else None)
            self._replace(self._path(checkpoint.task), data)
        return hashlib.sha256(data).hexdigest()

    def read_all(self) -> dict[str, TaskCheckpoint]:
        """Every ``*.json`` in the job's dir."""
        out: dict[str, TaskCheckpoint] = {}
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.json")):
            cp = TaskCheckpoint.from_json(path.read_bytes(), source=str(path))
            out[cp.task] = cp
        return out


class AzureCheckpointStore:
    """Task checkpoints as blobs ``<prefix><job>/<task>.json`` with ETag-conditional writes."""

    def __init__(self, container_client: Any, job_key: str, prefix: str = "checkpoints/") -> None:
        self.container = container_client
        self.job_key = job_key
        self.prefix = f"{prefix}{job_key}/"
        self._ensured = False
        # ETag -> the checkpoint stored under it, for versions this object read or wrote: a write
        # conditional on one of them checks the generation without downloading the blob again.
        self._known: dict[str, TaskCheckpoint] = {}

    def describe(self) -> str:
        """Container and prefix."""
        return f"azure container {self.container.container_name}/{self.prefix}"

    def claim_backend(self) -> ClaimBackend:
        """The claim blob ``<prefix><job>/_claim``."""
        from sparza.coordination.jobclaim import AzureClaimBackend

        return AzureClaimBackend(self.container, self.prefix + CLAIM_NAME)

    def read_document(self, name: str) -> bytes | None:
        """The blob ``<prefix><job>/<name>``."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            with _azure_errors(self.describe()):
                return bytes(self.container.get_blob_client(self.prefix + name).download_blob().readall())
        except ResourceNotFoundError:
            return None

    def write_document(self, name: str, data: bytes) -> None:
        """Upload the blob ``<prefix><job>/<name>`` (a blob upload replaces it atomically)."""
        self._ensure_container()
        with _azure_errors(self.describe()):
            self.container.get_blob_client(self.prefix + name).upload_blob(data, overwrite=True)

    def delete_document(self, name: str) -> None:
        """Delete the blob ``<prefix><job>/<name>``."""
        from azure.core.exceptions import ResourceNotFoundError

        with _azure_errors(self.describe()), contextlib.suppress(ResourceNotFoundError):
            self.container.get_blob_client(self.prefix + name).delete_blob()

    def _ensure_container(self) -> None:
        if self._ensured:
            return
        from azure.core.exceptions import ResourceExistsError

        with _azure_errors(self.describe()), contextlib.suppress(ResourceExistsError):
            self.container.create_container()
        self._ensured = True

    def read(self, task: str) -> VersionedCheckpoint | None:
        """Download the blob with its ETag."""
        from azure.core.exceptions import ResourceNotFoundError

        blob = self.container.get_blob_client(self.prefix + f"{_slug(task)}.json")
        try:
            with _azure_errors(self.describe()):
                stream = blob.download_blob()
                data = stream.readall()
        except ResourceNotFoundError:
            return None
        checkpoint = TaskCheckpoint.from_json(data, source=blob.blob_name)
        self._remember(stream.properties.etag, checkpoint)
        return VersionedCheckpoint(checkpoint, stream.properties.etag)

    def _remember(self, etag: str, checkpoint: TaskCheckpoint) -> None:
        if len(self._known) > 1024:
            self._known.clear()
        self._known[etag] = checkpoint

    def write(self, checkpoint: TaskCheckpoint, expected_etag: str | None) -> str:
        """``If-Match`` the expected ETag (or ``If-None-Match: *`` for the first write)."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

        self._ensure_container()
        if expected_etag is not None:
            # Check the generation of what is stored; the ETag condition below makes it race-free.
            known = self._known.get(expected_etag)
            if known is None or known.task != checkpoint.task:
                current = self.read(checkpoint.task)
                known = current.checkpoint if current else None
            _check_generation(checkpoint.task, checkpoint, known)
        blob = self.container.get_blob_client(self.prefix + f"{_slug(checkpoint.task)}.json")
        try:
            with _azure_errors(self.describe()):
                if expected_etag is None:
                    result = blob.upload_blob(checkpoint.to_json(), overwrite=False)
                else:
                    result = blob.upload_blob(checkpoint.to_json(), overwrite=True, etag=expected_etag,
                                              match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceExistsError) as exc:
            current = self.read(checkpoint.task)
            _check_generation(checkpoint.task, checkpoint, current.checkpoint if current else None)
            raise CheckpointConflictError(checkpoint.task, f"the blob changed since it was read ({exc.reason})") \
                from exc
        self._remember(str(result["etag"]), checkpoint)
        return str(result["etag"])

    def read_all(self) -> dict[str, TaskCheckpoint]:
        """Every checkpoint blob under the job's prefix."""
        from azure.core.exceptions import ResourceNotFoundError

        out: dict[str, TaskCheckpoint] = {}
        try:
            with _azure_errors(self.describe()):
                names = [b.name for b in self.container.list_blobs(name_starts_with=self.prefix)]
        except ResourceNotFoundError:
            return out
        for name in names:
            if name.endswith(".json"):
                task = _unslug(name[len(self.prefix):-len(".json")])
                got = self.read(task)
                if got is not None:
                    out[got.checkpoint.task] = got.checkpoint
        return out


def _azure_errors(where: str) -> contextlib.AbstractContextManager[None]:
    """Translate transport failures into :class:`~sparza.errors.StorageUnavailableError` (the one Azure
    boundary: :mod:`sparza.azure.errors`)."""
    from sparza.azure import storage_unreachable

    return storage_unreachable(f"task checkpoints at {where}")


CHECKPOINTS_SCOPE = "checkpoints"
"""The scope of the checkpoint store's request counts (:mod:`sparza.azure.requests`)."""


def checkpoint_store_from_config(config: Config, job_key: str, *, metrics: MetricsRegistry | None = None,
                                 scope: str = CHECKPOINTS_SCOPE) -> CheckpointStore:
    """The checkpoint store ``job.checkpoint.factory`` names (default: where the blob store keeps blobs); an Azure
    store counts its requests in ``metrics`` (group ``storage.<scope>``) when given."""
    from sparza.blobstore.settings import AZURE_CONTAINER, LOCAL_ROOT, MANAGER_FACTORY
    from sparza.engine.jobconfig import CHECKPOINT_AZURE_CONTAINER, CHECKPOINT_FACTORY, CHECKPOINT_LOCAL_DIR

    factory = CHECKPOINT_FACTORY.get(config)
    if factory == "blobstore":
        if MANAGER_FACTORY.get(config) == "azure":
            return _azure_store(config, AZURE_CONTAINER.require(config), job_key, metrics, scope)
        return LocalCheckpointStore(Path(LOCAL_ROOT.get(config)).absolute() / "checkpoints", job_key)
    if factory == "local":
        return LocalCheckpointStore(Path(CHECKPOINT_LOCAL_DIR.require(config)).absolute(), job_key)
    return _azure_store(config, CHECKPOINT_AZURE_CONTAINER.require(config), job_key, metrics, scope)


def _azure_store(config: Config, container: str, job_key: str, metrics: MetricsRegistry | None = None,
                 scope: str = CHECKPOINTS_SCOPE) -> AzureCheckpointStore:
    from sparza.azure import StorageRequests, resolve_storage_account

    if len(container) < 3:
        raise ConfigError("job.checkpoint.azure.container", container, "a container name of 3 or more characters")
    account = resolve_storage_account(config)
    requests = StorageRequests(metrics, scope) if metrics is not None else None
    client = account.blob_service_client(requests=requests).get_container_client(container)
    return AzureCheckpointStore(client, job_key)
