"""The task model: tasks are partitions (Samza's GroupByPartition), broadcast inputs go to every task.

Task ``Partition N`` owns partition N of every non-broadcast input that has it, plus every
broadcast SSP. Under SEP-5 partition-expansion grouping (:mod:`sparza.engine.partitions`) a partition a stream
gained joins the task of ``partition % the count its tasks are grouped by``. The SSPs of a task are read in a
fixed order each batch: bootstrap streams first, then adjunct-store streams, then the rest, each sorted by
(system, stream, partition) — so a replay reads the same sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparza.engine.jobconfig import InputSpec, JobConfig
from sparza.engine.partitions import Grouping
from sparza.errors import ConfigError
from sparza.streams import SystemStream, SystemStreamPartition

__all__ = ["TaskModel", "build_task_models", "task_name"]


def task_name(partition: int) -> str:
    """The name of the task that owns partition ``partition``: ``Partition N`` as in Samza."""
    return f"Partition {partition}"


@dataclass(frozen=True, slots=True)
class TaskModel:
    """One task: its name, its partition number and its input SSPs in read order; ``new`` are the SSPs of partitions
    their streams gained after the job first read them (read from their oldest offset when no checkpoint names them)."""

    name: str
    partition: int
    ssps: tuple[SystemStreamPartition, ...]
    new: frozenset[SystemStreamPartition] = frozenset()

    def ssp_keys(self) -> list[str]:
        """The SSPs as ``system.stream#N`` strings, in read order."""
        return [str(s) for s in self.ssps]


def build_task_models(job: JobConfig, partition_counts: Mapping[SystemStream, int],
                      grouping: Grouping | None = None) -> list[TaskModel]:
    """Group the job's SSPs into tasks; ``partition_counts`` gives each input stream's partitions, ``grouping`` (see
    :func:`sparza.engine.partitions.settle_partitions`) the counts partitions are grouped by (None: by partition)."""
    group = grouping if grouping is not None else Grouping(partition_counts)
    from sparza.state.adjunct import AdjunctConfig

    adjunct = AdjunctConfig.from_config(job.config).input_streams()
    specs = {spec.stream: spec for spec in job.inputs}
    main = [spec for spec in job.inputs if not spec.broadcast]
    if not main:
        raise ConfigError("task.inputs", None, "at least one partitioned input (tasks are its partitions)")
    task_count = max(group.grouped.get(spec.stream, partition_counts[spec.stream]) for spec in main)
    broadcast: list[SystemStreamPartition] = []
    for spec in job.inputs:
        if spec.broadcast:
            count = partition_counts[spec.stream]
            for p in spec.partitions or ():
                if p >= count:
                    raise ConfigError("task.broadcast.inputs", f"{spec.stream}#{p}",
                                      f"a partition of {spec.stream} (it has {count})")
                broadcast.append(spec.stream.partition(p))
    owned: dict[int, list[SystemStreamPartition]] = {p: [] for p in range(task_count)}
    for spec in main:
        for p in range(partition_counts[spec.stream]):
            ssp = spec.stream.partition(p)
            owned[group.task_partition(ssp)].append(ssp)
    models = []
    for p in range(task_count):
        ssps = list(owned[p])
        ssps.extend(broadcast)
        # Bootstrap first, then adjunct streams (their changes apply before the batch's main messages).
        ssps.sort(key=lambda s: (not _spec_of(specs, s).bootstrap, s.system_stream not in adjunct, s.system,
                                 s.stream, s.partition))
        read = tuple(dict.fromkeys(ssps))
        models.append(TaskModel(task_name(p), p, read, frozenset(s for s in read if group.is_new(s))))
    return models


def _spec_of(specs: Mapping[SystemStream, InputSpec], ssp: SystemStreamPartition) -> InputSpec:
    return specs[ssp.system_stream]
