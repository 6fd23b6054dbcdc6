"""What a run says: the status line's notices, what was not delivered as sent, bootstrap progress, the summary.

:class:`Discards` and :class:`RunNotices` add up task results (from a micro-batch or from a container's
commits), :class:`BootstrapProgress` draws the bootstrap bar, :class:`RunOutcome` is how a run ended and
:data:`EXIT_CODES` what ``sparza run`` exits with. Nothing is dropped or skipped without a count here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sparza.deadletters import DEAD_LETTER_STREAM
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig
from sparza.engine.results import BatchResult, BatchStatus

__all__ = ["EXIT_CODES", "BootstrapProgress", "Discards", "RunNotices", "RunOutcome", "describe_storage_requests",
           "short_error"]


EXIT_CODES = {0: "stopped cleanly (signal, --once done, drained, all inputs ended, or a task asked to shut down)",
              1: "the job failed (a task error names SSP and offset; or Spark failed)",
              2: "bad config (one line names the key)",
              3: "another processor holds the job (standalone): refused to start, or lost the claim while running",
              130: "a second Ctrl-C stopped the job without committing the running batch (it runs again at the next "
                   "start)"}
"""Exit codes of ``sparza run``."""


@dataclass
class Discards:
    """What a run did not deliver to task code or output as sent, by cause: never silent (status line,
    summary, metrics and a warning that names the setting to change)."""

    late: int = 0
    late_routed: int = 0
    undeserializable: int = 0  # every data-error drop (Samza's task.drop.*.errors), not only deserialization
    ignored: int = 0
    dead_lettered: int = 0

    @classmethod
    def of(cls, results: list[BatchResult]) -> Discards:
        """The sum over one batch's task results."""
        return cls(sum(r.late for r in results), sum(r.late_routed for r in results),
                   sum(r.dropped for r in results), sum(r.ignored for r in results),
                   sum(_counted(r.metrics, "messages-dead-lettered") for r in results))

    def add(self, other: Discards) -> None:
        """Accumulate another batch."""
        self.late += other.late
        self.late_routed += other.late_routed
        self.undeserializable += other.undeserializable
        self.ignored += other.ignored
        self.dead_lettered += other.dead_lettered

    def __bool__(self) -> bool:
        return bool(self.late or self.undeserializable or self.ignored or self.dead_lettered)

    def describe(self) -> str:
        """``"3 late message(s) dropped, 1 undeserializable message(s) dropped"`` (only the non-zero ones)."""
        parts = []
        dropped_late = self.late - self.late_routed
        if dropped_late:
            parts.append(f"{dropped_late} late message(s) dropped")
        if self.late_routed:
            parts.append(f"{self.late_routed} late message(s) routed")
        if self.undeserializable:
            parts.append(f"{self.undeserializable} message(s) with data errors dropped")
        if self.dead_lettered:
            parts.append(f"{self.dead_lettered} message(s) with data errors sent to the dead-letter stream")
        if self.ignored:
            parts.append(f"{self.ignored} message(s) whose processing raised an ignored exception")
        return ", ".join(parts)

    def advice(self, job: JobConfig) -> str:
        """The warning: counts, the streams read, and the settings that decide them."""
        inputs = ", ".join(str(spec.stream) for spec in job.inputs)
        lines = [f"{self.describe()} (inputs {inputs})."]
        if self.late:
            lines.append("Late messages arrived after every window or join they belong to had closed; allow more "
                         "out-of-orderness with systems.<system>.streams.<stream>.watermark.lateness.ms on the "
                         "application's input streams, or keep them with task.late.messages.policy: route and "
                         "task.late.messages.stream.")
        if self.undeserializable:
            lines.append("Messages with data errors (undeserializable input, output that cannot be written) are "
                         "dropped because task.drop.deserialization.errors or task.drop.serialization.errors is "
                         "true; set task.dead.letter.stream to keep them.")
        if self.dead_lettered:
            lines.append(f"Messages with data errors went to task.dead.letter.stream "
                         f"({DEAD_LETTER_STREAM.get(job.config) or 'unset'}), each with its error.")
        if self.ignored:
            lines.append("Exceptions were ignored because task.ignored.exceptions names them.")
        return " ".join(lines)


def _counted(changes: dict[str, dict[str, list[Any]]], name: str) -> int:
    """The sum of counter ``name`` over every group of a result's metric changes."""
    return sum(int(entry[1]) for metrics in changes.values() for n, entry in metrics.items()
               if n == name and entry[0] == "c")


@dataclass
class RunNotices:
    """What else a user must know about a run (status line, summary; each is a metric too): task
    batches skipped as replays, producer flushes skipped because their output was already written,
    stores restored from the blob store, snapshots with deleted blobs replaced, fenced producers."""

    tasks_skipped: int = 0
    flushes_skipped: int = 0
    restores: int = 0
    snapshot_recoveries: int = 0
    fenced: int = 0  # producers re-created after fencing: a metric only (see written_elsewhere)
    written_elsewhere: int = 0

    @classmethod
    def of(cls, results: list[BatchResult]) -> RunNotices:
        """The notices of one batch's task results (their metric changes)."""
        return cls(
            tasks_skipped=sum(1 for r in results if r.status is BatchStatus.SKIPPED),
            flushes_skipped=sum(_counted(r.system_metrics, "flushes-skipped-replay") for r in results),
            restores=sum(_counted(r.metrics, "restored-from-blob-store") for r in results),
            snapshot_recoveries=sum(_counted(r.metrics, "deleted-snapshot-recoveries") for r in results),
            fenced=sum(_counted(r.system_metrics, "producer-reinitialised-after-fencing") for r in results),
            written_elsewhere=sum(_counted(r.system_metrics, "producer-fenced-batch-written-elsewhere")
                                  for r in results))

    def add(self, other: RunNotices) -> None:
        """Accumulate another batch."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name, _ in self._WORDS)

    # Not ``fenced``: within one processor a task's batches move between Spark's Python workers, whose
    # producers then fence each other; that means nothing to a user (the metric keeps the count).
    _WORDS = (("tasks_skipped", "{} task batch(es) skipped (already committed: a replay)"),
              ("flushes_skipped", "{} output flush(es) skipped (already written: a replay)"),
              ("restores", "{} store(s) restored from the blob store"),
              ("snapshot_recoveries", "{} snapshot(s) with deleted blobs replaced"),
              ("written_elsewhere", "{} output batch(es) another instance of the same task had already "
                                    "written to Kafka (its producer was fenced; written once)"))

    def describe(self) -> str:
        """``"2 task batch(es) skipped (already committed: a replay), 1 store(s) restored from the blob
        store"`` (only the non-zero ones)."""
        return ", ".join(words.format(getattr(self, name)) for name, words in self._WORDS if getattr(self, name))


def describe_storage_requests(requests: int, task_commits: int, seconds: float) -> str:
    """The summary's words for the Azure Storage requests a run sent (``""`` when it sent none):
    ``"1,230 storage requests (2.46 per task-commit, 41.0/s)"``."""
    if requests <= 0:
        return ""
    per_commit = f"{requests / task_commits:.2f} per task-commit, " if task_commits else ""
    return f"{requests:,} storage requests ({per_commit}{requests / max(seconds, 1e-9):.1f}/s)"


@dataclass
class RunOutcome:
    """How a run ended, as ``sparza run``'s summary says it: ``reason`` in words, ``batches`` committed by
    this run, the exit code (:data:`EXIT_CODES`), what was not delivered as sent (``discards``) and, for a
    failed run returned instead of raised (``sparza.run(..., raise_on_error=False)``), the ``error`` line."""

    reason: str
    batches: int
    exit_code: int = 0
    discards: Discards = field(default_factory=Discards)
    error: str | None = None


_SPARZA_ERROR = re.compile(r"^\s*sparza\.[\w.]*\.(\w+(?:Error|Exception)): (.+)$")


def short_error(text: str) -> str:
    """The sparza error a Python worker raised, else the first meaningful line of a Spark/py4j error
    (they carry whole JVM stack traces and the worker's traceback)."""
    raised = [m for m in map(_SPARZA_ERROR.match, text.splitlines()) if m]
    if raised:
        return f"{raised[-1].group(1)}: {raised[-1].group(2).strip()}"[:2000]
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "File ", "Traceback", "JVM stacktrace")):
            return line[:500]
    return text[:500]


class BootstrapProgress:
    """How far the bootstrap inputs (``samza.bootstrap: true``) are on their way to the offsets seen
    when the job started: shown as a bar in the status line until they get there."""

    def __init__(self, job: JobConfig, inputs: InputSystems) -> None:
        self._inputs = inputs
        streams = {spec.stream for spec in job.inputs if spec.bootstrap}
        self._targets: dict[Any, str] = {}
        self._total = 0
        self._done = not streams
        if self._done:
            return
        try:
            positions = inputs.positions()
            for ssp, pos in positions.items():
                if ssp.system_stream in streams:
                    self._targets[ssp] = pos.upcoming
                    if pos.oldest is not None:
                        self._total += inputs.ops[ssp.system].count_between(ssp, pos.oldest, pos.upcoming) or 0
        except Exception:  # progress is informational: never fail a job over it
            self._done = True

    def update(self, results: list[BatchResult]) -> tuple[int, int] | None:
        """``(done, total)`` messages after this batch, or None once bootstrap is complete (or unknown)."""
        if self._done or not self._total:
            return None
        from sparza.streams import SystemStreamPartition

        remaining: dict[Any, int] = {}
        try:
            for r in results:
                for name, offset in r.offsets.items():
                    ssp = SystemStreamPartition.parse(name)
                    target = self._targets.get(ssp)
                    if target is None:
                        continue
                    n = max(0, self._inputs.ops[ssp.system].count_between(ssp, offset, target) or 0)
                    remaining[ssp] = min(n, remaining.get(ssp, n))  # a broadcast SSP: its furthest task
        except Exception:
            self._done = True
            return None
        left = sum(remaining.values())
        if left == 0:
            self._done = True
        return self._total - min(left, self._total), self._total

    @staticmethod
    def render(done: int, total: int, width: int = 20) -> str:
        """``bootstrap [########------------] 40% (400/1000)``."""
        filled = int(width * done / total) if total else width
        return f"bootstrap [{'#' * filled}{'-' * (width - filled)}] {100 * done // max(total, 1)}% ({done}/{total})"
