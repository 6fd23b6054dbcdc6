"""Spark servers for tests and benchmarks, started from the installed pyspark on loopback: a Spark Connect
server (:class:`SparkConnectServer`) and an executor Python that does not see the project
(:func:`executor_python`), so a test proves that code reaches executors only through what the job ships.
"""

from __future__ import annotations

import os
import shlex
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparza.devservers.processes import LocalServerProcess

__all__ = ["SparkConnectServer", "executor_python", "spark_env", "spark_home"]


def spark_home() -> Path:
    """The installed pyspark's Spark home (``bin/spark-submit``, ``jars/`` with the Connect server)."""
    import pyspark

    return Path(pyspark.__file__).parent


def executor_python(directory: str | os.PathLike[str]) -> Path:
    """A script that runs this interpreter the way an executor host with only the dependencies installed
    would: ``-S`` (no ``site``, so no ``.pth`` file adds an editable install of the project) with the
    site-packages dirs on ``PYTHONPATH``, after whatever Spark puts there. Use it as ``PYSPARK_PYTHON``."""
    paths = sysconfig.get_paths()
    site = os.pathsep.join(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    script = Path(directory) / "executor-python"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/bin/sh\n"
                      f"export PYTHONPATH=\"${{PYTHONPATH:+$PYTHONPATH{os.pathsep}}}{site}\"\n"
                      f"exec {shlex.quote(sys.executable)} -S \"$@\"\n", encoding="utf-8")
    script.chmod(0o755)
    return script


def spark_env(python: str | None) -> dict[str, str]:
    """This process's environment without what would leak the project or its secrets into a Spark server it
    starts (``PYTHONPATH``, the Azure connection string, sparza's config and executor state variables), bound
    to loopback, with ``python`` (default: this interpreter) as the executors' Python."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AZURE_STORAGE_CONNECTION_STRING", "SPARK_REMOTE", "PYSPARK_SUBMIT_ARGS",
                        "SPARZA_EXECUTOR_STATE")
           and not k.startswith("SPARZA_CONF_")}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python or sys.executable})
    return env


@dataclass
class SparkConnectServer(LocalServerProcess):
    """One Spark Connect server (``SparkConnectServer`` of the installed pyspark, ``spark-internal``) on a
    loopback port with its own work dir (its cwd: executors' relative paths land there), ``master`` for its
    executors, ``python`` for their Python workers, extra ``conf``, and an event log under
    ``<data_dir>/events`` when ``event_log`` is set."""

    LOG_NAME = "connect-server.log"
    PROGRAM = "the Spark Connect server"
    PORT_FIELDS = ("port",)

    port: int = 0
    master: str = "local[2,4]"
    python: str | None = None
    event_log: bool = False
    conf: Mapping[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>``."""
        return f"sc://127.0.0.1:{self.port}"

    @property
    def event_log_dir(self) -> Path:
        """Where the server's event log goes (with ``event_log``)."""
        return self.data_dir / "events"

    def ports(self) -> tuple[int, ...]:
        """The gRPC port."""
        return (self.port,)

    def start(self, timeout_s: float = 180.0) -> None:
        """Start the server and wait until a Connect session can be opened."""
        conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(self.port),
                "spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.execution.arrow.pyspark.enabled": "true", "spark.log.level": "WARN",
                "spark.local.dir": str(self.data_dir / "local")}
        if self.event_log:
            self.event_log_dir.mkdir(parents=True, exist_ok=True)
            conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(self.event_log_dir),
                         "spark.eventLog.compress": "false"})  # plain JSON lines: tests read them
        conf.update(self.conf)
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class",
               "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", self.master,
               "--name", "sparza-test-connect"]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd.append("spark-internal")
        self._spawn(cmd, env=spark_env(self.python), cwd=self.data_dir)  # executors' cwd: not the project
        # The gRPC port opens as the server's last start step.
        self._wait_until(lambda: None, self.url, timeout_s, poll_s=0.3)
