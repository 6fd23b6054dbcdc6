"""Samza's ``samza.delete.committed.messages``: the messages of intermediate streams go once they are committed.

An intermediate stream (``partition_by``) is read by one stage of the application only, so once every task of
that stage has committed past a message nobody needs it again: the application's plan sets
``samza.delete.committed.messages`` for the intermediate streams it creates (as Samza's planner does). Any other
stream keeps its messages unless its config asks (a hand-made stream between two jobs may have other readers).
Samza deletes such messages after each commit (``SystemAdmin.deleteMessages``); without it a Delta intermediate
stream gains one commit and a few small files per batch for as long as the application runs (seen in
``bench/endurance.py``).

The driver of the reading stage does it here, every ``job.delete.committed.messages.interval.ms`` (the first time
one interval after the start, so a short run keeps its intermediate streams whole): it reads the committed offsets
of every task from the checkpoint store (all processors' tasks, so a coordinated job is covered) and hands them
to each admin that offers :class:`~sparza.systems.SupportsDeleteMessages` (Delta: a retention horizon for the
whole table, see :meth:`~sparza.systems.delta.DeltaSystemAdmin.delete_messages`; Kafka: the records before each
partition's offset, with DeleteRecords).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sparza.config import Int, define_key
from sparza.control.settings import DELETE_COMMITTED
from sparza.metrics import MetricsRegistry
from sparza.streams import SystemStreamPartition
from sparza.systems import SupportsDeleteMessages

__all__ = ["CommittedMessages"]

_PKG = "runtime"
_INTERVAL_MS = define_key("job.delete.committed.messages.interval.ms", 60_000,
                          "How often the driver deletes committed messages of intermediate streams (0: after every "
                          "batch).", _PKG, kind=Int(min_value=0))


class CommittedMessages:
    """Deletes the committed messages of a job's input streams that ask for it (intermediate ones by default)."""

    def __init__(self, job: Any, admins: Mapping[str, Any], *, clock: Callable[[], float] = time.monotonic,
                 metrics: MetricsRegistry | None = None) -> None:
        config = job.config
        self.job = job
        self.metrics = metrics  # counts the checkpoint reads' storage requests
        self.streams = {spec.stream for spec in job.inputs
                        if not spec.broadcast and DELETE_COMMITTED.get(config, system=spec.stream.system,
                                                                       stream=spec.stream.stream)}
        """The input streams whose committed messages go (an application's intermediate streams, by its plan)."""
        self.admins: dict[str, Any] = {system: admin for system, admin in admins.items()
                                       if isinstance(admin, SupportsDeleteMessages)}
        """The admins that can delete messages (each is a full :class:`~sparza.systems.SystemAdmin` too)."""
        self.interval_s = _INTERVAL_MS.get(config) / 1000
        self._clock = clock
        self._last = clock()  # the first deletion one interval after the start

    @property
    def active(self) -> bool:
        """Whether there is anything to delete in (a stream asks for it and its system can)."""
        return any(stream.system in self.admins for stream in self.streams)

    def due(self) -> bool:
        """Whether the interval has passed since the last deletion (or the start)."""
        return self.active and self._clock() - self._last >= self.interval_s

    def committed_offsets(self) -> dict[SystemStreamPartition, str]:
        """The committed offset (the next to read) of every partition of the streams, from the checkpoint store."""
        from sparza.engine.checkpoint import checkpoint_store_from_config

        out: dict[SystemStreamPartition, str] = {}
        store = checkpoint_store_from_config(self.job.config, self.job.job_key, metrics=self.metrics)
        for checkpoint in store.read_all().values():
            if checkpoint.batch == 0:  # only an intent: nothing committed yet, so its partitions keep everything
                continue
            for key, offset in checkpoint.offsets.items():
                ssp = SystemStreamPartition.parse(key)
                if ssp.system_stream not in self.streams or ssp.system not in self.admins:
                    continue
                known = out.get(ssp)
                # one task owns a partition; after a regrouping take the older offset, never skip a message
                if known is None or self.admins[ssp.system].offset_comparator(offset, known) < 0:
                    out[ssp] = offset
        return out

    def delete(self) -> int:
        """Delete what every task committed past now; returns how many partitions' offsets were handed over."""
        self._last = self._clock()
        offsets = self.committed_offsets()
        for system, admin in self.admins.items():
            mine = {ssp: offset for ssp, offset in offsets.items() if ssp.system == system}
            if mine:
                admin.delete_messages(mine)
        return len(offsets)
