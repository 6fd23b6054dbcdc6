"""Running an ``app.class`` application: every stage as its own streaming query of one processor.

:func:`sparza.api.plan_application` splits the application into stages (topological order),
each an ordinary job config whose task is :class:`sparza.api.StageTask`. The intermediate streams
between stages are created first (idempotent). All stages share one SparkSession; a signal stops
every stage at a batch boundary; a failed stage stops the others; a bounded pipeline ends when
every stage saw end-of-stream on all its inputs; a drain (``drain=True``, ``sparza drain``) is one request
for every stage (one id), and the application stops when every stage drained.

Under ``job.coordinator.factory: azure`` the processors of the application are one membership whose job model
holds every stage's tasks (:class:`~sparza.runtime.driver.coordinated.CoordinatedStages`).
"""

from __future__ import annotations

from typing import Any

from sparza.config import Config
from sparza.config.shared import JOB_NAME
from sparza.engine.jobconfig import JobConfig
from sparza.errors import ConfigError
from sparza.interrupts import StopOnSignals
from sparza.runtime.driver.report import Discards, RunOutcome
from sparza.runtime.driver.runner import JobRunner, build_spark_session

__all__ = ["run_application", "run_together"]


def run_application(config: Config, *, master: str | None = None, processor_id: str = "0", once: bool = False,
                    stage: str | None = None, spark: Any = None,
                    install_signal_handlers: bool = True, remote: str | None = None, drain: bool = False) -> RunOutcome:
    """Plan ``app.class`` and run its stages (or only ``stage``) until they stop; ``drain``: request a drain of
    every stage first (one drain of the whole application, even with ``stage``) and stop once drained."""
    from sparza.api import plan_application

    plan = plan_application(config)
    plan.create_streams()
    stages = plan.stages
    if stage is not None:
        stages = [s for s in stages if s.name == stage]
        if not stages:
            raise ConfigError("--stage", stage, "one of the stages " + ", ".join(s.name for s in plan.stages))
    from sparza.runtime.driver.preflight import check_job

    for planned in stages:
        check_job(planned.config)  # before a SparkSession exists: one line naming the key, exit 2
    owns_spark = spark is None
    if spark is None:
        spark = build_spark_session(JobConfig.from_config(stages[0].config), master,
                                    f"sparza-{JOB_NAME.require(config)}", remote)
    try:
        if JobConfig.from_config(stages[0].config).coordinator_factory == "azure":
            from sparza.runtime.driver.coordinated import run_coordinated_stages

            # One membership for the whole application (named after it); --stage joins that stage's own.
            return run_coordinated_stages([s.config for s in stages], spark=spark, processor_id=processor_id,
                                          once=once, install_signal_handlers=install_signal_handlers,
                                          membership=config if stage is None else None)
        return _run_standalone([s.config for s in stages], [s.config for s in plan.stages], spark,
                               processor_id=processor_id, once=once, drain=drain,
                               install_signal_handlers=install_signal_handlers)
    finally:
        if owns_spark:
            spark.stop()


def _run_standalone(configs: list[Config], all_configs: list[Config], spark: Any, *, processor_id: str, once: bool,
                    drain: bool, install_signal_handlers: bool) -> RunOutcome:
    """Every task of every stage in this processor, under each stage's job claim."""
    runners = [JobRunner(c, spark=spark, processor_id=processor_id, once=once, install_signal_handlers=False)
               for c in configs]

    def stop_all(reason: str) -> None:
        for r in runners:
            r.request_stop(reason)

    signals = StopOnSignals(stop_all, runners[0].status).install() if install_signal_handlers else None
    try:
        for runner in runners:  # every stage's claim before any stage runs: refuse as a whole
            runner.acquire_claim()
        if drain:
            from sparza.runtime.driver.drainmonitor import request_drain

            request_drain(all_configs)
        if once:
            # AvailableNow freezes each query's end at its start: run the stages one after the other
            # (writers first), so every stage sees all its upstream stage wrote.
            outcomes: list[RunOutcome] = []
            for runner in runners:
                runner.start()
                while runner.poll():
                    pass
                outcomes.append(runner.finish())
            return RunOutcome("caught up (--once)", sum(o.batches for o in outcomes), 0, discards=_discards(outcomes))
        outcomes = run_together(runners)
        reasons = sorted({o.reason for o in outcomes})
        return RunOutcome("; ".join(reasons), sum(o.batches for o in outcomes), 0, discards=_discards(outcomes))
    finally:
        if signals is not None:
            signals.restore()
        for runner in runners:
            runner.close()


def _discards(outcomes: list[RunOutcome]) -> Discards:
    total = Discards()
    for outcome in outcomes:
        total.add(outcome.discards)
    return total


def run_together(runners: list[JobRunner]) -> list[RunOutcome]:
    """Start every runner and poll them in turn until all have stopped; a failed one stops the others.

    Every runner is finished (committed and stopped) before the first failure, if any, is raised.
    """
    for runner in runners:
        runner.start()
        # One query at a time through source initialization: each starts a Python source process that
        # must connect back to the JVM within Spark's fixed 10 s, which several at once on a busy
        # host can miss.
        runner.wait_initialized()
    while True:
        running = [r.poll(0.25 / len(runners)) for r in runners]
        if any(r.failed for r in runners):
            for r in runners:
                r.request_stop("another stage failed")
            break
        if not any(running):
            break
    outcomes = []
    failure: BaseException | None = None
    for runner in runners:
        try:
            outcomes.append(runner.finish())
        except Exception as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return outcomes
