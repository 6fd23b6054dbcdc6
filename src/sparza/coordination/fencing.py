"""Fencing: the job-model version is a generation number that refuses writes from stale processors.

A processor paused past its liveness timeout (GC, SIGSTOP, a network cut) may wake up still
believing it owns tasks that a newer job model gave to someone else. Two checks stop it:

* :meth:`GenerationFence.check` reads the published job models and raises :class:`FencedError`
  unless the task stayed the caller's in every model newer than its generation. Call it before
  committing a batch.
* :func:`write_fenced` writes a small blob (a task checkpoint) carrying ``generation`` in its
  metadata, conditional on the ETag it just read: it is refused when the stored object carries a
  newer generation, so even a write that slips past ``check`` cannot overwrite newer work. A new
  owner calls :func:`claim` when it takes a task over, before restoring from the blob, so the old
  owner's late write fails even when the new owner has not committed yet.

The ETag condition is enforced by Azure (and Azurite) for single-blob writes; the generation
comparison is ours, so it does not depend on emulator lease behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

from sparza.azure import StorageAccount, resolve_storage_account
from sparza.coordination._azure import storage_call
from sparza.coordination.clients import CoordinationClients
from sparza.coordination.errors import FencedError, StoreConflictError
from sparza.coordination.settings import CoordinationConfig

__all__ = ["GENERATION_KEY", "OWNER_KEY", "FencedError", "GenerationFence", "claim", "stored_generation",
           "write_fenced"]

GENERATION_KEY = "generation"
"""Blob metadata key holding the generation (job-model version) of the last writer."""
OWNER_KEY = "owner"
"""Blob metadata key holding the processor id of the last writer."""

_ATTEMPTS = 5


class GenerationFence:
    """The fence of one processor working under job-model version ``generation``.

    Build one per adopted job model (``GenerationFence(config, pid, model.version)``) and call
    :meth:`check` before each commit and :meth:`write` for checkpoint blobs.
    """

    def __init__(self, config: Mapping[str, str], processor_id: str, generation: int, *,
                 account: StorageAccount | None = None) -> None:
        cfg = CoordinationConfig.from_config(config)
        self._clients = CoordinationClients.create(cfg, account or resolve_storage_account(config))
        self.processor_id = processor_id
        self.generation = generation

    def newest_generation(self) -> int:
        """The newest published job-model version (0 when none)."""
        return self._clients.store.read().state.version

    def check(self, task: str) -> None:
        """Raise :class:`FencedError` unless ``task`` stayed ours in every job model newer than our generation.

        The store keeps two models: the newest and the one in force before it. A newer model that keeps the task
        with us passes only when it is the only newer one: when the model in force before it is newer than our
        generation too, the task may have moved away and back (a paused processor rejoining is given some of its
        old tasks again) and the models in between are not known, so the check refuses.
        """
        state = self._clients.store.read().state
        newest = state.current
        if newest is None or newest.version <= self.generation:
            return
        if task not in newest.tasks_of(self.processor_id):
            raise FencedError(task, self.processor_id, self.generation, newest.version,
                              "a newer job model gives the task to " + repr(newest.owner_of(task)))
        before = state.previous
        if before is not None and before.version > self.generation:
            raise FencedError(task, self.processor_id, self.generation, newest.version,
                              f"job model {before.version} came into force after ours: the task may have "
                              "been another processor's in between")

    def write(self, blob_client: Any, data: bytes, task: str) -> str:
        """:meth:`check` then :func:`write_fenced`; returns the new ETag."""
        self.check(task)
        return write_fenced(blob_client, data, self.generation, self.processor_id)

    def claim(self, blob_client: Any) -> None:
        """Stamp ``blob_client``'s object with our generation (see :func:`claim`)."""
        claim(blob_client, self.generation, self.processor_id)


def stored_generation(blob_client: Any) -> tuple[int, str | None]:
    """``(generation, etag)`` of a fenced blob; ``(0, None)`` when it does not exist."""
    with storage_call(f"read {blob_client.blob_name}"):
        try:
            props = blob_client.get_blob_properties()
        except ResourceNotFoundError:
            return 0, None
    return int((props.metadata or {}).get(GENERATION_KEY, "0") or 0), props.etag


def write_fenced(blob_client: Any, data: bytes, generation: int, processor_id: str) -> str:
    """Write ``data`` unless the stored object carries a newer generation; returns the new ETag.

    Reads the stored generation and ETag, refuses with :class:`FencedError` when the stored
    generation is newer, else writes conditional on that ETag (or on absence). A concurrent write
    makes the condition fail and the check runs again.
    """
    metadata = {GENERATION_KEY: str(generation), OWNER_KEY: processor_id}

    def upload(etag: str | None) -> str:
        if etag is None:
            result = blob_client.upload_blob(data, overwrite=False, metadata=metadata)
        else:
            result = blob_client.upload_blob(data, overwrite=True, metadata=metadata, etag=etag,
                                             match_condition=MatchConditions.IfNotModified)
        return str(result["etag"])

    etag = _unless_newer(blob_client, generation, processor_id, "write", upload, missing_ok=True)
    assert etag is not None  # upload() returns one
    return etag


def claim(blob_client: Any, generation: int, processor_id: str) -> None:
    """Raise the stored object's generation to ``generation`` without changing its content.

    A new owner calls this when it takes a task over; afterwards any write from an older generation
    is refused. A missing blob is left missing (the first :func:`write_fenced` creates it). Raises
    :class:`FencedError` when the object already carries a newer generation.
    """
    def stamp(etag: str | None) -> None:
        blob_client.set_blob_metadata({GENERATION_KEY: str(generation), OWNER_KEY: processor_id},
                                      etag=etag, match_condition=MatchConditions.IfNotModified)

    _unless_newer(blob_client, generation, processor_id, "claim", stamp, missing_ok=False)


def _unless_newer(blob_client: Any, generation: int, processor_id: str, verb: str,
                  change: Callable[[str | None], str | None], *, missing_ok: bool) -> str | None:
    """``change(etag)`` of the stored object, conditional on the ``etag`` just read, unless that object carries
    a newer generation (:class:`FencedError`); read and try again when a concurrent writer got in between
    (:class:`StoreConflictError` after ``_ATTEMPTS`` tries). A missing object (``etag`` None) is changed only
    when ``missing_ok``, else left missing (None)."""
    name = str(blob_client.blob_name)
    for _ in range(_ATTEMPTS):
        stored, etag = stored_generation(blob_client)
        if etag is None and not missing_ok:
            return None
        if stored > generation:
            raise FencedError(name, processor_id, generation, stored, "the stored object has a newer generation")
        try:
            with storage_call(f"{verb} {name}"):
                return change(etag)
        except ResourceExistsError:
            continue
        except HttpResponseError as exc:
            if exc.status_code in (409, 412):
                continue
            raise
    raise StoreConflictError(name, _ATTEMPTS)
