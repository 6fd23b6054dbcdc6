"""Helpers for tests of sparza and of jobs built on it: :class:`TestRunner` (run a job in-process, without
Spark, over in-memory streams; ``sparza.testing.runner``), a local SparkSession, fast coordination settings,
and the randomized fault harness.

Used by sparza's own pytest fixtures (``tests/conftest.py``) and usable from a user's tests. The
harness (``sparza.testing.harness``: scenario generator, fault injection, oracle) runs generated jobs
in-process through :class:`TestRunner` or through ``sparza run`` on Spark and checks their outputs exactly:
``python -m sparza.testing.harness [--engine inprocess] --seed N``. :func:`eventually` waits in a test for
what another process or thread will do, with a deadline and a message.
``sparza.devservers.spark`` starts a Spark Connect server from the installed pyspark and makes an
executor Python that does not see the project (deployment tests and ``bench/connect.py``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from sparza.testing.waiting import eventually

__all__ = [
    "FAST_AZURE_COORDINATION",
    "BatchReport",
    "OutputMessage",
    "RunReport",
    "TestInputError",
    "TestMessage",
    "TestRunner",
    "end_of_stream",
    "eventually",
    "local_spark_session",
    "watermark",
]

_RUNNER_NAMES = {"BatchReport", "OutputMessage", "RunReport", "TestInputError", "TestMessage", "TestRunner",
                 "end_of_stream", "watermark"}


def __getattr__(name: str) -> Any:
    # The runner pulls in the whole runtime: import it only when asked for (the harness and fixtures do not).
    if name in _RUNNER_NAMES:
        from sparza.testing import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'sparza.testing' has no attribute {name!r}")

FAST_AZURE_COORDINATION: dict[str, str] = {
    "job.coordinator.factory": "azure",
    "job.coordinator.azure.lease.duration.ms": "15000",
    "job.coordinator.azure.lease.renew.interval.ms": "3000",
    "job.coordinator.azure.heartbeat.interval.ms": "500",
    "job.coordinator.azure.liveness.timeout.ms": "3000",
    "job.coordinator.azure.liveness.check.interval.ms": "500",
    "job.coordinator.azure.leader.check.interval.ms": "500",
    "job.coordinator.azure.jobmodel.poll.interval.ms": "300",
    "job.coordinator.azure.barrier.timeout.ms": "10000",
    "job.coordinator.azure.request.timeout.ms": "3000",
}
"""Azure coordination with short periods, so tests see failures in seconds (the lease stays at Azure's
15 s minimum)."""


def local_spark_session(master: str = "local[2]", app_name: str = "sparza-test", **conf: str) -> Any:
    """A small, quiet SparkSession: UI off, 2 shuffle partitions, Arrow on, this Python on executors."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Loopback only: Spark otherwise binds to the first non-loopback interface it finds.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(__file__).parent.parent / "resources" / "log4j2.properties"
    java_opts = f"-Dlog4j.configurationFile=file:{log4j}"
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.streaming.stopTimeout", "60s")
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.executor.extraJavaOptions", java_opts))
    python: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if os.environ.get("PYSPARK_PYTHON") == sys.executable:  # workers import pyspark installed (sparza.sparkdaemon)
        from sparza.sparkdaemon import DAEMON_MODULE
        from sparza.sparkpython import local_python

        builder = builder.config("spark.python.daemon.module", DAEMON_MODULE)
        python = local_python()  # and so do the Python processes Spark starts without the daemon
    for key, value in conf.items():
        builder = builder.config(key, value)
    with python:
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
