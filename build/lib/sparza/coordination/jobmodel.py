"""JobModel: which processor owns which tasks, under a version that is also the fencing generation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JobModel"]


@dataclass(frozen=True)
class JobModel:
    """Version ``version`` of the job's task assignment: processor id → task names.

    Every processor of the model appears as a key, also with no tasks (more processors than tasks).
    The version only grows; a processor works under the version it adopted (its *generation*).
    """

    version: int
    assignments: Mapping[str, list[str]] = field(default_factory=dict)

    @property
    def processors(self) -> list[str]:
        """The processors of this model, sorted."""
        return sorted(self.assignments)

    def tasks_of(self, processor_id: str) -> list[str]:
        """The tasks ``processor_id`` owns (empty when it owns none or is not in the model)."""
        return list(self.assignments.get(processor_id, []))

    def owner_of(self, task: str) -> str | None:
        """The processor that owns ``task``, if any."""
        for pid, tasks in self.assignments.items():
            if task in tasks:
                return pid
        return None

    @property
    def tasks(self) -> list[str]:
        """Every assigned task."""
        return [t for tasks in self.assignments.values() for t in tasks]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"version": self.version, "assignments": {p: list(t) for p, t in sorted(self.assignments.items())}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobModel:
        """Inverse of :meth:`to_dict`."""
        return cls(int(data["version"]), {str(p): [str(t) for t in ts] for p, ts in data["assignments"].items()})
