"""sparza: Samza's stream-processing model in Python, its data pipeline run by Apache Spark.

``sparza.run(config, spark=spark)`` runs a job or application from Python (a notebook, a ``spark-submit``
script) on a session the caller owns; the ``sparza`` command does the same from a shell. Importing
``sparza`` stays cheap (executors import it): everything else lives in its subpackages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparza.config import Config
    from sparza.runtime.driver.report import RunOutcome

__version__ = "0.1.0"
__all__ = ["__version__", "run", "stop_containers"]


def run(config: Config | Mapping[str, Any] | str | os.PathLike[str], spark: Any = None, *,
        master: str | None = None, remote: str | None = None, once: bool = False, processor_id: str | None = None,
        stage: str | None = None, raise_on_error: bool = True) -> RunOutcome:
    """Run a job or application as ``sparza run`` does, on ``spark`` when given (never stopped here), and
    return its summary (:class:`sparza.runtime.RunOutcome`: reason, batches, discards, exit code).

    See :func:`sparza.runtime.driver.app.run` for every argument and how failures are reported.
    """
    from sparza.runtime.driver.app import run as run_job

    return run_job(config, spark, master=master, remote=remote, once=once, processor_id=processor_id, stage=stage,
                   raise_on_error=raise_on_error)


def stop_containers(spark: Any, timeout_s: float = 60.0) -> None:
    """Stop the containers sparza keeps running on ``spark`` for its next job, and wait for them (up to
    ``timeout_s``): call it before stopping a session you passed to :func:`run`, else Spark cuts their tasks off
    (their Python workers then log that they "crashed"; nothing committed is lost)."""
    from sparza.runtime.driver.containers import wait_for_containers

    wait_for_containers(spark, timeout_s)
