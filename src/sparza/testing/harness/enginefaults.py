"""The engine's faults on the in-process engine (container mode): what a host meets, injected around real objects.

A :class:`~sparza.testing.TestRunner` in the container mode runs the engine's manager and containers in this
process (:class:`~sparza.engine.inprocess.InProcessHost`). These faults land on them:

==================  =================================================================================================
``kill``            a container dies inside a commit: :class:`~sparza.engine.inprocess.ContainerKilled` is raised by
                    a wrapper around the container's real checkpoint store, just before (the batch's output flushed,
                    its intent open) or just after (committed, cleanup not done) its n-th checkpoint write; the
                    manager moves its tasks to a new container, which restores them from their checkpoints
``add``             a new container joins mid-commit (a new executor): tasks move onto it one by one (hand-over)
``remove``          the container running a commit is taken away mid-commit: it finishes, commits, its tasks move
``slow``            one task's checkpoint writes take longer while the container's commits run in their threads
                    (``threaded_commits``): the other tasks go on processing beside the slow commit
==================  =================================================================================================

In every case the run must finish by itself (the engine recovers in place, no new process) with the exact output.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENGINE_FAULTS", "FaultyCheckpoints", "KillPlan", "SlowPlan", "WritePlan", "wrap_checkpoints"]

ENGINE_FAULTS = ("kill", "add", "remove", "slow")
"""The in-process engine faults (see the module docstring)."""


class WritePlan:
    """What happens around the checkpoint writes of the wrapped stores (see :class:`FaultyCheckpoints`)."""

    def before(self, checkpoint: Any) -> int:
        """Right before a write of ``checkpoint`` (a :class:`~sparza.engine.checkpoint.TaskCheckpoint`); returns the
        write's number (commits in threads write at once: :meth:`after` gets the number of its own write)."""
        return 0

    def after(self, checkpoint: Any, number: int) -> None:
        """Right after write ``number`` landed."""


@dataclass
class KillPlan(WritePlan):
    """Kill the container writing the ``skip + 1``-th checkpoint (of any task), ``before`` it lands or after."""

    skip: int
    before_write: bool
    writes: int = 0
    where: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _maybe_kill(self, checkpoint: Any, when: str, number: int) -> None:
        from sparza.engine.inprocess import ContainerKilled

        with self.lock:
            if self.where is not None or number != self.skip + 1:
                return
            intent = checkpoint.open_intent()
            what, batch = ("intent", intent.batch) if intent is not None else ("checkpoint", checkpoint.batch)
            self.where = f"{when} the {what} write of batch {batch} of {checkpoint.task}"
        raise ContainerKilled(f"container killed {self.where}")

    def before(self, checkpoint: Any) -> int:
        """Count the write; kill before it when it is the chosen one."""
        with self.lock:
            self.writes += 1
            number = self.writes
        if self.before_write:
            self._maybe_kill(checkpoint, "before", number)
        return number

    def after(self, checkpoint: Any, number: int) -> None:
        """Kill after it when it is the chosen one."""
        if not self.before_write:
            self._maybe_kill(checkpoint, "after", number)


@dataclass
class SlowPlan(WritePlan):
    """Delay the first ``count`` checkpoint writes of ``task`` by ``delay_s``, and count the writes of other tasks
    that started while one of them was in flight (commits beside a slow commit)."""

    task: str
    delay_s: float = 0.02
    count: int = 6
    slowed: int = 0
    beside: int = 0
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def before(self, checkpoint: Any) -> int:
        """Sleep before a write of the chosen task; count others' writes meanwhile."""
        with self.lock:
            mine = checkpoint.task == self.task and self.slowed < self.count
            if mine:
                self.slowed += 1
                self.in_flight += 1
            elif self.in_flight:
                self.beside += 1
        if mine:
            try:
                time.sleep(self.delay_s)
            finally:
                with self.lock:
                    self.in_flight -= 1
        return 0


class FaultyCheckpoints:
    """A wrapper around a real checkpoint store (:class:`~sparza.engine.checkpoint.CheckpointStore`): every call goes
    to it; ``write`` runs ``plan.before`` and ``plan.after`` around the real write."""

    def __init__(self, real: Any, plan: WritePlan) -> None:
        self.real = real
        self.plan = plan

    def write(self, checkpoint: Any, expected_etag: str | None) -> str:
        """The real write, between the plan's two points."""
        number = self.plan.before(checkpoint)
        etag: str = self.real.write(checkpoint, expected_etag)
        self.plan.after(checkpoint, number)
        return etag

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def wrap_checkpoints(plan: WritePlan) -> Any:
    """An engine wrapper (:meth:`sparza.testing.TestRunner.wrap_engines`) putting ``plan`` around the engine's
    checkpoint store."""

    def wrap(engine: Any) -> None:
        engine.checkpoints = FaultyCheckpoints(engine.checkpoints, plan)

    return wrap
