"""What a host and its containers say to each other: typed commands and events, one definition each.

A host's driver side (:class:`~sparza.engine.manager.ContainerManager`) decides which container runs which task;
a container (:class:`~sparza.engine.container.Container`) runs them and reports. They talk only through these
messages, whatever carries them: a TCP channel between a Spark driver and its executors
(:mod:`sparza.runtime.channel`), or direct calls in one process (:class:`sparza.testing.TestRunner`).
:func:`encode` / :func:`decode` give the one wire form (msgpack, a tagged union).

Commands (host → container):

- :class:`AddJob`: a job whose tasks this container may run (its config without secrets, its generation, the
  positions its bounded and bootstrap streams are measured against, the ``--once`` targets, a pending drain).
  The container answers :class:`JobReady` with where it keeps that job's state (its *location*).
- :class:`AssignTasks` / :class:`RevokeTasks`: start running tasks / hand them back. A revoked task finishes the
  batch it runs (commit included), closes its stores and is reported in :class:`TasksReleased`; no other task
  of the container stops for it.
- :class:`SetDrain`: a job's drain request (or its cancellation).
- :class:`RemoveJob`: the job left; its tasks are released and its clients closed.
- :class:`StopContainer`: finish every running batch, commit, release everything and return.
- :class:`Ping`: the host is alive (a container whose host went silent stops at a batch boundary).
- :class:`QueryStore`: read a task's store while the job runs (answered by :class:`StoreAnswer`, never after a
  batch: a thread of the container's own reads it).

Events (container → host): :class:`Hello` (once, when it starts), :class:`JobReady`, :class:`TaskResult` (a
committed, skipped or failed batch), :class:`TaskDone` (a task left the run loop, and why),
:class:`TaskWaiting` (a task's main input waits, and for what), :class:`TasksReleased`, :class:`TaskRetrying` (a
batch failed in a way a retry may cure; the task alone waits and retries), :class:`TaskLost` (someone else
wrote the task's checkpoint: this container no longer owns it) and :class:`ContainerFailed`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sparza.engine.results import BatchResult

__all__ = [
    "AddJob",
    "AssignTasks",
    "Command",
    "ContainerFailed",
    "Event",
    "Hello",
    "JobReady",
    "Ping",
    "QueryStore",
    "RemoveJob",
    "RevokeTasks",
    "SetDrain",
    "StopContainer",
    "StoreAnswer",
    "TaskDone",
    "TaskLost",
    "TaskResult",
    "TaskRetrying",
    "TaskWaiting",
    "TasksReleased",
    "decode",
    "encode",
]


class AddJob(msgspec.Struct, tag=True):
    """A job this container may run tasks of. ``config`` is the job's config without secrets (the host's
    resolver puts them back); ``start_positions`` SSP → upcoming offset when the job started; ``targets``
    (``--once``) SSP → the offset no task plans past; ``drain`` the pending drain request, if any."""

    job: str
    config: dict[str, str]
    generation: int
    task_count: int
    start_positions: dict[str, str]
    targets: dict[str, str] | None = None
    drain: dict[str, Any] | None = None


class AssignTasks(msgspec.Struct, tag=True):
    """Run these tasks of ``job`` (each starts from its task checkpoint)."""

    job: str
    tasks: list[str]


class RevokeTasks(msgspec.Struct, tag=True):
    """Hand these tasks of ``job`` back: each finishes and commits the batch it runs, then is released."""

    job: str
    tasks: list[str]


class SetDrain(msgspec.Struct, tag=True):
    """``job`` drains (``drain``: :meth:`~sparza.engine.drain.DrainRequest.to_json`), or no longer does (None)."""

    job: str
    drain: dict[str, Any] | None


class RemoveJob(msgspec.Struct, tag=True):
    """``job`` left: release its tasks, close its clients."""

    job: str


class StopContainer(msgspec.Struct, tag=True):
    """Finish every running batch, commit, release every task and return."""


class Ping(msgspec.Struct, tag=True):
    """The host is alive."""


class QueryStore(msgspec.Struct, tag=True):
    """A read of one task's store while the job runs (Kafka Streams' interactive queries): ``op`` is ``get`` (of
    ``key``), ``scan`` (keys whose text starts with ``prefix``, at most ``limit``) or ``count``; as of the task's latest
    commit, or its in-flight state when ``live``. ``key`` is JSON-able as the store's key serde holds it (bytes as
    ``{"$bytes": hex}``). The container answers :class:`StoreAnswer` with the same ``id``, from a thread of its own:
    a read never waits for a batch."""

    id: str
    job: str
    task: str
    store: str
    op: str
    key: Any = None
    prefix: str | None = None
    limit: int = 1000
    live: bool = False


Command = AddJob | AssignTasks | RevokeTasks | SetDrain | RemoveJob | StopContainer | Ping | QueryStore
"""Every command a host sends a container."""


class Hello(msgspec.Struct, tag=True):
    """A container started: its index (as the host launched it), host name and process id."""

    container: int
    host: str
    pid: int


class JobReady(msgspec.Struct, tag=True):
    """The container built ``job`` and keeps its state at ``location`` (``host:state-dir#id``); ``error``: it could
    not (its config or storage failed here), and runs none of its tasks. ``transient``: the error may pass (storage
    unreachable, a timeout), so the manager offers the job to the container again after a pause."""

    job: str
    location: str
    error: str | None = None
    transient: bool = False


class TaskResult(msgspec.Struct, tag=True):
    """One batch of ``job``'s task committed, was skipped as a replay, or failed for good."""

    job: str
    result: BatchResult


class TaskDone(msgspec.Struct, tag=True):
    """A task left the run loop: ``caught up`` (--once), ``ended`` (every input ended), ``drained``, ``stopped``,
    ``failed``."""

    job: str
    task: str
    why: str


class TaskWaiting(msgspec.Struct, tag=True):
    """A task has nothing to do now but is not caught up: its main input waits for ``why``. Said once per wait."""

    job: str
    task: str
    why: str


class TasksReleased(msgspec.Struct, tag=True):
    """These revoked tasks committed their last batch and closed their stores: another container may take them."""

    job: str
    tasks: list[str]


class TaskRetrying(msgspec.Struct, tag=True):
    """A batch of ``task`` failed in a way a retry may cure (``error``); the task alone retries after
    ``delay_ms`` from its last commit. ``attempt`` counts failures since its last commit."""

    job: str
    task: str
    error: str
    attempt: int
    delay_ms: int


class TaskLost(msgspec.Struct, tag=True):
    """A conditional write of ``task``'s checkpoint was refused: someone else wrote it (the task moved, or a newer
    generation took over). The container dropped the task without flushing anything more of it."""

    job: str
    task: str
    error: str


class StoreAnswer(msgspec.Struct, tag=True):
    """The answer to :class:`QueryStore` ``id``: ``value`` (JSON-able: the value of a get, ``[[key, value], ...]`` of a
    scan, the number of a count) as of committed ``batch`` (None: in-flight state), or ``error``."""

    id: str
    ok: bool
    value: Any = None
    batch: int | None = None
    error: str | None = None


class ContainerFailed(msgspec.Struct, tag=True):
    """The container is failing (``error``); its tasks stop where they are."""

    error: str


Event = Hello | JobReady | TaskResult | TaskDone | TaskWaiting | TasksReleased | TaskRetrying | TaskLost \
    | StoreAnswer | ContainerFailed
"""Every event a container reports."""

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Command | Event)


def encode(message: Command | Event) -> bytes:
    """The message's wire form (msgpack, tagged with its class name)."""
    return _ENCODER.encode(message)


def decode(data: bytes) -> Command | Event:
    """Inverse of :func:`encode`."""
    return _DECODER.decode(data)
