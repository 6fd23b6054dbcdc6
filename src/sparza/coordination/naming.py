"""Names of the Azure resources one job's coordination uses, derived from ``job.name`` and ``job.id``.

Azure limits container names to 3-63 lowercase letters, digits and single hyphens and table names
to 3-63 letters and digits starting with a letter; long job names are shortened with a hash so two
jobs never share resources.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sparza.coordination.settings import CoordinationConfig

__all__ = ["CoordinationResources"]

_MAX = 63


def _fit(prefix: str, body: str, full: str) -> str:
    name = prefix + body
    if len(name) <= _MAX:
        return name
    digest = hashlib.sha1(full.encode()).hexdigest()[:10]
    return prefix + body[: _MAX - len(prefix) - len(digest)] + digest


@dataclass(frozen=True, slots=True)
class CoordinationResources:
    """The container, blobs and table of one job's coordination."""

    container: str
    table: str
    leader_blob: str = "leader.lease"
    store_blob: str = "jobmodel.json"
    lock_prefix: str = "locks/"
    note_prefix: str = "notes/"

    @classmethod
    def for_job(cls, cfg: CoordinationConfig) -> CoordinationResources:
        """Resources for ``cfg``'s job: container ``sparza-coord-<id>``, table ``sparzacoord<id>``."""
        full = f"{cfg.job_name}\x00{cfg.job_id}"
        rid = cfg.resource_id
        return cls(container=_fit("sparza-coord-", rid, full), table=_fit("sparzacoord", rid, full))

    def note_blob(self, processor_id: str) -> str:
        """The blob that holds ``processor_id``'s note (:class:`~sparza.coordination.MemberNotes`)."""
        return self.note_prefix + processor_id

    def lock_blob(self, name: str) -> str:
        """The blob that backs the lock ``name``."""
        return self.lock_prefix + name
