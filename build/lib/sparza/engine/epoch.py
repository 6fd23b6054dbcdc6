"""The epoch plan: what the driver hands every container of an epoch (the container mode's contract).

The driver (:mod:`sparza.runtime.driver.epochs`) builds an :class:`EpochPlan` per epoch; it travels as JSON in
the Spark job's closure to each container (:mod:`sparza.engine.container`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EpochJob", "EpochPlan"]


@dataclass
class EpochJob:
    """One job (an application stage, or a task.class job) in an epoch: what its containers need.

    ``config``: the job config without its secrets (they come from the secrets file). ``tasks``: the tasks of
    this processor. ``locations``: task → the location of its last commit (from its checkpoint).
    ``start_positions``: SSP → upcoming offset when the job started (where bounded streams end and bootstrap
    streams must reach). ``targets``: ``--once`` only, SSP → offset not to plan past. ``drain``: the drain
    requested when the epoch was planned (:meth:`sparza.engine.drain.DrainRequest.to_json`), or None; a drain
    requested while the epoch runs reaches the containers over the channel.
    """

    config: dict[str, str]
    tasks: list[str]
    task_count: int
    generation: int
    start_positions: dict[str, str]
    targets: dict[str, str] | None = None
    locations: dict[str, str] = field(default_factory=dict)
    drain: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        """``<job.name>-<job.id>``."""
        return f"{self.config.get('job.name')}-{self.config.get('job.id', '1')}"


@dataclass
class EpochPlan:
    """What the driver gives every container of an epoch (JSON-able: it travels in the Spark job's closure)."""

    epoch: int
    jobs: list[EpochJob]
    duration_ms: int
    affinity: bool = True
    channel: tuple[str, int, str] | None = None  # host, port, token
    driver_timeout_ms: int = 10_000  # a container whose driver was silent this long ends its epoch

    def to_json(self) -> str:
        """The plan as JSON."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EpochPlan:
        """Inverse of :meth:`to_json`."""
        body = json.loads(text)
        jobs = [EpochJob(**j) for j in body.pop("jobs")]
        channel = body.pop("channel")
        return cls(jobs=jobs, channel=tuple(channel) if channel else None, **body)  # type: ignore[arg-type]


