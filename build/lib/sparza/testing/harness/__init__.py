"""The randomized, oracle-checked fault harness: a seed makes a job, its input and its faults
(:mod:`sparza.testing.scenario`); an engine runs it with the faults injected; the outputs are compared exactly
with what the plain-Python oracle (:mod:`sparza.testing.oracle`) says they must be.

Two engines run the same scenarios:

- ``inprocess`` (:mod:`~sparza.testing.harness.inprocess`): :class:`sparza.testing.TestRunner` drives the
  runtime's planner, task and commit code in this process over in-memory streams; faults at every commit
  step, lost and damaged state, replays, restarts and a second processor; a fraction of a second a scenario.
- ``spark`` (:mod:`~sparza.testing.harness.spark`): ``sparza run`` subprocesses on Spark, Delta, Kafka,
  Azurite; real kills and service restarts; minutes a scenario.

::

    python -m sparza.testing.harness --seed 12345                      # one scenario on Spark; exit 1 if it fails
    python -m sparza.testing.harness --engine inprocess --seed 12345   # the same scenario in-process
    python -m sparza.testing.harness --soak 60                         # both engines, random seeds, 60 minutes
    python -m sparza.testing.harness --soak 60 --engine inprocess --seeds 1-1000
    python -m sparza.testing.harness --seed 12345 --print              # only describe the scenario

Every failure prints its one-line reproduction for each engine.
"""

from __future__ import annotations

from sparza.testing.harness.check import judge
from sparza.testing.harness.inprocess import InProcessJob, draw, inprocess_config, run_inprocess_scenario
from sparza.testing.harness.jobconfig import job_config
from sparza.testing.harness.outcome import ENGINES, Outcome, RunRecord, reproduce_command
from sparza.testing.harness.soaks import SoakResult, soak
from sparza.testing.harness.spark import SparkJob, check, log_tail, run_spark_scenario

__all__ = [
    "ENGINES",
    "InProcessJob",
    "Outcome",
    "RunRecord",
    "SoakResult",
    "SparkJob",
    "check",
    "draw",
    "inprocess_config",
    "job_config",
    "judge",
    "log_tail",
    "reproduce_command",
    "run_inprocess_scenario",
    "run_spark_scenario",
    "soak",
]
