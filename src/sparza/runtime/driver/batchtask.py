"""One task's batch as a Spark task of the micro-batch mode: the split in, the result row out.

The Spark source's ``read`` (:mod:`sparza.runtime.driver.source`) calls :func:`run_split` for its partition, so
the task runs in the Python worker Spark started for the read. The config it gets is the shipped one (no
secrets); the secrets come from the job's distributed secrets file (:mod:`sparza.runtime.secrets`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from sparza.config import Config
from sparza.engine.executor import run_task_batch
from sparza.engine.results import to_arrow
from sparza.engine.split import TaskSplit, split_from_marker
from sparza.engine.worker import WORKER
from sparza.runtime.secrets import resolve_secrets

__all__ = ["make_task_runner", "run_split"]


def run_split(config: Config, split: TaskSplit, *, spark_batch_id: int | None, generation: int,
              task_count: int) -> pa.RecordBatch:
    """Run one task's batch in this process and return its result row (see the module docstring).

    The Spark source's ``read`` calls this for its partition, so the task runs in the Python worker that
    Spark starts for the read: one Python evaluation per task and batch.
    """
    resolved = resolve_secrets(config)
    engine = WORKER.engine_job(resolved, task_count)
    model = engine.models.get(split.task)
    if model is not None and model.ssp_keys() != list(split.ssps):
        # The worker's job was grouped for other partition counts (an input grew and the job regrouped,
        # sparza.engine.partitions): build it again from the record the driver settled.
        WORKER.forget(resolved)
        engine = WORKER.engine_job(resolved, task_count)
    return to_arrow(run_task_batch(engine, split, generation=generation, spark_batch_id=spark_batch_id))


def make_task_runner(config_values: dict[str, str], spark_batch_id: int, generation: int,
                     task_count: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A function of marker rows (:func:`~sparza.engine.split.marker_batch`) to result rows: what the
    in-process :class:`sparza.testing.TestRunner` drives, the same :func:`run_split` as on Spark (a picklable
    closure over plain values; ``config_values`` without secrets)."""

    def run_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        split, rest = split_from_marker(batches)
        if split is None:
            return
        for _ in rest:  # only the marker
            pass
        yield run_split(Config(config_values), split, spark_batch_id=spark_batch_id, generation=generation,
                        task_count=task_count)

    return run_tasks
