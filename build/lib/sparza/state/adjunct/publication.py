"""Where a broadcast store's builder announces its snapshots, and where readers find them.

A *publication* is a small JSON blob in the blob store: the batch it was taken after, the
snapshot-index id, the dataset version and bootstrap state. Its blob name starts with the batch
number, zero-padded, so a reader lists the publications of a store and takes the newest one taken
*before* its current batch: every task of the job reads the same snapshot during a batch, whichever
host it runs on, and never one the builder is publishing during that same batch.

A publication's name carries the coordinator generation of the builder that made it. A builder that lost its
task to a newer processor while paused (it is fenced at its task checkpoint, after publishing) leaves the newer
generation's publications alone, and the newer generation's first publication removes the older ones: they may
name a snapshot that was never committed, which gc purges.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from sparza.blobstore import BlobStoreManager, DeletedError
from sparza.blobstore.api import Metadata, blob_name_for

__all__ = ["Publication", "PublicationBoard"]

_log = logging.getLogger(__name__)
_DIR = "adjunct-publication"


@dataclass(frozen=True, slots=True)
class Publication:
    """One published snapshot of a broadcast store, taken at the end of batch ``batch``."""

    store: str
    batch: int
    snapshot: str
    version: int | None = None
    bootstrapped: bool = True
    applied: int = 0
    offsets: dict[str, str] = field(default_factory=dict)
    generation: int = 0

    def to_bytes(self) -> bytes:
        """The stored JSON form."""
        return json.dumps(asdict(self), sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Publication:
        """Parse :meth:`to_bytes`'s output."""
        body: dict[str, Any] = json.loads(data.decode("utf-8"))
        return cls(str(body["store"]), int(body["batch"]), str(body["snapshot"]), body.get("version"),
                   bool(body.get("bootstrapped", True)), int(body.get("applied", 0)),
                   {str(k): str(v) for k, v in body.get("offsets", {}).items()}, int(body.get("generation", 0)))


class PublicationBoard:
    """The publications of one broadcast store of one job (written by its builder task)."""

    def __init__(self, blob_store: BlobStoreManager, job_name: str, job_id: str, builder_task: str,
                 store: str) -> None:
        self.blob_store = blob_store
        self.store = store
        self._meta = Metadata(payload_path=_DIR, job_name=job_name, job_id=job_id, task_name=builder_task,
                              store_name=store)
        probe = blob_name_for(Metadata(payload_path=f"{_DIR}/x", job_name=job_name, job_id=job_id,
                                       task_name=builder_task, store_name=store))
        self.prefix = probe.rsplit("/", 1)[0] + "/"

    def _listing(self, *, deleted: bool = False) -> list[tuple[int, str]]:
        """``(batch, blob id)`` of the live publications (of the deleted but still readable ones with
        ``deleted``), oldest first."""
        return [(batch, blob_id) for batch, _, blob_id in self._entries(deleted=deleted)]

    def _entries(self, *, deleted: bool = False) -> list[tuple[int, int, str]]:
        """``(batch, generation, blob id)`` parsed from the names (``<batch>[.g<generation>].json``)."""
        out: list[tuple[int, int, str]] = []
        for info in self.blob_store.list_blobs(self.prefix):
            if (info.deleted_at_ms is not None) != deleted:
                continue
            parts = info.blob_id[len(self.prefix):].split(".")
            if not parts[0].isdigit():
                continue
            generation = int(parts[1][1:]) if len(parts) > 2 and parts[1][:1] == "g" and parts[1][1:].isdigit() else 0
            out.append((int(parts[0]), generation, info.blob_id))
        return sorted(out)

    def publish(self, publication: Publication) -> str | None:
        """Store ``publication``, replacing any left by an uncommitted attempt at the same or a later batch and
        every one of an older generation, and keep only the previous one of its generation besides it.

        Returns the publication's blob id, or None when a publication of a newer generation exists: this
        builder has lost its task to a newer processor and must not hide what that one published."""
        entries = self._entries()
        newer = [gen for _, gen, _ in entries if gen > publication.generation]
        if newer:
            _log.warning("broadcast store %s: not publishing batch %d of generation %d: generation %d has "
                         "published since (this processor lost the builder task)", self.store, publication.batch,
                         publication.generation, max(newer))
            return None
        for batch, gen, blob_id in entries:
            if batch >= publication.batch or gen < publication.generation:
                self._delete(blob_id)
        name = f"{publication.batch:012d}.g{publication.generation}.json"
        meta = Metadata(payload_path=f"{_DIR}/{name}", job_name=self._meta.job_name,
                        job_id=self._meta.job_id, task_name=self._meta.task_name, store_name=self.store)
        blob_id = self.blob_store.put(io.BytesIO(publication.to_bytes()), meta)
        self.blob_store.remove_ttl(blob_id, meta)
        older = [(batch, blob_id) for batch, gen, blob_id in entries
                 if batch < publication.batch and gen == publication.generation]
        for _, old_id in older[:-1]:  # keep the one before: readers of this batch use it
            self._delete(old_id)
        return blob_id

    def latest_before(self, batch: int | None) -> Publication | None:
        """The newest publication taken before batch ``batch`` (None: the newest of all), or None.

        When no live publication qualifies, the deleted ones still readable are asked too: a publication
        :meth:`publish` superseded is still the right one for a task that runs an older batch again, and one
        deleted by mistake (an operator, a lifecycle rule: SAMZA-2787) must not make the store look empty.
        """
        found = self._newest(self._listing(), batch, get_deleted=False)
        if found is None:
            found = self._newest(self._listing(deleted=True), batch, get_deleted=True)
            if found is not None:
                _log.warning("broadcast store %s: no live publication before batch %s; reading the deleted "
                             "publication of batch %d (snapshot %s)", self.store, batch, found.batch, found.snapshot)
        return found

    def _newest(self, listing: list[tuple[int, str]], batch: int | None, *, get_deleted: bool) -> Publication | None:
        for found_batch, blob_id in reversed(listing):
            if batch is not None and found_batch >= batch:
                continue
            buf = io.BytesIO()
            try:
                self.blob_store.get(blob_id, buf, self._meta, get_deleted=get_deleted)
            except DeletedError:
                continue  # deleted (or purged) between listing and reading: an older one will do
            return Publication.from_bytes(buf.getvalue())
        return None

    def _delete(self, blob_id: str) -> None:
        try:
            self.blob_store.delete(blob_id, self._meta)
        except DeletedError:
            pass
