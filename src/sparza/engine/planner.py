"""The batch planner: on the driver, decide what every task reads in the next batch.

A :class:`BatchPlan` is what Spark stores in its offset log (as JSON, :meth:`BatchPlan.to_json`)
before the batch runs, so a replay after a crash runs the very same batch::

    {"batch": 7, "planned_at": 1732230000000,
     "tasks": {"Partition 0": {"offsets": {"delta.in#0": "12:0", ...}, "ended": false}, ...}}

``offsets`` are, per task and SSP, the next offset to read; a batch reads ``[start plan, end
plan)``. ``batch`` is the runtime's batch number: task checkpoints record it, output transactions use
it as version, and it continues from the task checkpoints when the Spark checkpoint dir is new
(Spark's own batch id restarts at 0 then). ``planned_at`` is the planning time in epoch ms: tasks
use it instead of their own clock (window timing, control messages), so a replay makes the same
decisions.

A task whose checkpoint holds an open intent (it flushed outputs for a batch it did not commit,
and Spark's offset log of that batch is gone) gets a :class:`Replay` in the start plan: its next
batch is exactly that range, with the intent's ``planned_at`` (see
:class:`~sparza.engine.checkpoint.Intent`).

Each SSP's end is its newest offset, capped by ``task.max.batch.messages``, by the end of a
bounded stream (the upcoming offset seen when the planner started), by the AvailableNow
target, and, while a drain is requested (:attr:`BatchPlanner.drain`, :mod:`sparza.engine.drain`), by the
offset observed at the drain's request. Bootstrap gating: a task's other inputs stay put until its
bootstrap inputs reached the offsets seen at start.

A plan made under a drain records it (``"drain": {"id", "requested_at", "ends"}``), and each task's split
says which of its source partitions have not reached their drain end yet; the first plan under a new drain
is made even when no input moved, so every task gets a batch in which to drain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparza.engine.checkpoint import TaskCheckpoint
from sparza.engine.drain import DrainRequest, source_ssps
from sparza.engine.errors import RuntimeStateError
from sparza.engine.jobconfig import InputSpec, JobConfig
from sparza.engine.model import TaskModel
from sparza.engine.offsets import OffsetOps
from sparza.engine.split import TaskSplit
from sparza.streams import SystemStreamPartition
from sparza.systems import SupportsDeletedMessagesPolicy

__all__ = ["BatchPlan", "BatchPlanner", "OffsetPastEndError", "Replay", "SspPosition", "TaskPlan", "describe_waits",
           "input_after_end"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replay:
    """In a start plan: the task's next batch is its open intent's range again, planned as then."""

    ends: dict[str, str]
    planned_at_ms: int
    bounded_ends: dict[str, str] = field(default_factory=dict)
    drain: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON keys ``ends``, ``planned_at``, ``bounded_ends`` and, when the intent ran under a drain, ``drain``."""
        body: dict[str, Any] = {"ends": dict(self.ends), "planned_at": self.planned_at_ms,
                                "bounded_ends": dict(self.bounded_ends)}
        if self.drain is not None:
            body["drain"] = dict(self.drain)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Replay:
        """Inverse of :meth:`to_json`."""
        return cls(dict(body["ends"]), int(body["planned_at"]), dict(body.get("bounded_ends") or {}),
                   body.get("drain"))


@dataclass(frozen=True)
class TaskPlan:
    """One task in a plan: the next offset per SSP, whether its inputs ended, and (replayed intents
    only) the intent's planning time and bounded ends; ``replay`` only in start plans."""

    offsets: dict[str, str]
    ended: bool = False
    replay: Replay | None = None
    planned_at_ms: int | None = None
    bounded_ends: dict[str, str] | None = None
    reset: tuple[str, ...] = ()
    """Start plans only: SSPs whose checkpointed offset ``samza.reset.offset`` replaced by the default."""
    drain: dict[str, Any] | None = None
    """Replayed intents only: the drain of the intent's split (what the first attempt decided under)."""

    def to_json(self) -> dict[str, Any]:
        """JSON keys ``offsets``, ``ended`` and, when set, ``replay``, ``planned_at``, ``bounded_ends``,
        ``reset``, ``drain``."""
        body: dict[str, Any] = {"offsets": dict(self.offsets), "ended": self.ended}
        if self.replay is not None:
            body["replay"] = self.replay.to_json()
        if self.reset:
            body["reset"] = list(self.reset)
        if self.planned_at_ms is not None:
            body["planned_at"] = self.planned_at_ms
        if self.bounded_ends is not None:
            body["bounded_ends"] = dict(self.bounded_ends)
        if self.drain is not None:
            body["drain"] = dict(self.drain)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TaskPlan:
        """Inverse of :meth:`to_json`."""
        return cls(dict(body.get("offsets") or {}), bool(body.get("ended", False)),
                   Replay.from_json(body["replay"]) if body.get("replay") else None,
                   int(body["planned_at"]) if body.get("planned_at") is not None else None,
                   dict(body["bounded_ends"]) if body.get("bounded_ends") is not None else None,
                   tuple(body.get("reset") or ()), dict(body["drain"]) if body.get("drain") is not None else None)


@dataclass(frozen=True)
class BatchPlan:
    """A batch plan (see the module docstring): batch ``batch``, its planning time, every task's plan, and the
    drain it was made under (None: none)."""

    batch: int
    planned_at_ms: int
    tasks: dict[str, TaskPlan]
    drain: DrainRequest | None = None

    def task(self, name: str) -> TaskPlan:
        """The plan of task ``name`` (empty when the plan does not know it yet)."""
        return self.tasks.get(name) or TaskPlan({})

    def to_json(self) -> dict[str, Any]:
        """The form Spark keeps in its offset log."""
        body: dict[str, Any] = {"batch": self.batch, "planned_at": self.planned_at_ms,
                                "tasks": {name: plan.to_json() for name, plan in self.tasks.items()}}
        if self.drain is not None:
            body["drain"] = self.drain.to_json()
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> BatchPlan:
        """Parse what :meth:`to_json` wrote (from Spark's offset log)."""
        number = body["batch"] if "batch" in body else body["seq"]  # "seq": offset logs of sparza 0.1
        return cls(int(number), int(body.get("planned_at", 0)),
                   {str(name): TaskPlan.from_json(plan) for name, plan in body.get("tasks", {}).items()},
                   DrainRequest.from_json(body["drain"]) if body.get("drain") else None)


class SspPosition:
    """The metadata of one SSP the planner needs: oldest existing and upcoming offsets."""

    __slots__ = ("oldest", "upcoming")

    def __init__(self, oldest: str | None, upcoming: str) -> None:
        self.oldest = oldest
        self.upcoming = upcoming


MetadataFn = Callable[[], Mapping[SystemStreamPartition, SspPosition]]


def describe_waits(waits: Mapping[str, list[str]], *, most: int = 6) -> list[str]:
    """One line per reason of :meth:`BatchPlanner.broadcast_waits`: ``task(s) 'A', 'B' wait for <reason>`` (at most
    ``most`` task names, then how many more)."""
    lines = []
    for reason, tasks in sorted(waits.items()):
        names = sorted(set(tasks), key=lambda t: (len(t), t))
        shown = ", ".join(f"'{t}'" for t in names[:most]) + (f" and {len(names) - most} more" if len(names) > most
                                                             else "")
        lines.append(f"task(s) {shown} wait for {reason}")
    return lines


class OffsetPastEndError(RuntimeStateError):
    """A task's checkpointed offset lies past its partition's end as last read (:func:`check_not_past_end`)."""


def check_not_past_end(task: str, ssp: SystemStreamPartition, offset: str, position: SspPosition,
                       ops: OffsetOps) -> None:
    """Refuse to plan from ``offset`` when it lies past the partition's end: the stream was re-created or
    its log truncated or lost (a Kafka broker that lost its data), so the checkpoint names offsets that
    no longer exist and the messages there now were never read. Planning on would read nothing until the
    partition grows past ``offset`` and then skip everything before it, silently."""
    if ops.compare(offset, position.upcoming) <= 0:
        return
    raise OffsetPastEndError(
        f"task '{task}' is at offset {offset} of {ssp} (its checkpoint), but that partition now ends at "
        f"{position.upcoming}: the stream was deleted and created again, or its log was truncated or lost (a "
        "Kafka broker that lost its data). Its messages there now were never read, so the job stops instead of "
        f"skipping them. To read the partition from its start, run once with systems.{ssp.system}.streams."
        f"{ssp.stream}.samza.reset.offset: true and samza.offset.default: oldest (messages read before the "
        "stream was re-created are not in it any more, so nothing repeats unless they were loaded again), or "
        "give the job a new job.id")


def check_not_deleted(task: str, ssp: SystemStreamPartition, offset: str, position: SspPosition,
                      ops: OffsetOps) -> str:
    """Where a task resumes ``ssp`` from its checkpointed ``offset``: there, unless messages after it were deleted
    before the task read them (a Kafka topic's ``retention.ms``): then the job stops naming the gap, or, where the
    system's config says so (:class:`~sparza.systems.SupportsDeletedMessagesPolicy`: Kafka's
    ``consumer.auto.offset.reset: smallest``), resumes at the oldest message left, saying what it skipped.
    Planning on from ``offset`` would fail every read of the deleted range."""
    oldest = position.oldest if position.oldest is not None else position.upcoming   # empty: all of it deleted
    if ops.compare(offset, oldest) >= 0:
        return offset
    lost = ops.count_between(ssp, offset, oldest)
    if not lost:   # nothing the task had not read lies there (or the system cannot tell)
        return offset
    gap = f"offsets [{offset}, {oldest}) of {ssp} (at most {lost} messages)"
    if isinstance(ops.admin, SupportsDeletedMessagesPolicy) and ops.admin.skips_deleted_messages(ssp.stream):
        log.warning("task '%s' skipped %s: deleted before it read them (the stream's retention), as "
                    "systems.%s.consumer.auto.offset.reset says; it resumes at offset %s", task, gap, ssp.system,
                    oldest)
        return oldest
    raise RuntimeStateError(
        f"task '{task}' is at offset {offset} of {ssp} (its checkpoint), but the messages from there on were deleted "
        f"before it read them: {gap} are gone (the stream's retention: a Kafka topic's retention.ms or "
        "retention.bytes, or a DeleteRecords). The job stops instead of skipping them without a word. To read on "
        f"from the oldest message left (offset {oldest}), set systems.{ssp.system}.consumer.auto.offset.reset: "
        "smallest (or earliest): the job then skips the gap and says so; to keep such messages, give the topic a "
        "longer retention than the job may stay stopped or behind")


def input_after_end(task: TaskModel, offsets: Mapping[str, str], positions: Mapping[SystemStreamPartition, SspPosition],
                    ops: Mapping[str, OffsetOps], adjunct: frozenset[Any] | set[Any]) -> list[str]:
    """``"<ssp>: N message(s) after offset X"`` for each main input SSP of an *ended* task that holds
    messages past ``offsets`` (the task's committed offsets). An ended task never reads again (its
    end-of-stream callbacks and windows have fired), so those messages would never be processed."""
    found = []
    for ssp in task.ssps:
        key = str(ssp)
        if ssp.system_stream in adjunct or key not in offsets or ssp not in positions:
            continue
        op = ops[ssp.system]
        upcoming = positions[ssp].upcoming
        if op.compare(offsets[key], upcoming) >= 0:
            continue
        n = op.count_messages(ssp, offsets[key], upcoming)  # offsets past a task's end may be markers
        if n is None or n > 0:
            found.append(f"{key}: {'some' if n is None else n} message(s) after offset {offsets[key]}")
    return found


def input_after_end_error(task: str, found: list[str]) -> RuntimeStateError:
    """The error that stops a job whose ended task got more input (see :func:`input_after_end`)."""
    return RuntimeStateError(
        f"task '{task}' ended (its bounded inputs ended in an earlier run), but messages arrived after its end: "
        f"{'; '.join(found)}. A bounded job reads its inputs once: an ended task does not read again (its "
        "end-of-stream callbacks and windows have fired), so the job stops instead of leaving them unprocessed "
        "without a word. To process the stream as it is now, run it as a new job (a new job.id; with "
        "samza.offset.default: oldest it reads everything again), or load the new messages into another stream")


def plan_resets(job: JobConfig, tasks: list[TaskModel], checkpoints: Mapping[str, TaskCheckpoint]
                ) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Which checkpointed offsets ``samza.reset.offset`` replaces at this start, per task, and warnings.

    Main inputs only (an adjunct stream's reset rebuilds its store instead). A task with an open intent
    is not reset: its flushed but uncommitted batch is completed first, exactly as planned, and the reset
    happens at the next start; the warning says so."""
    from sparza.state.adjunct import AdjunctConfig

    adjunct = AdjunctConfig.from_config(job.config).input_streams()
    specs = {(s.stream.system, s.stream.stream): s for s in job.inputs}
    resets: dict[str, tuple[str, ...]] = {}
    warnings: list[str] = []
    for task in tasks:
        wanted = [ssp for ssp in task.ssps
                  if specs[(ssp.system, ssp.stream)].reset_offset and ssp.system_stream not in adjunct]
        cp = checkpoints.get(task.name)
        if not wanted or cp is None:
            continue
        intent = cp.open_intent()
        if intent is not None:
            warnings.append(f"samza.reset.offset: task '{task.name}' has a flushed but uncommitted batch "
                            f"{intent.batch}; it is completed first, so its offsets are reset at the next start")
            continue
        got = tuple(str(ssp) for ssp in wanted if str(ssp) in cp.offsets)
        if got:
            resets[task.name] = got
    return resets, warnings


class BatchPlanner:
    """Plans batches for a fixed set of tasks from fresh stream metadata on every call."""

    def __init__(self, job: JobConfig, tasks: list[TaskModel], ops: Mapping[str, OffsetOps],
                 metadata: MetadataFn, *, start_positions: Mapping[SystemStreamPartition, str] | None = None,
                 broadcast_ready: Callable[[Any], bool] | None = None) -> None:
        self.job = job
        self.tasks = tasks
        self.ops = ops
        self._metadata = metadata
        self._specs: dict[tuple[str, str], InputSpec] = {(s.stream.system, s.stream.stream): s for s in job.inputs}
        from sparza.state.adjunct import AdjunctConfig

        adjunct = AdjunctConfig.from_config(job.config)
        self._adjunct = adjunct.input_streams()
        # What "the offsets seen at start" means for bounded and bootstrap streams: now, or when the job
        # started (a container plans with the driver's start positions, so every container ends
        # bounded streams at the same offsets).
        self.start_positions = (dict(start_positions) if start_positions is not None
                                else {ssp: pos.upcoming for ssp, pos in metadata().items()})
        self.targets: dict[SystemStreamPartition, str] | None = None
        self._sources = frozenset(source_ssps(job, {ssp for task in tasks for ssp in task.ssps}))
        self._drain: DrainRequest | None = None
        # Tasks that commit on their own schedule (containers): main input waits for the builder's bootstrapped
        # publication of a broadcast store itself, since no common batch number says the builder is done.
        self._broadcast_ready = broadcast_ready
        self._ready: set[Any] = set()
        # Tasks whose main input the last plan held back for an unpublished broadcast store, and the store's stream
        # (what that plan saw).
        self._held: dict[str, Any] = {}
        # The broadcast bootstrap stores of each stream; their builder tasks, and those of them this planner gave a
        # batch to publish in (see _needs_publishing_batch).
        self._broadcast_stores: dict[Any, list[Any]] = {}
        for store in adjunct.stores:
            if store.broadcast and store.bootstrap:
                self._broadcast_stores.setdefault(store.stream, []).append(store)
        self._builders = {stream: {s.builder_task for s in stores} for stream, stores in self._broadcast_stores.items()}
        self._awaits_own: set[str] = set()
        self._given_publishing_batch: set[str] = set()

    def spec(self, ssp: SystemStreamPartition) -> InputSpec:
        """The input spec of ``ssp``'s stream."""
        return self._specs[(ssp.system, ssp.stream)]

    def _cmp(self, ssp: SystemStreamPartition, a: str, b: str) -> int:
        return self.ops[ssp.system].compare(a, b)

    def freeze_targets(self) -> None:
        """AvailableNow: never plan past the offsets that exist now."""
        self.targets = {ssp: pos.upcoming for ssp, pos in self._metadata().items()}

    @property
    def drain(self) -> DrainRequest | None:
        """The drain requested (None: none): no source SSP is planned past its end offset in it."""
        return self._drain

    @drain.setter
    def drain(self, request: DrainRequest | None) -> None:
        if request is not None and self._drain is not None and request.id == self._drain.id:
            return  # the same drain read again: keep the ends completed below
        missing = [ssp for ssp in sorted(self._sources) if str(ssp) not in (request.ends if request else {})]
        if request is not None and missing:
            # A source SSP the request does not know (a partition added since): it ends where it is now.
            positions = self._metadata()
            request = DrainRequest(request.id, request.requested_at_ms,
                                   {**request.ends, **{str(s): positions[s].upcoming for s in missing}})
        self._drain = request

    def initial(self, checkpoints: Mapping[str, TaskCheckpoint]) -> BatchPlan:
        """The start plan: offsets from task checkpoints, else ``samza.offset.default`` (oldest/upcoming);
        streams with ``samza.reset.offset`` start at the default even with a checkpoint (see :meth:`resets`)."""
        positions = self._metadata()
        tasks: dict[str, TaskPlan] = {}
        batch = 0
        resets, _ = plan_resets(self.job, self.tasks, checkpoints)
        for task in self.tasks:
            cp = checkpoints.get(task.name)
            intent = cp.open_intent() if cp is not None else None
            reset = resets.get(task.name, ())
            offsets: dict[str, str] = {}
            for ssp in task.ssps:
                key = str(ssp)
                if cp is not None and key in cp.offsets and key not in reset:
                    offsets[key] = cp.offsets[key]
                    if intent is None:
                        check_not_past_end(task.name, ssp, offsets[key], positions[ssp], self.ops[ssp.system])
                        resumed = check_not_deleted(task.name, ssp, offsets[key], positions[ssp],
                                                    self.ops[ssp.system])
                        if resumed != offsets[key]:   # the task starts after its checkpoint, as for a reset
                            offsets[key] = resumed
                            reset = (*reset, key)
                    continue
                if intent is not None and key in intent.starts:
                    # First batch of this SSP, flushed but not committed: it started where the intent says.
                    offsets[key] = intent.starts[key]
                    continue
                pos = positions[ssp]
                # A partition the stream gained after the job first read it holds only messages that came since.
                wants_oldest = (self.spec(ssp).offset_default == "oldest" or ssp.system_stream in self._adjunct
                                or ssp in task.new)
                if wants_oldest and pos.oldest is not None:
                    offsets[key] = pos.oldest
                else:
                    offsets[key] = pos.upcoming
            replay = None
            if cp is not None:
                batch = max(batch, cp.batch)
            if intent is not None:
                # Later batches must use higher output versions than the intent's.
                batch = max(batch, intent.batch - 1)
                if all(offsets.get(k) == v for k, v in intent.starts.items()):
                    # SSPs the intent does not know (added since) stay put in the replayed batch;
                    # an SSP the task no longer reads makes the task refuse the batch (instance.py).
                    replay = Replay({k: intent.ends.get(k, v) for k, v in offsets.items()}, intent.planned_at_ms,
                                    dict(intent.bounded_ends), intent.drain)
            ended = bool(cp.ended) if cp is not None and not reset else False
            tasks[task.name] = TaskPlan(offsets, ended, replay, reset=reset)
        return BatchPlan(batch, 0, tasks)

    def bounded_end(self, ssp: SystemStreamPartition) -> str | None:
        """Where a bounded SSP ends (None for unbounded ones)."""
        return self.start_positions[ssp] if self.spec(ssp).bounded else None

    def next(self, start: BatchPlan, now_ms: int, *, force: bool = False) -> BatchPlan:
        """The plan of the next batch, or ``start`` itself when there is nothing to do."""
        positions = self._metadata()
        tasks: dict[str, TaskPlan] = {}
        drain = self._drain
        # A new drain is worth a batch of its own: every task must get one in which to drain.
        changed = force or (drain is not None and (start.drain is None or start.drain.id != drain.id))
        for task in self.tasks:
            before = start.task(task.name)
            replay = before.replay
            ends = dict(replay.ends) if replay else self._task_ends(task, before.offsets, positions)
            if before.ended and not replay:
                found = input_after_end(task, before.offsets, positions, self.ops, self._adjunct)
                if found:
                    raise input_after_end_error(task.name, found)
            ended = before.ended or self._all_ended(task, ends)
            if replay or ends != before.offsets or ended != before.ended or self._needs_publishing_batch(task, ends,
                                                                                                          before):
                changed = True
            if replay:
                tasks[task.name] = TaskPlan(ends, ended, planned_at_ms=replay.planned_at_ms,
                                            bounded_ends=dict(replay.bounded_ends), drain=replay.drain)
            else:
                tasks[task.name] = TaskPlan(ends, ended)
        window_ms = self.job.window_ms
        # A due window is worth a batch of its own, except under AvailableNow or a drain: that would never end.
        if (not changed and window_ms > 0 and self.targets is None and drain is None
                and now_ms - start.planned_at_ms >= window_ms):
            changed = True
        if not changed:
            return start
        return BatchPlan(start.batch + 1, now_ms, tasks, drain)

    def _task_ends(self, task: TaskModel, starts: Mapping[str, str],
                   positions: Mapping[SystemStreamPartition, SspPosition]) -> dict[str, str]:
        ends: dict[str, str] = {}
        gated = False
        self._held.pop(task.name, None)
        self._awaits_own.discard(task.name)
        for ssp in task.ssps:  # bootstrap SSPs come first in a task's read order
            key = str(ssp)
            begin = starts.get(key)
            if begin is None:  # an SSP the plan does not know yet: a new partition is read from its oldest offset
                oldest = positions[ssp].oldest
                begin = oldest if ssp in task.new and oldest is not None else positions[ssp].upcoming
            check_not_past_end(task.name, ssp, begin, positions[ssp], self.ops[ssp.system])
            spec = self.spec(ssp)
            if gated and not spec.bootstrap:
                ends[key] = begin
                continue
            limit = positions[ssp].upcoming
            bound = self.bounded_end(ssp)
            if bound is not None and self._cmp(ssp, bound, limit) < 0:
                limit = bound
            if self.targets is not None and ssp in self.targets and self._cmp(ssp, self.targets[ssp], limit) < 0:
                limit = self.targets[ssp]
            frozen = self._drain.ends.get(key) if self._drain is not None else None
            if frozen is not None and self._cmp(ssp, frozen, limit) < 0:
                limit = frozen
            if self._cmp(ssp, begin, limit) >= 0:
                end = begin
            else:
                end = self.ops[ssp.system].offset_after(ssp, begin, limit, self.job.max_batch_messages)
            ends[key] = end
            # A broadcast bootstrap store is read by other tasks from the snapshot published before
            # their batch: main input flows from the batch after the one that completed it.
            reached = begin if spec.broadcast else end
            if spec.bootstrap and self._cmp(ssp, reached, self.start_positions[ssp]) < 0:
                gated = True
            elif spec.bootstrap and spec.broadcast and not self._published(ssp):
                gated = True
                self._held[task.name] = ssp.system_stream
                if task.name in self._builders.get(ssp.system_stream, ()):
                    self._awaits_own.add(task.name)
        return ends

    def _needs_publishing_batch(self, task: TaskModel, ends: Mapping[str, str], before: TaskPlan) -> bool:
        """True when ``task`` builds a broadcast bootstrap store whose bootstrapped publication its main input (like
        every task's) waits for, and has nothing to read: give it one batch that reads nothing, in which it commits
        and publishes. Without it a builder whose bootstrap stream is empty (or read to its end in a batch that
        published no bootstrapped snapshot) never commits again, never publishes, and every task waits for ever.

        One such batch per planner: the builder publishes in it, so the next plan lets main input flow; if no
        publication comes of it (a versioned store has no complete version yet), the tasks wait for the builder's
        input instead of committing empty batches in a loop. A publication stays subject to the builder's
        generation fencing like every other (an older generation never replaces a newer one's)."""
        if task.name not in self._awaits_own or task.name in self._given_publishing_batch or ends != before.offsets:
            return False
        self._given_publishing_batch.add(task.name)
        return True

    def broadcast_waits(self) -> dict[str, list[str]]:
        """What the last plan held main input back for: per reason (a broadcast stream's stores, whose bootstrapped
        publication is missing, and the task that builds them) the tasks that wait for it: they have nothing to do
        now, but are not caught up. The status line says it while a job waits (:func:`describe_waits`); a run that
        cannot get past it says it when it stops.

        What that plan saw, not the publications now: one that appeared since is read by the next plan. Asking
        the blob store again here would call a task caught up whose main input no plan ever let through (the
        builder published between the plan and the question), and ``--once`` would end without its output."""
        out: dict[str, list[str]] = {}
        for task, stream in sorted(self._held.items()):
            stores = self._broadcast_stores.get(stream, [])
            names = ", ".join(f"'{s.name}'" for s in stores) or "?"
            builders = ", ".join(sorted({f"'{s.builder_task}'" for s in stores})) or "?"
            reason = (f"the bootstrapped publication of broadcast store {names} (stream {stream}), which task "
                      f"{builders} builds and has not published yet")
            out.setdefault(reason, []).append(task)
        return out

    def _published(self, ssp: SystemStreamPartition) -> bool:
        if self._broadcast_ready is None or ssp.system_stream in self._ready:
            return True
        if self._broadcast_ready(ssp.system_stream):
            self._ready.add(ssp.system_stream)  # a bootstrapped publication stays published
            return True
        return False

    def _all_ended(self, task: TaskModel, ends: Mapping[str, str]) -> bool:
        for ssp in task.ssps:
            bound = self.bounded_end(ssp)
            if bound is None or self._cmp(ssp, ends[str(ssp)], bound) < 0:
                return False
        return True

    def splits(self, before: BatchPlan, after: BatchPlan) -> list[TaskSplit]:
        """What every task reads in the batch from plan ``before`` to plan ``after``: one split per task, in task
        order (the Spark source's partitions, and what :class:`sparza.testing.TestRunner` runs in-process)."""
        splits = []
        for i, task in enumerate(self.tasks):
            was = before.task(task.name).offsets
            now = after.tasks[task.name]
            names = task.ssp_keys()
            bounded = {str(s): end for s in task.ssps if (end := self.bounded_end(s)) is not None}
            if now.bounded_ends is not None:  # a replayed intent decides end-of-stream as its first attempt did
                bounded = {k: v for k, v in now.bounded_ends.items() if k in bounded}
            if now.planned_at_ms is not None:  # a replayed intent drains (or not) as its first attempt did
                drain = now.drain
            elif after.drain is not None:
                drain = {"id": after.drain.id, "unreached": self._unreached(task, now.offsets, after.drain)}
            else:
                drain = None
            splits.append(TaskSplit(
                index=i, task=task.name, batch=after.batch,
                planned_at=now.planned_at_ms if now.planned_at_ms is not None else after.planned_at_ms, ssps=names,
                starts=[was[n] if n in was else self._missing_start(task, n, now.offsets[n]) for n in names],
                ends=[now.offsets[n] for n in names], ended=now.ended, bounded_ends=bounded,
                reset=list(before.task(task.name).reset), drain=drain))
        return splits

    def _missing_start(self, task: TaskModel, name: str, end: str) -> str:
        """Where a batch starts reading an SSP the plan before it did not know (a plan from before the task gained it):
        a partition its stream gained is read from its oldest offset, as :meth:`_task_ends` planned; any other SSP
        reads nothing in this batch (it starts at its end)."""
        ssp = SystemStreamPartition.parse(name)
        if ssp in task.new:
            oldest = self._metadata()[ssp].oldest
            if oldest is not None and self._cmp(ssp, oldest, end) <= 0:
                return oldest
        return end

    def _unreached(self, task: TaskModel, ends: Mapping[str, str], drain: DrainRequest) -> list[str]:
        """The source SSPs of ``task`` that have not reached their drain end (nor the end of a bounded stream)
        at ``ends``."""
        out = []
        for ssp in task.ssps:
            key = str(ssp)
            frozen = drain.ends.get(key)
            if ssp not in self._sources or frozen is None or self._cmp(ssp, ends[key], frozen) >= 0:
                continue
            bound = self.bounded_end(ssp)
            if bound is not None and self._cmp(ssp, ends[key], bound) >= 0:
                continue
            out.append(key)
        return out

    def lag(self, plan: BatchPlan) -> int | None:
        """Messages not yet planned across every task's SSPs (None when a system cannot count)."""
        positions = self._metadata()
        total = 0
        for task in self.tasks:
            offsets = plan.task(task.name).offsets
            for ssp in task.ssps:
                begin = offsets.get(str(ssp))
                if begin is None:
                    continue
                n = self.ops[ssp.system].count_between(ssp, begin, positions[ssp].upcoming)
                if n is None:
                    return None
                total += n
        return total
