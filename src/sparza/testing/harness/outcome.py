"""What a scenario run produced, whichever engine ran it: :class:`Outcome` (the verdict, the problems, how
to reproduce it on each engine) and :class:`RunRecord` (one run of the job)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sparza.testing.oracle import Comparison
from sparza.testing.scenario import Scenario

__all__ = ["ENGINES", "Outcome", "RunRecord", "reproduce_command"]

ENGINES = ("inprocess", "spark")
"""The engines a scenario runs on: ``inprocess`` (:class:`sparza.testing.TestRunner`: the runtime's planner,
task and commit code in one process, in-memory streams) and ``spark`` (``sparza run`` subprocesses)."""


def reproduce_command(seed: int, *, engine: str = "spark", messages: int | None = None, fault: str | None = None,
                      output: str | None = None, input: str | None = None, task_api: str | None = None,
                      extras: bool = True, drain: bool = True, execution: bool = True) -> str:
    """The one-line command (from the repository root) that runs the scenario of ``seed`` again on ``engine``
    (``drain=False``: without the drain dimension, ``--drain none``; ``execution=False``: without the execution
    mode's, ``--execution none``; both implied by ``extras=False``)."""
    extra = (f" --messages {messages}" if messages is not None else "") + (f" --fault {fault}" if fault else "")
    extra += (f" --output {output}" if output else "") + (f" --input {input}" if input else "")
    extra += f" --task-api {task_api}" if task_api else ""
    extra += "" if extras else " --extras none"
    extra += "" if drain or not extras else " --drain none"
    extra += "" if execution or not extras else " --execution none"
    engine_arg = "" if engine == "spark" else f" --engine {engine}"
    return f"PYTHONPATH=src:. .venv/bin/python -m sparza.testing.harness{engine_arg} --seed {seed}{extra}"


@dataclass
class RunRecord:
    """One run of the scenario's job: why (``label``), how it ended (``returncode``: 0 clean, None hung, else
    failed), how long, and its log (a ``sparza run``'s file) or its error (an in-process run's exception)."""

    label: str
    returncode: int | None
    seconds: float
    log: Path | None = None
    error: str = ""


@dataclass
class Outcome:
    """The result of one scenario on one engine: ``ok`` when every run behaved and the outputs matched exactly."""

    scenario: Scenario
    engine: str = "spark"
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)
    comparison: Comparison | None = None
    seconds: float = 0.0
    workdir: Path | None = None
    messages_override: int | None = None
    fault_override: str | None = None
    output_override: str | None = None
    input_override: str | None = None
    task_api_override: str | None = None
    extras: bool = True
    drain: bool = True
    execution: bool = True

    real_producers: list[str] = field(default_factory=list)
    """The real producers the scenario's job wrote through (in-process: ``delta`` on local files), if any."""
    engine_faults: list[str] = field(default_factory=list)
    """The engine's faults it met (in-process container mode: kill, add, remove, slow)."""

    inconclusive: bool = False
    """Spark itself could not start the job's Python workers, even after restarts (an overloaded
    machine): the scenario proves nothing either way and counts neither as a pass nor as a fail."""

    @property
    def ok(self) -> bool:
        """True when nothing went wrong."""
        return not self.problems

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``INCONCLUSIVE``."""
        return "INCONCLUSIVE" if self.inconclusive else ("PASS" if self.ok else "FAIL")

    def reproduce(self, engine: str | None = None) -> str:
        """The command that runs this scenario again (on ``engine``, default the one that ran it)."""
        return reproduce_command(self.scenario.seed, engine=engine or self.engine, messages=self.messages_override,
                                 fault=self.fault_override, output=self.output_override, input=self.input_override,
                                 task_api=self.task_api_override, extras=self.extras,
                                 drain=self.drain, execution=self.execution)

    def report(self) -> str:
        """A few lines for humans: the scenario, the verdict, the problems, how to reproduce on each engine."""
        tag = "" if self.engine == "spark" else f"[{self.engine}] "
        lines = [f"{self.verdict} {tag}{self.scenario.describe()} ({self.seconds:.1f}s)"]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        if not self.ok:
            for r in self.runs:
                where = f", log {r.log}" if r.log is not None else (f": {r.error}" if r.error else "")
                lines.append(f"  run {r.label}: exit {r.returncode} in {r.seconds:.1f}s{where}")
            lines += [f"  reproduce ({engine}): {self.reproduce(engine)}"
                      for engine in (self.engine, *(e for e in ENGINES if e != self.engine))]
        return "\n".join(lines)
