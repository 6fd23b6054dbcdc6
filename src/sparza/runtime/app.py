"""What ``sparza run`` runs: a ``task.class`` job, or every stage of an ``app.class`` application.

Standalone (``job.coordinator.factory: standalone``, the default) runs every task in this
processor.
"""

from __future__ import annotations

import os
import sys

from sparza.config import Config
from sparza.runtime.jobconfig import JobConfig
from sparza.runtime.runner import JobRunner, RunOutcome

__all__ = ["run_config"]


def _importable_cwd() -> None:
    """Executors import task classes by dotted path: make the working dir importable for them too."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *parts])


def run_config(config: Config, *, master: str | None = None, processor_id: str = "0", once: bool = False,
               stage: str | None = None) -> RunOutcome:
    """Validate the config and run it until it stops; raises ConfigError / JobFailedError.

    Every key is checked first (:func:`sparza.configcheck.validate_for_run`): an unknown key in a
    namespace sparza owns stops the run; a Samza key sparza does not use is warned about once. Then
    the driver-side checks of :mod:`sparza.runtime.preflight` run, before any SparkSession is built.
    """
    from sparza.configcheck import validate_for_run

    _importable_cwd()
    config = validate_for_run(config, warn=lambda line: print(f"warning: {line}", file=sys.stderr, flush=True))
    job = JobConfig.from_config(config)
    from sparza.runtime.preflight import check_application, check_job

    if job.app_class is not None and config.get_str("app.stage", None) is None:
        from sparza.runtime.stages import run_application

        check_application(config)  # each planned stage is checked by run_application, before Spark
        return run_application(config, master=master, processor_id=processor_id, once=once, stage=stage)
    check_job(config)  # before a SparkSession exists: one line naming the key, exit 2
    if job.coordinator_factory == "azure":
        from sparza.runtime.coordinated import run_coordinated

        return run_coordinated(config, master=master, processor_id=processor_id, once=once)
    return JobRunner(config, master=master, processor_id=processor_id, once=once).run()
