"""The job's input systems as the driver sees them: admins, partition counts and current positions."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from sparza.engine.jobconfig import JobConfig
from sparza.engine.model import TaskModel, build_task_models
from sparza.engine.offsets import OffsetOps
from sparza.engine.partitions import Grouping, settle_partitions
from sparza.engine.planner import SspPosition
from sparza.metrics import MetricsRegistry
from sparza.streams import SystemStream, SystemStreamPartition
from sparza.systems import SupportsPartitionCount, get_system_factory

__all__ = ["InputSystems"]


class InputSystems:
    """Admins of the systems the job reads, with the calls the planner and task model need."""

    def __init__(self, job: JobConfig, *, metrics: MetricsRegistry | None = None) -> None:
        self.job = job
        self.metrics = metrics
        """Where the storage requests of the job's partition record are counted (None: not counted)."""
        self.admins: dict[str, Any] = {
            system: get_system_factory(job.config, system).get_admin(system, job.config) for system in job.systems
        }
        self.ops = {system: OffsetOps(admin) for system, admin in self.admins.items()}

    def close(self) -> None:
        """Release the admins (and their clients: a Kafka admin keeps connections to its brokers).

        Called by :meth:`JobRunner.close`: Spark's ``foreachBatch`` callback keeps the runner, and so
        these admins, reachable until the JVM exits, long after the job ended.
        """
        self.admins.clear()
        self.ops.clear()

    @cached_property
    def partition_counts(self) -> dict[SystemStream, int]:
        """Partition count of every input stream."""
        out: dict[SystemStream, int] = {}
        for spec in self.job.inputs:
            admin = self.admins[spec.stream.system]
            if isinstance(admin, SupportsPartitionCount):
                out[spec.stream] = int(admin.partition_count(spec.stream.stream))
            else:
                meta = admin.get_system_stream_metadata({spec.stream.stream})[spec.stream.stream]
                out[spec.stream] = meta.partition_count
        return out

    @cached_property
    def grouping(self) -> Grouping:
        """How partitions become tasks this run (:mod:`sparza.engine.partitions`): settled against the job's record
        of its partition counts, which it writes when new or changed. Raises
        :class:`~sparza.engine.partitions.PartitionCountChangedError` when a count changed and
        ``job.partition.expansion`` says to stop."""
        from sparza.engine.checkpoint import checkpoint_store_from_config

        store = checkpoint_store_from_config(self.job.config, self.job.job_key, metrics=self.metrics)
        broadcast = (frozenset(spec.stream for spec in self.job.inputs if spec.broadcast)
                     - frozenset(spec.stream for spec in self.job.inputs if not spec.broadcast))
        return settle_partitions(self.job.config, self.job.job_key, self.partition_counts, store, broadcast=broadcast)

    def task_models(self) -> list[TaskModel]:
        """Every task of the job (tasks are partitions, grouped as :attr:`grouping` says)."""
        return build_task_models(self.job, self.partition_counts, self.grouping)

    def positions(self) -> dict[SystemStreamPartition, SspPosition]:
        """Oldest and upcoming offset of every input SSP, fresh from the admins."""
        out: dict[SystemStreamPartition, SspPosition] = {}
        by_system: dict[str, set[str]] = {}
        for spec in self.job.inputs:
            by_system.setdefault(spec.stream.system, set()).add(spec.stream.stream)
        for system, streams in sorted(by_system.items()):
            metadata = self.admins[system].get_system_stream_metadata(streams)
            for stream, meta in metadata.items():
                for partition, pm in meta.partitions.items():
                    out[SystemStreamPartition(system, stream, partition)] = SspPosition(pm.oldest, pm.upcoming)
        return out
