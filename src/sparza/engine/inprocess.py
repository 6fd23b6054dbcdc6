"""The container mode in this process: the engine's manager and containers without Spark, step by step.

:class:`InProcessHost` is a host like Spark's (:mod:`sparza.runtime.driver.containers`): the same
:class:`~sparza.engine.manager.ContainerManager` places tasks on the same :class:`~sparza.engine.container.Container`
objects, which run the same task and commit code; only the transport (direct calls instead of a TCP channel) and
the launcher (objects in this process instead of Spark tasks) differ. :class:`sparza.testing.TestRunner` and the
in-process fault harness use it, so what they prove is the path users run.

It is deterministic by default: :meth:`InProcessHost.step` runs one round (the manager, then every container
until nothing moves), commits run inline, and time comes from the clocks given. ``threaded_commits=True`` runs each
container's commits (and restores) in its thread pools instead, as on Spark (then rounds wait for the commits they
started).
Faults a host can meet are methods: :meth:`~InProcessHost.kill` (a container's process dies: what it did not
commit is gone), :meth:`~InProcessHost.lose_executor` (its executor goes too: the replacement waits for a slot),
:meth:`~InProcessHost.add_container` (a new executor: tasks move onto it one by one) and
:meth:`~InProcessHost.remove_container` (a container stops: its tasks move).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from sparza.config import Config
from sparza.engine.container import CommitPool, Container, InlineCommits, ThreadedCommits
from sparza.engine.manager import ContainerManager, JobMember
from sparza.engine.messages import Command, Event, Hello, StopContainer
from sparza.metrics import MetricsRegistry

__all__ = ["ContainerKilled", "InProcessHost", "InProcessJob"]


class ContainerKilled(BaseException):
    """Raised (by a fault injector, e.g. inside a commit step) to kill the container running it at that point:
    the host drops the container as if its process died there."""


class _Link:
    def __init__(self, container: Container) -> None:
        self.container = container

    def send(self, command: Command) -> None:
        self.container.command(command)


class _Host:
    """A container's host in this process: its events go straight to the manager."""

    def __init__(self, manager: ContainerManager, index: int) -> None:
        self.manager = manager
        self.index = index

    def report(self, event: Event) -> None:
        self.manager.event(self.index, event)

    def alive(self) -> bool:
        return True


class _Launcher:
    def __init__(self, host: InProcessHost) -> None:
        self.host = host

    def slots(self) -> int:
        return self.host.slots

    def launch(self, index: int) -> None:
        self.host._launch(index)

    def close(self) -> None:
        pass


class InProcessHost:
    """See the module docstring. ``slots``: how many containers it may run (as executor slots on Spark)."""

    def __init__(self, *, slots: int = 1, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000), threaded_commits: bool = False,
                 restore_threads: int = 2, resolve: Callable[[Config], Config] = lambda config: config) -> None:
        self.slots = slots
        self.clock = clock
        self.wall_ms = wall_ms
        self.threaded_commits = threaded_commits
        self.restore_threads = restore_threads  # with threaded_commits (job.container.restore.threads on Spark)
        self.resolve = resolve
        self.manager = ContainerManager(_Launcher(self), clock=clock, ping_s=3600.0, linger_s=0.0)
        self.containers: dict[int, Container] = {}
        self.killed: list[int] = []
        self.pending: list[int] = []
        """Containers launched that wait for a slot (:meth:`lose_executor`), as a Spark job waits for a free core."""
        self._held = 0

    def _launch(self, index: int) -> None:
        if self._held:
            self._held -= 1
            self.pending.append(index)
            return
        commits: CommitPool = ThreadedCommits(8) if self.threaded_commits else InlineCommits()
        # Else inline too, with the commits.
        restores = ThreadedCommits(self.restore_threads) if self.threaded_commits else None
        container = Container(_Host(self.manager, index), index=index, clock=self.clock, wall_ms=self.wall_ms,
                              resolve=self.resolve, commits=commits, restores=restores)
        self.containers[index] = container
        self.manager.connected(index, _Link(container))
        self.manager.event(index, Hello(index, socket.gethostname(), os.getpid()))

    def join(self, member: JobMember) -> None:
        """Run ``member``'s tasks here (an :class:`InProcessJob` leaves by itself once every task is done)."""
        if isinstance(member, InProcessJob):
            member.leave = lambda: self.manager.leave(member.key)
        self.manager.join(member)

    def step(self, max_passes: int = 100, *, run_due: bool = True) -> bool:
        """One round: the manager, then every container, until nothing moves; True when anything happened.
        ``run_due=False``: no batch starts (commands, finished commits and releases only).

        A :class:`ContainerKilled` raised inside a container (a fault injected there) kills that container."""
        progressed = False
        for _ in range(max_passes):
            self.manager.step()
            moved = False
            for index, container in list(self.containers.items()):
                try:
                    if container.step(run_due=run_due):
                        moved = True
                except ContainerKilled:
                    self.kill(index)
                    moved = True
            if self.threaded_commits:
                moved = self._wait_commits() or moved
            if self._finish_stopped():
                moved = True
            if not moved and self.manager._inputs.empty():
                return progressed
            progressed = True
        return progressed

    def _wait_commits(self) -> bool:
        waited = False
        for container in self.containers.values():
            while not container.idle:
                waited = True
                time.sleep(0.001)
        return waited

    def kill(self, index: int) -> None:
        """Container ``index``'s process dies: its open stores are closed without a commit, what its tasks sent is
        abandoned (a dead process flushes nothing), and the manager hears it is lost."""
        container = self.containers.pop(index, None)
        if container is None:
            return
        # Commits of other tasks still running in the container's threads cannot be stopped here (a dead process's
        # threads die with it): let them finish first, as if the process died right after them.
        while not container.idle:
            time.sleep(0.001)
        for task in list(container.tasks.values()):
            with contextlib.suppress(Exception):
                task.instance.abort()  # a dead process flushes nothing...
            with contextlib.suppress(Exception):
                task.instance.stores.close_committed()  # ...and holds no lock on its stores
        for job in container.jobs.values():
            with contextlib.suppress(Exception):
                job.engine.close()
        self.killed.append(index)
        self.manager.lost(index, "its process was killed")

    def lose_executor(self, index: int) -> None:
        """Container ``index``'s executor is lost with it, and the host still counts its slot (Spark's count of
        executor cores lags the loss): the replacement the manager launches for it waits for a core that does not
        come (a Spark job pending) until :meth:`executor_back`."""
        self._held += 1
        self.kill(index)

    def executor_back(self) -> None:
        """The lost executor is back: the containers waiting for its slot start (the manager hears them join)."""
        self._held = 0
        pending, self.pending = self.pending, []
        for index in pending:
            self._launch(index)

    def add_container(self) -> None:
        """One more slot (a new executor): the manager starts a container there and moves tasks onto it."""
        self.slots += 1

    def remove_container(self, index: int) -> None:
        """Container ``index`` stops (its executor is taken away cleanly): it commits, its tasks move."""
        self.slots = max(1, self.slots - 1)
        container = self.containers.get(index)
        if container is not None:
            container.command(StopContainer())

    def _finish_stopped(self) -> bool:
        """Containers that stopped and released everything end (their Spark task would return)."""
        ended = False
        for index, container in list(self.containers.items()):
            if container.stopping and not container.tasks:
                container.close()
                del self.containers[index]
                self.manager.lost(index, "it stopped")
                ended = True
        return ended

    def close(self) -> None:
        """Stop every container (each commits what it runs) and close them."""
        for container in self.containers.values():
            container.command(StopContainer())
        for _ in range(1000):
            self.step()
            if not self.containers:
                break
        for container in list(self.containers.values()):
            container.close()
        self.containers.clear()

    def owners(self, job: str) -> dict[str, Any]:
        """Task → the container index running it now."""
        return self.manager.owners(job)


class InProcessJob:
    """A job in an :class:`InProcessHost` (the :class:`~sparza.engine.manager.JobMember` a host's runner would be): it
    keeps every event its containers reported, for the caller to read.

    ``config`` is the job's config (secrets and all: nothing leaves this process); ``targets`` (``--once``) the
    offsets no task plans past, by SSP; ``max_restarts`` how many containers may be lost in a row without a commit.
    """

    def __init__(self, config: Config, *, generation: int = 0, once: bool = False, affinity: bool = True,
                 count: int | None = None, max_restarts: int = 3, drain: dict[str, Any] | None = None,
                 metrics: MetricsRegistry | None = None) -> None:
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.inputs import InputSystems
        from sparza.engine.jobconfig import JobConfig

        job = JobConfig.from_config(config)
        self.config = job.config
        self.key = job.job_key
        inputs = InputSystems(job, metrics=metrics)
        self.tasks = [m.name for m in inputs.task_models()]
        self.start_positions = {str(ssp): pos.upcoming for ssp, pos in inputs.positions().items()}
        inputs.close()
        self.generation = generation
        self.once = once
        self.affinity = affinity
        self.count = count
        self.max_restarts = max_restarts
        self.drain = drain
        self.checkpoints = checkpoint_store_from_config(self.config, self.key, metrics=metrics)
        self.events: list[Event] = []
        self.notices: list[str] = []
        self.done: dict[str, str] = {}
        self.lost = 0
        self.gave_up = False
        self.error: BaseException | None = None
        """Why the manager itself failed, if it did (:meth:`manager_failed`)."""
        self.has_left = False
        self.leave: Callable[[], None] = lambda: None
        """Set by the host it joins: ask it to stop the job (its tasks finish their batches and are released)."""

    def add_job(self) -> Any:
        """What every container hears of the job."""
        from sparza.engine.messages import AddJob

        return AddJob(job=self.key, config=dict(self.config.items()), generation=self.generation,
                      task_count=len(self.tasks), start_positions=dict(self.start_positions),
                      targets=dict(self.start_positions) if self.once else None, drain=self.drain)

    def last_locations(self) -> dict[str, str]:
        """Task → where it last committed (from the task checkpoints)."""
        return {t: cp.location for t, cp in self.checkpoints.read_all().items() if cp.location}

    def on_event(self, event: Event) -> None:
        """Keep the event; once every task is done (ended, caught up under ``once``, drained, failed), leave."""
        from sparza.engine.messages import TaskDone

        self.events.append(event)
        if isinstance(event, TaskDone) and event.why != "stopped":
            self.done[event.task] = event.why
            if all(task in self.done for task in self.tasks):
                self.leave()

    def results(self) -> list[Any]:
        """Every batch result reported, in order."""
        from sparza.engine.messages import TaskResult

        return [e.result for e in self.events if isinstance(e, TaskResult)]

    def on_notice(self, line: str) -> None:
        """Keep the line."""
        self.notices.append(line)

    def container_lost(self, reason: str) -> bool:
        """Count it; False once more were lost than ``max_restarts``."""
        self.lost += 1
        self.notices.append(reason)
        if self.lost > self.max_restarts:
            self.gave_up = True
            return False
        return True

    def manager_failed(self, error: BaseException) -> None:
        """Keep the manager's failure; the job gives up."""
        self.notices.append(str(error))
        self.error = error
        self.gave_up = True

    def left(self) -> None:
        """The job left every container."""
        self.has_left = True
