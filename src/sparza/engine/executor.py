"""Running one task's batch on an executor: what the Spark source's ``read`` does for each task split.

Spark partition i of a batch is task split i; :func:`run_split` reads the task's messages and runs
the task in the Python worker Spark started for that read (one Python evaluation per task and batch:
chaining a second one, ``mapInArrow``, over marker rows cost a few hundred ms per batch on a loaded
2-core host). It returns one small row per task: commit info and metrics for the driver.

Deterministic task failures (a poison message, a task exception, also in ``init``/``window``, a
config, import or serde error) come back as a ``failed`` row, so the driver stops the job with one
line (task, SSP and offset when known, the exception, the next step) instead of Spark retrying the
same failure. Anything else (storage, a crash) raises: Spark retries the task, and the retry is
exact because outputs are idempotent per (job, task, batch) and the checkpoint is written last;
what it raises names the task and batch. Either way the full trace is written to a file under
``task.error.trace.dir`` whose path ends the line.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path

from sparza.config import Config, define_key
from sparza.config.shared import JOB_NAME
from sparza.engine.commit import failed_step
from sparza.engine.errors import FENCED_OFF, CheckpointFencedError, ProcessingError, TaskCodeError
from sparza.engine.instance import get_instance
from sparza.engine.job import EngineJob
from sparza.engine.results import BatchResult, BatchStatus
from sparza.engine.split import TaskSplit
from sparza.engine.worker import SplitInput
from sparza.errors import ConfigError, DataError, SparzaError
from sparza.interrupts import ignore_interrupts

__all__ = ["DETERMINISTIC", "TRACE_DIR_KEY", "TaskAttemptError", "failed_attempt", "run_task_batch",
           "write_trace_text"]

TRACE_DIR_KEY = "task.error.trace.dir"
TRACE_DIR = define_key(TRACE_DIR_KEY, None, "Directory (on the executor's host) where the full trace of a failed task "
                       "is written; the one-line error names the file. Default: <system temp dir>/sparza-errors.",
                       "sparza.runtime")

DETERMINISTIC: tuple[type[BaseException], ...] = (ProcessingError, TaskCodeError, ConfigError, DataError,
                                                   ImportError, CheckpointFencedError)
"""Failures a retry repeats: the task's batch fails at once (no Spark retry) and the job stops (a fenced-off
write is refused again however often it is retried: a newer generation owns the task)."""

_NEXT_STEP = {
    "deserialization error": ("fix the message's producer, or route such records to a dead-letter stream with "
                              "task.dead.letter.stream (Samza's task.drop.deserialization.errors: true skips them)"),
    "data error": ("fix the data or the task, or route such records to a dead-letter stream with "
                   "task.dead.letter.stream (Samza's task.drop.serialization.errors: true skips them)"),
    "configuration error": "fix the config key named above (sparza config check --config <job config>)",
    "system error": "fix what the error names (a stream to create, a system to reach); not a task exception",
    "task exception": "fix the task code, or list the exception in task.ignored.exceptions",
}


class TaskAttemptError(SparzaError):
    """A task attempt failed in a way a retry may cure (storage, a crash): Spark retries it; the
    message names the task, the batch, the cause and the trace file."""

def run_task_batch(engine: EngineJob, split: TaskSplit, *, generation: int, spark_batch_id: int | None = None,
                   resident: bool = False, location: str | None = None) -> BatchResult:
    """Run one task's batch in this process (see the module docstring): its result, with the job's long-lived
    metric changes. ``resident``: the task stays in this process after the batch, so its stores stay open;
    ``location``: where the batch ran (recorded in the task checkpoint for host affinity)."""
    ignore_interrupts()  # a terminal's Ctrl-C reaches this worker too: the driver decides when to stop
    try:
        rows = SplitInput(engine.clients, split)
        instance = get_instance(engine, split, resident=resident)
        instance.location = location
        result = instance.run_batch(split, rows, spark_batch_id=spark_batch_id, generation=generation)
    except Exception as exc:
        result = failed_attempt(engine.config, split.task, split.batch, exc)
    result.system_metrics = engine.clients.metrics.changes()
    return result


def failed_attempt(config: Config, task: str, batch: int, exc: Exception) -> BatchResult:
    """What a failed attempt of ``task``'s batch ``batch`` gives: a ``failed`` result when a retry would fail the
    same way (:data:`DETERMINISTIC`: the job stops with its one line), else it raises :class:`TaskAttemptError`
    (a retry may cure it). Either way the full trace goes to a file the line names."""
    trace = _write_trace(config, task, batch, exc)
    step = failed_step(exc)  # a failed commit names its step (the trace has it too: the exception's note)
    where = f" (the commit failed in {step.split(', task ', 1)[0]})" if step else ""
    if isinstance(exc, DETERMINISTIC):
        return BatchResult(task, batch, BatchStatus.FAILED, error=f"{_describe(exc, task)}{where}; full trace: {trace}",
                           failed_step=step)
    raise TaskAttemptError(f"task '{task}' batch {batch}: {_first_line(exc)}{where}; full trace: {trace}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _describe(exc: BaseException, task: str) -> str:
    """One line: what failed where, and the next step."""
    if isinstance(exc, ProcessingError):
        return f"{exc}; next: {_NEXT_STEP.get(exc.kind, 'fix the cause above')}"
    if isinstance(exc, CheckpointFencedError):
        return f"{FENCED_OFF} task '{task}': {_first_line(exc)}"
    if isinstance(exc, TaskCodeError):
        return f"{exc}; next: fix the task's {exc.method}()"
    if isinstance(exc, ConfigError | ImportError):
        return (f"configuration error in task '{task}': {_first_line(exc)}; next: fix the config "
                "(sparza config check --config <job config>)")
    return f"data error in task '{task}': {_first_line(exc)}; next: {_NEXT_STEP['data error']}"


def _write_trace(config: Config, task: str, batch: int, exc: BaseException) -> str:
    """Write the full trace (with causes) to a file on this host; its path, or why there is none."""
    return write_trace_text(config, f"{task}-batch{batch}", "".join(traceback.format_exception(exc)))


def write_trace_text(config: Config, what: str, text: str) -> str:
    """Write ``text`` (a full trace) to a new file under ``task.error.trace.dir``/<job>; its path, or
    why it could not be written (an error report must not fail on its trace)."""
    base = TRACE_DIR.get(config) or os.path.join(tempfile.gettempdir(), "sparza-errors")
    job = (JOB_NAME.get(config) or "job").replace("/", "_")
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in what)
    path = Path(base) / job / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        return f"<not written: {error}>"
    return str(path)
