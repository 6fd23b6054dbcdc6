"""Inputs that gain partitions (Samza's SEP-5, partition expansion): the job never runs on silently.

A job's tasks are its input partitions (:mod:`sparza.engine.model`), so an input that gains partitions (a Kafka
topic given more, an in-memory stream grown by a test) changes what the job's tasks are. Reading on as before
would leave the new partitions unread; regrouping by partition number would move keys between tasks while their
state stays where it was. What happens instead is ``job.partition.expansion``:

- ``fail``: the job stops (at start, or within one poll of its containers while it runs) naming the stream, the
  partition counts before and after, and these choices. Nothing is committed past what its tasks read.
- ``group`` (SEP-5, Samza's ``SSPGrouperProxy`` with its ``HashSystemStreamPartitionMapper``): the tasks stay
  those of the partition count the job first ran with; a new partition ``p`` of a stream that had ``n`` joins the
  task of partition ``p % n``. For producers that pick partitions as ``hash(key) % count`` and a new count that is
  a multiple of the old one, every key of partition ``p`` was in partition ``p % n`` before: each key's state stays
  in its task. (Another new count moves some keys to a task that has not seen them: the job says so.) A running
  job stops every task at a batch boundary and starts them again, regrouped; it goes on.
- ``new-tasks`` (for jobs without stores): each new partition becomes a task of its own (GroupByPartition).
- ``auto`` (the default): ``fail`` for a job with stores (``stores.<name>.factory``), ``new-tasks`` without: what
  Samza does (it restarts a stateless job and fails a stateful one).

New partitions are read from their oldest offset whatever ``samza.offset.default`` says: every message in them
arrived after the job last grouped its tasks.

The counts are recorded durably in the document ``_partitions`` next to the task checkpoints
(:class:`PartitionRecord`): the count each input stream had when the job first read it (``first``), the count its
tasks are grouped by (``grouped``), the count at the last start (``counts``) and every change seen (``history``).
A restart maps partitions exactly as before; ``sparza checkpoints show`` prints it. A job started before this
record existed gets one from the partitions its task checkpoints name, so a stream that grew while it was stopped
is noticed too. A stream with fewer partitions than recorded always stops the job (data in the partitions gone
would be lost).

Broadcast inputs name their partitions (``task.broadcast.inputs: s.x#[0-3]``): every task keeps reading exactly
those, so a grown broadcast stream stops the job under ``fail`` and is said under the other choices (name the
new partitions there to read them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparza.config import Config
from sparza.engine.errors import RuntimeStateError
from sparza.engine.expansion import EXPANSION, expansion_policy, has_stores
from sparza.errors import SparzaError
from sparza.streams import SystemStream, SystemStreamPartition

__all__ = [
    "EXPANSION",
    "PARTITIONS_DOCUMENT",
    "Grouping",
    "PartitionCountChangedError",
    "PartitionRecord",
    "RegroupNeeded",
    "StreamChange",
    "changes_between",
    "check_running",
    "expansion_policy",
    "has_stores",
    "observed_counts",
    "read_record",
    "settle_partitions",
]

PARTITIONS_DOCUMENT = "_partitions"
"""The record's name among the job's documents (next to the task checkpoints; not ``*.json``: not a task)."""

_CHOICES = ("job.partition.expansion: group (SEP-5: a new partition p joins the task of p % {n}, so keyed state stays "
            "valid for producers that partition by hash % count when the new count is a multiple of the old), "
            "job.partition.expansion: new-tasks (each new partition becomes a task; for jobs without stores), or a new "
            "job.id (starts over with one task per partition)")


@dataclass(frozen=True, slots=True)
class StreamChange:
    """One input stream whose partition count changed from ``before`` to ``after``."""

    stream: SystemStream
    before: int
    after: int
    broadcast: bool = False

    def describe(self) -> str:
        """``kafka.events: 4 -> 6 partitions`` (and ``(a broadcast input)``)."""
        return f"{self.stream}: {self.before} -> {self.after} partitions" + (" (a broadcast input)" if self.broadcast
                                                                           else "")


class PartitionCountChangedError(RuntimeStateError):
    """An input stream's partition count changed and ``job.partition.expansion`` says to stop (or it shrank)."""

    def __init__(self, job: str, changes: list[StreamChange], *, running: bool, policy: str) -> None:
        self.changes = changes
        self.policy = policy
        what = "; ".join(c.describe() for c in changes)
        shrunk = [c for c in changes if c.after < c.before]
        if shrunk:
            detail = (f"job {job}: input partitions disappeared ({what}). Messages in the partitions gone cannot be "
                      "read any more and the job's tasks are those partitions, so it stops; give the stream its "
                      "partitions back, or start over with a new job.id")
        else:
            when = "while it ran" if running else "since it last ran"
            first = min(c.before for c in changes)
            detail = (f"job {job}: input partitions grew {when} ({what}); job.partition.expansion is {policy}, so the "
                      "job stops instead of leaving the new partitions unread or moving keys away from their state. "
                      f"Nothing committed is lost. Choose: {_CHOICES.format(n=first)}; then start the job again")
        super().__init__(detail)


@dataclass(frozen=True)
class PartitionRecord:
    """The durable record (see the module docstring); streams as ``system.stream``."""

    first: dict[str, int]
    grouped: dict[str, int]
    counts: dict[str, int]
    history: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> bytes:
        """The stored form (sorted-key JSON)."""
        body = {"version": 1, "first": self.first, "grouped": self.grouped, "counts": self.counts,
                "history": list(self.history)}
        return json.dumps(body, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> PartitionRecord:
        """Inverse of :meth:`to_json`."""
        body = json.loads(data)
        return cls({str(k): int(v) for k, v in body.get("first", {}).items()},
                   {str(k): int(v) for k, v in body.get("grouped", {}).items()},
                   {str(k): int(v) for k, v in body.get("counts", {}).items()},
                   tuple(body.get("history") or ()))


@dataclass(frozen=True)
class Grouping:
    """How the job's partitions become tasks this run: per stream the count it has, the count its tasks are grouped
    by (a partition ``p >= grouped`` joins the task of ``p % grouped``), and the count it had when the job first read
    it (partitions from there on are new: read from their oldest offset when no checkpoint names them)."""

    counts: Mapping[SystemStream, int]
    grouped: Mapping[SystemStream, int] = field(default_factory=dict)
    first: Mapping[SystemStream, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What the settling said (a new count that is no multiple of the old, a grown broadcast stream)."""
    changes: tuple[StreamChange, ...] = ()
    """The counts that changed since the record's last start (and that this start regroups for)."""

    def describe(self, policy: str) -> str:
        """One line on what this start does about :attr:`changes` (empty when nothing changed)."""
        if not self.changes:
            return ""
        what = "; ".join(c.describe() for c in self.changes)
        if policy == "group":
            mapping = ", ".join(f"{s} partition p >= {n} -> task of p % {n}" for s, n in
                                sorted(self.grouped.items(), key=lambda kv: str(kv[0]))
                                if self.counts.get(s, 0) > n)
            return (f"input partitions grew ({what}); job.partition.expansion: group (SEP-5): "
                    f"{mapping or 'no change'}; the new partitions are read from their oldest offset")
        return (f"input partitions grew ({what}); job.partition.expansion: {policy}: each new partition is a task of "
                "its own, read from its oldest offset")

    def task_partition(self, ssp: SystemStreamPartition) -> int:
        """The partition number of the task that reads ``ssp`` (its own, or ``p % grouped``)."""
        n = self.grouped.get(ssp.system_stream)
        return ssp.partition if n is None or ssp.partition < n else ssp.partition % n

    def is_new(self, ssp: SystemStreamPartition) -> bool:
        """True for a partition the stream gained after the job first read it."""
        n = self.first.get(ssp.system_stream)
        return n is not None and ssp.partition >= n


def read_record(store: Any) -> PartitionRecord | None:
    """The job's record in its checkpoint store (None: none yet, or a store that keeps no documents)."""
    from sparza.engine.checkpoint import SupportsJobDocuments

    if not isinstance(store, SupportsJobDocuments):
        return None
    data = store.read_document(PARTITIONS_DOCUMENT)
    return PartitionRecord.from_json(data) if data is not None else None


def _counts_in_checkpoints(store: Any, counts: Mapping[SystemStream, int]) -> dict[str, int]:
    """Per stream, what a job started before the record existed last read, as far as its task checkpoints tell: one more
    than the highest partition they name, and at least the job's task count then (every task of a run has a checkpoint
    document, stamped at its start) where the stream has that many partitions now. Never more than it last read: a
    partition whose task had not committed yet must not look new (a count that grew is noticed when the stream had
    as many partitions as the job had tasks)."""
    seen: dict[str, int] = {}
    tasks = 0
    for name, cp in store.read_all().items():
        head, _, number = str(name).rpartition(" ")
        if head == "Partition" and number.isdigit():
            tasks = max(tasks, int(number) + 1)
        for key in cp.offsets:
            try:
                ssp = SystemStreamPartition.parse(key)
            except ValueError:
                continue
            seen[str(ssp.system_stream)] = max(seen.get(str(ssp.system_stream), 0), ssp.partition + 1)
    out = {}
    for stream, count in counts.items():
        name = str(stream)
        if name in seen:
            out[name] = max(seen[name], min(count, tasks))
    return out


def settle_partitions(config: Config, job_key: str, counts: Mapping[SystemStream, int], store: Any, *,
                      broadcast: frozenset[SystemStream] = frozenset()) -> Grouping:
    """The grouping of this start, from the record and the counts the inputs have now (``counts``), writing the
    record when it is new or a count changed. Raises :class:`PartitionCountChangedError` when the policy says to
    stop (or a stream shrank). Idempotent: every process of the job that builds its tasks settles alike."""
    from sparza.engine.checkpoint import SupportsJobDocuments

    record = read_record(store)
    write = False
    if record is None:
        seen = _counts_in_checkpoints(store, counts)
        base = {str(s): seen.get(str(s), n) for s, n in counts.items()}
        record = PartitionRecord(dict(base), dict(base), dict(base))
        write = True
    first, grouped, now = dict(record.first), dict(record.grouped), dict(record.counts)
    changes: list[StreamChange] = []
    for stream, count in sorted(counts.items(), key=lambda kv: str(kv[0])):
        name = str(stream)
        if name not in now:  # an input new to the job: grouped by partition from now on
            first[name] = grouped[name] = now[name] = count
            write = True
        elif now[name] != count:
            changes.append(StreamChange(stream, now[name], count, stream in broadcast))
    policy = expansion_policy(config)
    notes: list[str] = []
    if changes:
        shrunk = [c for c in changes if c.after < c.before]
        grown_main = [c for c in changes if not c.broadcast]
        if shrunk or policy == "fail":
            raise PartitionCountChangedError(job_key, shrunk or changes, running=False, policy=policy)
        history = list(record.history)
        for change in changes:
            name = str(change.stream)
            if not change.broadcast and policy == "new-tasks":
                grouped[name] = change.after
            now[name] = change.after
            history.append({"stream": name, "from": change.before, "to": change.after, "policy": policy,
                            "at_ms": int(time.time() * 1000)})
            if change.broadcast:
                notes.append(f"broadcast input {name} grew from {change.before} to {change.after} partitions: every "
                             "task still reads the partitions task.broadcast.inputs names (name the new ones there "
                             "to read them)")
        for change in grown_main:
            name = str(change.stream)
            if policy == "group" and change.after % grouped[name]:
                notes.append(f"{name} grew from {change.before} to {change.after} partitions, which is no multiple "
                             f"of {grouped[name]}: for producers that partition by hash % count, some keys now land "
                             "in a partition whose task has not seen them (their counts restart there)")
        record = replace(record, first=first, grouped=grouped, counts=now, history=tuple(history))
        write = True
    if write and isinstance(store, SupportsJobDocuments):
        store.write_document(PARTITIONS_DOCUMENT, record.to_json())
    wanted = {str(s) for s in counts}
    by_name = {str(s): s for s in counts}
    return Grouping(dict(counts),
                    {by_name[k]: v for k, v in grouped.items() if k in wanted and by_name[k] not in broadcast},
                    {by_name[k]: v for k, v in first.items() if k in wanted}, tuple(notes), tuple(changes))


def observed_counts(positions: Mapping[SystemStreamPartition, Any]) -> dict[SystemStream, int]:
    """Per stream, how many partitions a metadata read saw (one more than the highest partition number)."""
    out: dict[SystemStream, int] = {}
    for ssp in positions:
        stream = ssp.system_stream
        if ssp.partition >= out.get(stream, 0):
            out[stream] = ssp.partition + 1
    return out


def changes_between(counts: Mapping[SystemStream, int], positions: Mapping[SystemStreamPartition, Any],
                    broadcast: frozenset[SystemStream] = frozenset()) -> list[StreamChange]:
    """The streams whose partition count in ``positions`` differs from ``counts`` (the tasks' grouping)."""
    seen = observed_counts(positions)
    return [StreamChange(s, n, seen[s], s in broadcast) for s, n in sorted(counts.items(), key=lambda kv: str(kv[0]))
            if s in seen and seen[s] != n]


REGROUP_REASON = "input partitions grew"
"""The stop reason of a run whose tasks stopped to start again regrouped (``group``, ``new-tasks``)."""


class RegroupNeeded(SparzaError):
    """A running job's input partitions grew and ``job.partition.expansion`` regroups: each task stops at a batch
    boundary (nothing in flight), and the host starts them again grouped for the new counts."""

    def __init__(self, job: str, changes: list[StreamChange], policy: str) -> None:
        self.changes = changes
        super().__init__(f"job {job}: input partitions grew ({'; '.join(c.describe() for c in changes)}); "
                         f"job.partition.expansion: {policy}: every task stops at a batch boundary and starts again "
                         "with the new partitions " + ("joining the tasks of partition % the first count (SEP-5)"
                                                       if policy == "group" else "as tasks of their own"))


def check_running(job: str, policy: str, changes: list[StreamChange]) -> list[StreamChange]:
    """What a running job does about ``changes`` (seen by a metadata read, against the counts its tasks are grouped
    for): raises :class:`PartitionCountChangedError` (``fail``, or a stream shrank) or :class:`RegroupNeeded` (a
    partitioned input grew under ``group``/``new-tasks``); returns the broadcast changes it goes on with (said once
    by the caller: every task reads the partitions ``task.broadcast.inputs`` names)."""
    if not changes:
        return []
    shrunk = [c for c in changes if c.after < c.before]
    if shrunk or policy == "fail":
        raise PartitionCountChangedError(job, shrunk or changes, running=True, policy=policy)
    main = [c for c in changes if not c.broadcast]
    if main:
        raise RegroupNeeded(job, main, policy)
    return changes
