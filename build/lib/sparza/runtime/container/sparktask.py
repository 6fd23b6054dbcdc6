"""The Spark side of a container: the barrier task that hosts an engine :class:`~sparza.engine.container.Container`.

:func:`run_container` is the ``mapInArrow`` function of an epoch's barrier stage (see
:mod:`sparza.runtime.driver.epochs`): it learns where it runs, agrees with the other containers on the
assignment, connects to the driver's channel and runs the engine's container until the epoch ends.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from sparza.config import Config
from sparza.engine.container import Container, assign_tasks, location_of
from sparza.engine.epoch import EpochPlan
from sparza.engine.jobconfig import JobConfig
from sparza.engine.results import BatchResult

__all__ = ["CONTAINER_SCHEMA", "run_container"]

_log = logging.getLogger(__name__)


CONTAINER_SCHEMA = "job string, kind string, body string"
"""Rows an epoch's Spark job returns: the events a container could not send over the channel."""


def run_container(plan_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The barrier ``mapInArrow`` function of an epoch: this Spark task is one container (module docstring)."""
    from pyspark import BarrierTaskContext

    from sparza.interrupts import ignore_interrupts
    from sparza.runtime.channel import ContainerChannelClient, result_to_json
    from sparza.runtime.secrets import resolve_secrets

    ignore_interrupts()  # a terminal's Ctrl-C reaches this worker too: the driver decides when to stop
    for _ in batches:  # the one input row of this partition
        pass
    plan = EpochPlan.from_json(plan_json)
    context = BarrierTaskContext.get()
    index = context.partitionId()
    mine = {j.key: location_of(JobConfig.from_config(resolve_secrets(Config(j.config)))) for j in plan.jobs}
    message = json.dumps(mine, sort_keys=True)
    # A lone container gathers only its own locations: Spark's barrier sync costs at least a second (the task
    # checks the sync's reply once a second), for nothing.
    gathered = [message] if len(context.getTaskInfos()) == 1 else context.allGather(message)
    locations = [json.loads(m) for m in gathered]
    previous = {(j.key, t): loc for j in plan.jobs for t, loc in j.locations.items()}
    assignment = assign_tasks([(j.key, t) for j in plan.jobs for t in j.tasks], locations, previous,
                              affinity=plan.affinity)
    channel = (ContainerChannelClient.connect(plan.channel, plan.epoch, index,
                                              driver_timeout_s=plan.driver_timeout_ms / 1000.0)
               if plan.channel else None)
    undelivered: list[tuple[str, str, str]] = []
    if channel is not None:
        moves = [{"job": key, "task": task, "from": previous.get((key, task)), "to": mine[key]}
                 for (key, task), i in sorted(assignment.items())
                 if i == index and previous.get((key, task)) != mine[key]]
        channel.hello(mine, sorted(t for (_k, t), i in assignment.items() if i == index), moves,
                      alive=sorted({loc for c in locations for loc in c.values()}))

    class _Reporter:
        def result(self, job: str, result: BatchResult) -> None:
            if channel is None or not channel.send_result(job, result):
                undelivered.append((job, "result", json.dumps(result_to_json(result))))

        def done(self, job: str, task: str, why: str) -> None:
            if channel is None or not channel.send_done(job, task, why):
                undelivered.append((job, "done", json.dumps({"task": task, "why": why})))

        def waiting(self, job: str, task: str, why: str) -> None:
            if channel is None or not channel.send_waiting(job, task, why):
                undelivered.append((job, "waiting", json.dumps({"task": task, "why": why})))

        def wait_end(self, wait_s: float) -> bool:
            if channel is None:
                if wait_s > 0:
                    time.sleep(wait_s)
                return False
            return channel.poll_end(wait_s)

        def drains(self) -> Mapping[str, dict[str, Any] | None]:
            return channel.drains if channel is not None else {}

    try:
        Container(plan, index, assignment, _Reporter(), location=mine, resolve=resolve_secrets).run()
        if channel is not None and channel.driver_lost:
            _log.warning("container %s of epoch %s: the driver was silent for %.1f s or went away: ended the epoch at "
                         "a batch boundary (its tasks continue from their commits wherever the driver runs them "
                         "next)", index, plan.epoch, plan.driver_timeout_ms / 1000.0)
    except BaseException as exc:
        if channel is not None:
            channel.send_error(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if channel is not None:
            channel.close()
    yield pa.RecordBatch.from_pylist([{"job": j, "kind": k, "body": b} for j, k, b in undelivered],
                                     schema=pa.schema([("job", pa.string()), ("kind", pa.string()),
                                                       ("body", pa.string())]))
