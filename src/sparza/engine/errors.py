"""Errors the runtime raises: each carries the data an operator needs (task, SSP, offset, cause)."""

from __future__ import annotations

from sparza.errors import ConfigError, ErrorKind, SparzaError

__all__ = [
    "FENCED_OFF",
    "CheckpointConflictError",
    "CheckpointFencedError",
    "JobConfigurationError",
    "JobFailedError",
    "JobStalledError",
    "ProcessingError",
    "RuntimeStateError",
    "TaskCodeError",
    "TasksFencedError",
    "broadcast_stall",
    "tasks_failed",
]


class ProcessingError(SparzaError):
    """A message could not be deserialized or the task raised while handling it.

    Deterministic: replaying the batch would fail the same way, so the job stops instead of
    retrying. The message names the task, the SSP and the offset of the message.
    """

    def __init__(self, task: str, ssp: str, offset: str, kind: str, cause: str, *, key: object = None,
                 column: str | None = None) -> None:
        from sparza.errors import payload_preview

        self.task = task
        self.ssp = ssp
        self.offset = offset
        self.kind = kind
        self.cause = cause
        self.column = column
        where = f" key {payload_preview(key)}" if key is not None else ""
        where += f" column {column!r}" if column else ""
        super().__init__(f"{kind} in task '{task}' at {ssp} offset {offset}{where}: {cause}")


class TaskCodeError(SparzaError):
    """Task code raised outside ``process`` (``init``, ``window``, ``on_watermark``, ``on_end_of_stream``).

    Deterministic like :class:`ProcessingError`: the job stops instead of Spark retrying it.
    """

    def __init__(self, task: str, method: str, cause: str) -> None:
        self.task = task
        self.method = method
        self.cause = cause
        super().__init__(f"task exception in task '{task}' during {method}(): {cause}")


class JobFailedError(SparzaError):
    """The streaming query of a job stopped with an error (the message says which task and why)."""


class JobStalledError(JobFailedError):
    """A run that cannot make progress: its tasks wait for something nothing left to read will bring (the message
    says what, and what to do)."""


def broadcast_stall(job: str, waits: list[str]) -> JobStalledError:
    """The error of a ``--once`` run of ``job`` whose tasks wait for broadcast publications that will not come
    (``waits``: :meth:`~sparza.engine.planner.BatchPlanner.broadcast_waits`)."""
    return JobStalledError(
        f"{job} cannot make progress: {'; '.join(waits)}, and nothing left to read would make it publish. A "
        "versioned store is published once every partition of its stream sent an end-of-dataset marker (write "
        "the markers); else check that stores.<store>.adstore.builder.task names a task of this job and what the "
        "builder task's log says, then run again")


class JobConfigurationError(JobFailedError, ConfigError):
    """Tasks failed on a configuration error found only on an executor: exit code 2, as for one found at start."""

    def __init__(self, message: str) -> None:
        ConfigError.__init__(self, "", None, "", message=message)


class TasksFencedError(JobFailedError):
    """Tasks of this processor were fenced off: a newer coordinator generation owns them (another processor took
    them over, e.g. after judging this one dead). Under a job coordinator the processor steps back and waits for
    its next job model; a standalone run ends (exit code 1)."""


FENCED_OFF = "fenced off"
"""How the one-line report of a task whose checkpoint write was fenced off begins."""


def tasks_failed(errors: list[str | None]) -> JobFailedError:
    """The error of a batch whose tasks failed with ``errors`` (their one-line reports): a
    :class:`JobConfigurationError` when each is a configuration error, a :class:`TasksFencedError` when each was
    fenced off, else a :class:`JobFailedError`."""
    lines = [e or "failed" for e in errors]
    message = "; ".join(lines)
    if lines and all(line.startswith(ErrorKind.CONFIG.value) for line in lines):
        return JobConfigurationError(message)
    if lines and all(line.startswith(FENCED_OFF) for line in lines):
        return TasksFencedError(message)
    return JobFailedError(message)


class CheckpointConflictError(SparzaError):
    """A task checkpoint changed between read and write (another writer): the write was refused."""

    def __init__(self, task: str, detail: str) -> None:
        self.task = task
        super().__init__(f"task checkpoint of '{task}' changed concurrently: {detail}")


class CheckpointFencedError(CheckpointConflictError):
    """A task checkpoint write came from an older coordinator generation than the stored one."""

    def __init__(self, task: str, generation: int, stored_generation: int) -> None:
        self.generation = generation
        self.stored_generation = stored_generation
        super().__init__(task, f"generation {generation} is older than the stored generation {stored_generation}; "
                               "this processor lost the task to another one")


class RuntimeStateError(SparzaError):
    """Local or remote task state is inconsistent with the task checkpoint (what to do is in the message)."""
