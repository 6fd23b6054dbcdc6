"""A job as the engine runs it: its typed config, inputs, task models, checkpoint store and clients, built once.

A host hands the engine a job's config once (with its secrets resolved: the engine never looks for them) and
the engine keeps an :class:`EngineJob` for as long as any task of that job runs in the process. Everything a
batch needs and that does not change between batches lives here: the parsed :class:`JobConfig`, the input
admins and offset operations, the task models, the checkpoint store, the commit listeners, and the job's
:class:`JobClients` (its producers, consumers and their metrics). A batch never re-derives any of them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sparza.config import Config
from sparza.engine.checkpoint import CheckpointStore, checkpoint_store_from_config
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig
from sparza.engine.model import TaskModel
from sparza.engine.partitions import StreamChange, changes_between, expansion_policy
from sparza.engine.planner import SspPosition
from sparza.metrics import MetricsRegistry
from sparza.streams import SystemStreamPartition
from sparza.systems import SystemConsumer, SystemProducer, get_system_factory

__all__ = ["EngineJob", "JobClients"]

_log = logging.getLogger(__name__)

_Client = TypeVar("_Client", SystemProducer, SystemConsumer)


class JobClients:
    """The producers and consumers of one job in this process, shared by its tasks here, and their metrics.

    A producer is built and started on first use and kept until the job leaves the process (or a failure
    makes a task drop it): it keeps open table handles, upload pools and, for Kafka, one transactional
    producer per task, so no batch pays a reconnect. Safe to use from several threads (a container commits
    its tasks beside their processing).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.metrics = MetricsRegistry()
        """What outlives a batch (producers, consumers, store backups) counts here; each result carries its
        :meth:`~sparza.metrics.MetricsRegistry.changes`, so every count reaches the driver once."""
        self._producers: dict[str, SystemProducer] = {}
        self._consumers: dict[str, SystemConsumer] = {}
        self._lock = threading.Lock()

    def producer(self, system: str) -> SystemProducer:
        """The started producer of ``system`` shared by this process's tasks of the job."""
        return self._started(self._producers, system,
                             lambda: get_system_factory(self.config, system).get_producer(system, self.config,
                                                                                         self.metrics))

    def drop_producer(self, system: str, producer: SystemProducer) -> None:
        """Forget ``producer`` (after a failure it may be in a bad state); the caller stops it."""
        with self._lock:
            if self._producers.get(system) is producer:
                del self._producers[system]

    def consumer(self, system: str) -> SystemConsumer:
        """The started consumer of ``system`` for the job (consumers cache Delta logs and Kafka connections)."""
        return self._started(self._consumers, system,
                             lambda: get_system_factory(self.config, system).get_consumer(system, self.config,
                                                                                         self.metrics))

    def _started(self, cache: dict[str, _Client], system: str, build: Callable[[], _Client]) -> _Client:
        with self._lock:
            client = cache.get(system)
            if client is None:
                client = build()
                client.start()
                cache[system] = client
            return client

    def close(self) -> None:
        """Stop every producer and consumer (what a task did not flush is dropped: it was never committed)."""
        with self._lock:
            producers, self._producers = list(self._producers.values()), {}
            consumers, self._consumers = list(self._consumers.values()), {}
        for producer in producers:
            with contextlib.suppress(Exception):
                producer.stop()
        for consumer in consumers:
            with contextlib.suppress(Exception):
                consumer.stop()


class EngineJob:
    """One job in this process (see the module docstring).

    ``generation`` fences every task-checkpoint write of the run (the standalone claim's epoch or the
    coordinator's job-model generation). ``start_positions`` are the upcoming offsets when the job started
    (where bounded streams end and bootstrap streams must reach); ``targets`` (``--once``) the offsets no task
    plans past. ``task_count`` is the job's number of tasks (control messages need it).
    """

    def __init__(self, config: Config, *, generation: int = 0, task_count: int | None = None,
                 start_positions: Mapping[str, str] | None = None, targets: Mapping[str, str] | None = None,
                 clients: JobClients | None = None) -> None:
        self.job = JobConfig.from_config(config)
        self.config = self.job.config
        self.generation = generation
        self.clients = clients if clients is not None else JobClients(self.config)
        self.inputs = InputSystems(self.job, metrics=self.clients.metrics)
        self.models: dict[str, TaskModel] = {m.name: m for m in self.inputs.task_models()}
        self.task_count = task_count if task_count is not None else len(self.models)
        self.checkpoints: CheckpointStore = checkpoint_store_from_config(self.config, self.job.job_key,
                                                                         metrics=self.clients.metrics)
        self.start_positions = ({SystemStreamPartition.parse(k): v for k, v in start_positions.items()}
                                if start_positions is not None else None)
        self.targets = ({SystemStreamPartition.parse(k): v for k, v in targets.items()}
                        if targets is not None else None)
        self.expansion = expansion_policy(self.config)
        """``job.partition.expansion`` decided (:mod:`sparza.engine.partitions`)."""
        self.partition_changes: list[StreamChange] = []
        """Input streams whose partition count the last metadata read found changed against the counts the task models
        are grouped for (empty: none): the job's tasks stop or regroup
        (:func:`~sparza.engine.partitions.check_running`)."""
        self._broadcast = (frozenset(s.stream for s in self.job.inputs if s.broadcast)
                           - frozenset(s.stream for s in self.job.inputs if not s.broadcast))
        self._said: set[str] = set()
        self._positions: Mapping[SystemStreamPartition, SspPosition] | None = None
        self._previous: Mapping[SystemStreamPartition, SspPosition] = {}
        self._reads = 0
        self._moved_at: dict[SystemStreamPartition, int] = {}  # SSP -> the read that last found its upcoming moved
        self._last_move = 0  # the last read that found any SSP moved
        self._positions_lock = threading.Lock()
        self._listeners: list[Any] | None = None

    @property
    def key(self) -> str:
        """``<job.name>-<job.id>``: the job's identity in checkpoints, blob paths and the channel."""
        return self.job.job_key

    @property
    def ops(self) -> Mapping[str, Any]:
        """System → :class:`~sparza.engine.offsets.OffsetOps` of the job's inputs."""
        return self.inputs.ops

    def positions(self) -> Mapping[SystemStreamPartition, SspPosition]:
        """The inputs' oldest and upcoming offsets as last read: one metadata read per poll for all of the job's
        tasks in this process (:meth:`refresh` starts the next poll)."""
        with self._positions_lock:
            found = self._positions
            if found is None:
                found = self._positions = self.inputs.positions()
                before = self._previous
                self._reads += 1
                for ssp, pos in found.items():
                    if (old := before.get(ssp)) is None or old.upcoming != pos.upcoming:
                        self._moved_at[ssp] = self._last_move = self._reads
                self._previous = found
                # Within one poll: a stream that gained (or lost) partitions stops or regroups the job's tasks.
                self.partition_changes = changes_between(self.inputs.partition_counts, found, self._broadcast)
                for change in self.partition_changes:
                    if change.broadcast and change.describe() not in self._said:
                        self._said.add(change.describe())
                        _log.warning("job %s: broadcast input %s; every task still reads the partitions "
                                     "task.broadcast.inputs names (name the new ones there to read them)", self.key,
                                     change.describe())
            return found

    @property
    def reads(self) -> int:
        """How many times :meth:`positions` read the inputs (the number of the last read)."""
        with self._positions_lock:
            return self._reads

    def moved_since(self, ssps: frozenset[SystemStreamPartition], read: int) -> bool:
        """True when a read after read number ``read`` found the upcoming offset of one of ``ssps`` moved. Counted
        per read, not between the last two: a read outside a container's pass (a task's start re-reading a stale
        end) must not hide a move from a task that went idle before it (issue 40)."""
        with self._positions_lock:
            if self._last_move <= read:
                return False
            return any(self._moved_at.get(ssp, 0) > read for ssp in ssps)

    def refresh(self) -> None:
        """The next :meth:`positions` reads the inputs again."""
        with self._positions_lock:
            self._positions = None

    def commit_listeners(self) -> list[Any]:
        """The job's :class:`~sparza.engine.commit.CommitListener` objects (``task.commit.listeners``), built once."""
        if self._listeners is None:
            from sparza.engine.commit import commit_listeners

            self._listeners = commit_listeners(self.config)
        return self._listeners

    def close(self) -> None:
        """Stop the job's clients and admins (its tasks left this process)."""
        self.clients.close()
        self.inputs.close()
