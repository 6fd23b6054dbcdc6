"""What ``sparza run`` and :func:`sparza.run` run: a ``task.class`` job, or every stage of an ``app.class``
application, on a session sparza builds (``local[N]``, a cluster master, Spark Connect) or on one the
caller owns (a notebook, a ``spark-submit`` script).

Standalone (``job.coordinator.factory: standalone``, the default) runs every task in this
processor; ``azure`` runs the share the job model gives it, of a job or of each stage of an application.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from sparza.config import Config
from sparza.config.shared import APP_STAGE
from sparza.engine.jobconfig import PROCESSOR_ID, JobConfig
from sparza.errors import ConfigError
from sparza.runtime.driver.report import RunOutcome
from sparza.runtime.driver.runner import JobRunner

__all__ = ["run", "run_config"]


def _importable_cwd() -> None:
    """A local session's executors import task classes by dotted path: make the working dir importable for
    them too (cluster executors get the code from job.py.files, see operations.md)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *parts])


def run_config(config: Config, *, master: str | None = None, remote: str | None = None, spark: Any = None,
               processor_id: str = "0", once: bool = False, stage: str | None = None,
               drain: bool = False) -> RunOutcome:
    """Validate the config and run it until it stops (``drain``: request a drain at the start and stop once every
    task drained, see :mod:`sparza.engine.drain`); raises ConfigError / JobFailedError / ClaimError.

    Every key is checked first (:func:`sparza.config.check.validate_for_run`): an unknown key in a
    namespace sparza owns stops the run; a Samza key sparza does not use is warned about once. Then
    the driver-side checks of :mod:`sparza.runtime.driver.preflight` run, before any SparkSession is built
    (or, with ``spark``, before anything runs on it). A ``spark`` session is used as is and never stopped.
    """
    from sparza.config.check import validate_for_run
    from sparza.runtime.driver.session import planned_target, spark_target

    _importable_cwd()
    warn = lambda line: print(f"warning: {line}", file=sys.stderr, flush=True)  # noqa: E731
    config = validate_for_run(config, warn=warn)
    job = JobConfig.from_config(config)
    from sparza.runtime.driver.preflight import check_application, check_deployment, check_job

    if once and drain:
        raise ConfigError("--drain", True, "", message=(
            "--once and --drain exclude each other: --once processes what exists and stops with windows still "
            "open; --drain processes what exists, fires every open window and stops drained"))
    if drain:
        from sparza.engine.drain import check_standalone

        check_standalone(config)
        config = config.with_overrides({"job.drain-monitor.enabled": "true"})  # --drain reads its own request
    if spark is not None and (master or remote):
        raise ConfigError("--master" if master else "--remote", master or remote,
                          "nothing when a session is given (the session decides where the job runs)")
    if spark is not None:
        unused = sorted(k for k in job.spark_conf if k not in ("spark.master", "spark.remote"))
        if unused:
            warn(f"spark.* keys are not applied to a session sparza did not build (set them where it is built): "
                 f"{', '.join(unused)}")
    target = spark_target(spark) if spark is not None else planned_target(config, master, remote)
    check_deployment(config, target)
    if job.app_class is not None and APP_STAGE.get(config) is None:
        from sparza.runtime.driver.application import run_application

        check_application(config)  # each planned stage is checked by run_application, before Spark
        return run_application(config, master=master, remote=remote, spark=spark, processor_id=processor_id,
                               once=once, stage=stage, drain=drain)
    check_job(config)  # before a SparkSession exists: one line naming the key, exit 2
    if job.coordinator_factory == "azure":
        from sparza.runtime.driver.coordinated import run_coordinated

        return run_coordinated(config, master=master, remote=remote, spark=spark, processor_id=processor_id,
                               once=once)
    return JobRunner(config, spark=spark, master=master, remote=remote, processor_id=processor_id, once=once,
                     drain=drain).run()


def run(config: Config | Mapping[str, Any] | str | os.PathLike[str], spark: Any = None, *,
        master: str | None = None, remote: str | None = None, once: bool = False, processor_id: str | None = None,
        stage: str | None = None, raise_on_error: bool = True, drain: bool = False) -> RunOutcome:
    """Run a job or application as ``sparza run`` does, and return its summary.

    ``config``: a path (YAML or ``.properties``), a mapping or a :class:`~sparza.config.Config`. ``spark``:
    a session the caller owns (classic or Spark Connect; a notebook's ``spark``, a ``spark-submit`` script's):
    the job runs on it and it is never stopped; without it sparza builds one from ``master``/``remote`` and
    the config's ``spark.*`` keys, and stops it at the end. Stops like ``sparza run``: SIGINT/SIGTERM (when
    called from the main thread), ``once``, ``drain`` (drained), every input ended, a task's shutdown.

    Returns a :class:`~sparza.runtime.RunOutcome` (``reason``, ``batches``, ``discards``, ``exit_code``).
    A failure raises (ConfigError/StartCheckError: exit code 2; JobFailedError: 1; ClaimError: 3), or, with
    ``raise_on_error=False``, comes back as an outcome with that exit code and the one-line ``error``.
    """
    try:
        if isinstance(config, Config):
            cfg = config
        elif isinstance(config, Mapping):
            cfg = Config(config)
        else:
            cfg = Config.load(config)
        pid = processor_id or PROCESSOR_ID.get(cfg)
        return run_config(cfg, master=master, remote=remote, spark=spark, processor_id=pid, once=once, stage=stage,
                          drain=drain)
    except Exception as exc:
        if raise_on_error:
            raise
        from sparza.coordination.jobclaim import ClaimError

        code = 3 if isinstance(exc, ClaimError) else 2 if isinstance(exc, ConfigError) else 1
        text = str(exc).strip()
        first = text.splitlines()[0] if text else ""
        return RunOutcome("failed", 0, code, error=f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
