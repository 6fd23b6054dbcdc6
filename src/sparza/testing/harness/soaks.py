"""Soaks: random seeds (or given ones) on one engine or both, until the time is up; every failure printed with
its one-line reproduction for each engine, and a final count per engine."""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sparza.testing.harness.outcome import Outcome
from sparza.testing.scenario import generate

__all__ = ["SoakResult", "soak", "soak_inprocess", "soak_spark"]

PROGRESS_EVERY = 100
"""An in-process soak prints one progress line per this many scenarios (every failure in full)."""


@dataclass
class SoakResult:
    """What one engine's soak ran: its outcomes and how long it took."""

    engine: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[Outcome]:
        """The scenarios that failed (inconclusive ones are not failures)."""
        return [o for o in self.outcomes if not o.ok and not o.inconclusive]

    @property
    def inconclusive(self) -> int:
        """How many scenarios proved nothing (Spark could not start its workers)."""
        return sum(1 for o in self.outcomes if o.inconclusive)

    @property
    def per_hour(self) -> float:
        """Scenarios per hour of this soak's wall-clock time."""
        return len(self.outcomes) * 3600 / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """``soak [inprocess]: 1200 scenarios, 1199 passed, 1 failed, 0 inconclusive in 3600 s (1200/hour)``."""
        failed, unsure = len(self.failed), self.inconclusive
        return (f"soak [{self.engine}]: {len(self.outcomes)} scenarios, {len(self.outcomes) - failed - unsure} passed, "
                f"{failed} failed, {unsure} inconclusive in {self.seconds:.0f} s ({self.per_hour:.0f}/hour)")

    def breakdown(self) -> str:
        """Scenarios by execution mode, with real producers, and by engine fault met:
        ``by mode: containers 900 (0 failed), batches 300 (0 failed); real producers: 130 (10.8 %); engine faults:
        kill 120, add 60``."""
        modes: dict[str, list[int]] = {}
        faults: dict[str, int] = {}
        for o in self.outcomes:
            seen = modes.setdefault(o.scenario.execution, [0, 0])
            seen[0] += 1
            seen[1] += 0 if o.ok or o.inconclusive else 1
            for fault in o.engine_faults:
                faults[fault] = faults.get(fault, 0) + 1
        real = sum(1 for o in self.outcomes if o.real_producers)
        share = 100.0 * real / len(self.outcomes) if self.outcomes else 0.0
        return ("by mode: " + ", ".join(f"{m} {n} ({f} failed)" for m, (n, f) in sorted(modes.items()))
                + f"; real producers: {real} ({share:.1f} %); engine faults: "
                + (", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "none"))


def _seeds(seeds: list[int] | None) -> Iterator[int]:
    if seeds is not None:
        yield from seeds
        return
    rng = random.Random()
    while True:
        yield rng.randrange(1, 10**9)


def soak_inprocess(minutes: float, base: Path, *, seeds: list[int] | None = None, keep: bool = False,
                   verbose: bool = False, out: Callable[[str], None] = print) -> SoakResult:
    """In-process scenarios of random seeds (or ``seeds``, in order, until they run out) until ``minutes`` have
    passed; failures are printed in full as they come, passes every :data:`PROGRESS_EVERY` (each with
    ``verbose``)."""
    from sparza.testing.harness.inprocess import run_inprocess_scenario

    if not verbose:  # thousands of scenarios: the runtime's warnings (restores, recoveries) would drown the failures
        logging.getLogger("sparza").setLevel(logging.ERROR)
    result = SoakResult("inprocess")
    started = time.monotonic()
    deadline = started + minutes * 60
    for seed in _seeds(seeds):
        if time.monotonic() >= deadline:
            break
        workdir = base / f"inprocess-{seed}"
        outcome = run_inprocess_scenario(generate(seed), workdir)
        result.outcomes.append(outcome)
        if not outcome.ok or verbose:
            out(outcome.report())
        if outcome.ok and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        result.seconds = time.monotonic() - started
        if len(result.outcomes) % PROGRESS_EVERY == 0:
            out(f"  ... {result.summary()}")
    result.seconds = time.monotonic() - started
    return result


def soak_spark(minutes: float, base: Path, *, seeds: list[int] | None = None, keep: bool = False,
               out: Callable[[str], None] = print) -> SoakResult:
    """Spark scenarios (``sparza run`` subprocesses) of random seeds (or ``seeds``) until ``minutes`` have
    passed: one Azurite and one Kafka broker for all of them; each result printed as it comes. Starts no
    scenario after the time is up."""
    from sparza.testing.harness.spark import run_spark_scenario, start_azurite, start_kafka

    result = SoakResult("spark")
    started = time.monotonic()
    deadline = started + minutes * 60
    azurite = start_azurite(base)
    kafka = start_kafka(base)
    try:
        for seed in _seeds(seeds):
            if time.monotonic() >= deadline:
                break
            workdir = base / f"seed-{seed}"
            scenario = generate(seed)
            out(f"start {scenario.describe()}")
            outcome = run_spark_scenario(scenario, azurite, workdir, kafka=kafka)
            result.outcomes.append(outcome)
            out(outcome.report())
            recent = result.outcomes[-3:]
            if len(recent) == 3 and all(any(p.startswith("harness error") for p in o.problems) and o.seconds < 30
                                        for o in recent):
                # Three scenarios in a row died at once in the harness itself: the environment is
                # broken (a venv being reinstalled, a full disk), and going on would only count noise.
                out("soak: stopped: three scenarios in a row failed at once with a harness error; fix the "
                    "environment and run again")
                break
            if outcome.ok and not keep:
                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        azurite.stop()
        kafka.stop()
        result.seconds = time.monotonic() - started
    return result


def soak(minutes: float, base: Path, *, engine: str = "both", inprocess_minutes: float | None = None,
         seeds: list[int] | None = None, keep: bool = False, verbose: bool = False,
         out: Callable[[str], None] = print) -> list[SoakResult]:
    """A soak of ``minutes`` on ``engine`` (``inprocess``, ``spark`` or ``both``). With both, the in-process
    engine runs first for ``inprocess_minutes`` (default a third of the time) and Spark for the rest, so each
    has the machine to itself. Ends with each engine's count and every failing seed's reproduction on each
    engine."""
    results: list[SoakResult] = []
    if engine in ("inprocess", "both"):
        share = minutes if engine == "inprocess" else (inprocess_minutes if inprocess_minutes is not None
                                                        else minutes / 3)
        results.append(soak_inprocess(share, base, seeds=seeds, keep=keep, verbose=verbose, out=out))
    if engine in ("spark", "both"):
        share = minutes - (results[0].seconds / 60 if results else 0.0)
        results.append(soak_spark(max(0.0, share), base, seeds=seeds, keep=keep, out=out))
    out("")
    for result in results:
        out(result.summary())
        out(f"  {result.breakdown()}")
        if result.engine == "spark":
            out("  (inconclusive: Spark could not start its Python workers)")
        for outcome in result.failed:
            out(f"  FAIL seed {outcome.scenario.seed}:")
            for name in ("inprocess", "spark"):
                out(f"    {name}: {outcome.reproduce(name)}")
    return results
