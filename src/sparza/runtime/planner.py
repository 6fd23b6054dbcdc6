"""The batch planner: on the driver, decide what every task reads in the next batch.

A *plan* is a JSON-able dict that Spark stores in its offset log before the batch runs, so a
replay after a crash runs the very same batch::

    {"seq": 7, "planned_at": 1732230000000,
     "tasks": {"Partition 0": {"offsets": {"delta.in#0": "12:0", ...}, "ended": false}, ...}}

``offsets`` are, per task and SSP, the next offset to read; a batch reads ``[start plan, end
plan)``. ``seq`` is the runtime's batch number: task checkpoints record it, Delta app
transactions use it as version, and it continues from the task checkpoints when the Spark
checkpoint dir is new (Spark's own batch id restarts at 0 then). ``planned_at`` is the planning
time in epoch ms: tasks use it instead of their own clock (window timing, control messages), so a
replay makes the same decisions.

A task whose checkpoint holds an open intent (it flushed outputs for a batch it did not commit,
and Spark's offset log of that batch is gone) gets ``replay`` in the start plan: its next batch
is exactly that range, with the intent's ``planned_at`` (see ``TaskCheckpoint.pending``).

Each SSP's end is its newest offset, capped by ``task.max.batch.messages``, by the end of a
bounded stream (the upcoming offset seen when the planner started), and by the AvailableNow
target. Bootstrap gating: a task's other inputs stay put until its bootstrap inputs reached the
offsets seen at start.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from sparza.runtime.checkpoint import TaskCheckpoint
from sparza.runtime.jobconfig import InputSpec, JobConfig
from sparza.runtime.model import TaskModel
from sparza.runtime.offsets import OffsetOps
from sparza.streams import SystemStreamPartition

__all__ = ["BatchPlanner", "Plan", "SspPosition"]

Plan = dict[str, Any]
"""A batch plan (see the module docstring)."""


class SspPosition:
    """The metadata of one SSP the planner needs: oldest existing and upcoming offsets."""

    __slots__ = ("oldest", "upcoming")

    def __init__(self, oldest: str | None, upcoming: str) -> None:
        self.oldest = oldest
        self.upcoming = upcoming


MetadataFn = Callable[[], Mapping[SystemStreamPartition, SspPosition]]


class BatchPlanner:
    """Plans batches for a fixed set of tasks from fresh stream metadata on every call."""

    def __init__(self, job: JobConfig, tasks: list[TaskModel], ops: Mapping[str, OffsetOps],
                 metadata: MetadataFn) -> None:
        self.job = job
        self.tasks = tasks
        self.ops = ops
        self._metadata = metadata
        self._specs: dict[tuple[str, str], InputSpec] = {(s.stream.system, s.stream.stream): s for s in job.inputs}
        from sparza.state.adjunct import AdjunctConfig

        self._adjunct = AdjunctConfig.from_config(job.config).input_streams()
        first = metadata()
        # What "the offsets seen at start" means for bounded and bootstrap streams.
        self.start_positions = {ssp: pos.upcoming for ssp, pos in first.items()}
        self.targets: dict[SystemStreamPartition, str] | None = None

    def spec(self, ssp: SystemStreamPartition) -> InputSpec:
        """The input spec of ``ssp``'s stream."""
        return self._specs[(ssp.system, ssp.stream)]

    def _cmp(self, ssp: SystemStreamPartition, a: str, b: str) -> int:
        return self.ops[ssp.system].compare(a, b)

    def freeze_targets(self) -> None:
        """AvailableNow: never plan past the offsets that exist now."""
        self.targets = {ssp: pos.upcoming for ssp, pos in self._metadata().items()}

    def initial(self, checkpoints: Mapping[str, TaskCheckpoint]) -> Plan:
        """The start plan: offsets from task checkpoints, else ``samza.offset.default`` (oldest/upcoming)."""
        positions = self._metadata()
        tasks: dict[str, Any] = {}
        seq = 0
        for task in self.tasks:
            cp = checkpoints.get(task.name)
            intent = cp.open_intent() if cp is not None else None
            offsets: dict[str, str] = {}
            for ssp in task.ssps:
                key = str(ssp)
                if cp is not None and key in cp.offsets:
                    offsets[key] = cp.offsets[key]
                    continue
                if intent is not None and key in intent.starts:
                    # First batch of this SSP, flushed but not committed: it started where the intent says.
                    offsets[key] = intent.starts[key]
                    continue
                pos = positions[ssp]
                wants_oldest = self.spec(ssp).offset_default == "oldest" or ssp.system_stream in self._adjunct
                if wants_oldest and pos.oldest is not None:
                    offsets[key] = pos.oldest
                else:
                    offsets[key] = pos.upcoming
            tasks[task.name] = {"offsets": offsets, "ended": bool(cp.ended) if cp is not None else False}
            if cp is not None:
                seq = max(seq, cp.batch)
            if intent is not None:
                # Later batches must use higher output versions than the intent's.
                seq = max(seq, intent.batch - 1)
                if all(offsets.get(k) == v for k, v in intent.starts.items()):
                    # SSPs the intent does not know (added since) stay put in the replayed batch;
                    # an SSP the task no longer reads makes the task refuse the batch (instance.py).
                    ends = {k: intent.ends.get(k, v) for k, v in offsets.items()}
                    tasks[task.name]["replay"] = {"ends": ends, "planned_at": intent.planned_at_ms,
                                                  "bounded_ends": dict(intent.bounded_ends)}
        return {"seq": seq, "planned_at": 0, "tasks": tasks}

    def bounded_end(self, ssp: SystemStreamPartition) -> str | None:
        """Where a bounded SSP ends (None for unbounded ones)."""
        return self.start_positions[ssp] if self.spec(ssp).bounded else None

    def next(self, start: Plan, now_ms: int, *, force: bool = False) -> Plan:
        """The plan of the next batch, or ``start`` itself when there is nothing to do."""
        positions = self._metadata()
        tasks: dict[str, Any] = {}
        changed = force
        for task in self.tasks:
            before = start["tasks"].get(task.name) or {"offsets": {}, "ended": False}
            replay = before.get("replay")
            ends = dict(replay["ends"]) if replay else self._task_ends(task, before["offsets"], positions)
            ended = bool(before.get("ended")) or self._all_ended(task, ends)
            if replay or ends != before["offsets"] or ended != bool(before.get("ended")):
                changed = True
            tasks[task.name] = {"offsets": ends, "ended": ended}
            if replay:
                tasks[task.name]["planned_at"] = replay["planned_at"]
                tasks[task.name]["bounded_ends"] = replay.get("bounded_ends", {})
        window_ms = self.job.window_ms
        # A due window is worth a batch of its own, except under AvailableNow: that would never end.
        if (not changed and window_ms > 0 and self.targets is None
                and now_ms - int(start.get("planned_at", 0)) >= window_ms):
            changed = True
        if not changed:
            return start
        return {"seq": int(start["seq"]) + 1, "planned_at": now_ms, "tasks": tasks}

    def _task_ends(self, task: TaskModel, starts: Mapping[str, str],
                   positions: Mapping[SystemStreamPartition, SspPosition]) -> dict[str, str]:
        ends: dict[str, str] = {}
        gated = False
        for ssp in task.ssps:  # bootstrap SSPs come first in a task's read order
            key = str(ssp)
            begin = starts.get(key, positions[ssp].upcoming)
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
        return ends

    def _all_ended(self, task: TaskModel, ends: Mapping[str, str]) -> bool:
        for ssp in task.ssps:
            bound = self.bounded_end(ssp)
            if bound is None or self._cmp(ssp, ends[str(ssp)], bound) < 0:
                return False
        return True

    def lag(self, plan: Plan) -> int | None:
        """Messages not yet planned across every task's SSPs (None when a system cannot count)."""
        positions = self._metadata()
        total = 0
        for task in self.tasks:
            offsets = plan["tasks"].get(task.name, {}).get("offsets", {})
            for ssp in task.ssps:
                begin = offsets.get(str(ssp))
                if begin is None:
                    continue
                n = self.ops[ssp.system].count_between(ssp, begin, positions[ssp].upcoming)
                if n is None:
                    return None
                total += n
        return total

    @staticmethod
    def copy(plan: Plan) -> Plan:
        """A deep copy (plans are handed to Spark and must not be mutated afterwards)."""
        return copy.deepcopy(plan)
