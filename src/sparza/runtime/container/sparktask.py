"""The Spark side of a container: an ordinary long-running Spark task that hosts an engine container.

:func:`run_container` is the ``mapInArrow`` function of a container's Spark job (one single-task job per
container, see :mod:`sparza.runtime.driver.containers`). It connects to the driver's channel, says who it is, and
runs an :class:`~sparza.engine.container.Container` whose commands come from the driver: which jobs, which tasks.
When the driver asks it to stop (or goes away), the container finishes its running batches, commits, and the
Spark task returns. Nothing ties it to the other containers: losing one loses only its tasks.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator

import pyarrow as pa

from sparza.engine.container import Container
from sparza.engine.messages import ContainerFailed, Hello
from sparza.interrupts import ignore_interrupts
from sparza.runtime.channel import ChannelClient
from sparza.runtime.secrets import resolve_secrets

__all__ = ["CONTAINER_SCHEMA", "run_container", "run_container_of_stage"]

_log = logging.getLogger(__name__)

CONTAINER_SCHEMA = "container int"
"""The one row a container's Spark task returns when it ends (its index)."""


def run_container(address: tuple[str, int, str], index: int, driver_timeout_ms: int,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of container ``index`` (see the module docstring)."""
    ignore_interrupts()  # a terminal's Ctrl-C reaches this worker too: the driver decides when to stop
    for _ in batches:  # the one input row of this partition
        pass
    channel = ChannelClient.connect(address, index, driver_timeout_s=driver_timeout_ms / 1000.0)
    container = Container(channel, index=index, resolve=resolve_secrets)
    channel.attach(container)
    channel.report(Hello(index, socket.gethostname(), os.getpid()))
    try:
        container.run()
        if channel.driver_lost:
            _log.warning("container %s: the driver was silent for %.1f s or went away: stopped at a batch boundary "
                         "(its tasks continue from their commits wherever the driver runs them next)", index,
                         driver_timeout_ms / 1000.0)
    except BaseException as exc:
        channel.report(ContainerFailed(f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        channel.close()
    yield pa.RecordBatch.from_pylist([{"container": index}], schema=pa.schema([("container", pa.int32())]))


def run_container_of_stage(address: tuple[str, int, str], indexes: list[int], driver_timeout_ms: int,
                           batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of a stage of several containers (``job.container.launch: stage``): partition i
    is container ``indexes[i]``; a retry of it (Spark's attempt n) gets a new index, so the driver takes it for a
    new container."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    index = indexes[context.partitionId()] + 100_000 * context.attemptNumber()
    yield from run_container(address, index, driver_timeout_ms, batches)
