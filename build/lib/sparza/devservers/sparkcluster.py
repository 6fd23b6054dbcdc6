"""A Spark standalone cluster on loopback for tests and benchmarks: one master and N workers started from the
installed pyspark (``spark-class``), the way separate hosts would run them.

Each worker is its own process group with its own work and local dirs and its own state dir, given to its
executors as ``SPARZA_EXECUTOR_STATE`` (a job points ``job.logged.store.base.dir`` at
``${SPARZA_EXECUTOR_STATE}``), so each executor keeps its task stores apart as a separate host would. A worker
can be stopped (SIGTERM: it says goodbye to the master), killed (SIGKILL of its whole process group: the
worker, its executors and their Python workers at once, as a lost host) and started again with the same dirs.
Every wait is bounded and names the log to read; :meth:`StandaloneCluster.stop` (or leaving the ``with``
block) ends every process it started, even after a failure.

Usage::

    with StandaloneCluster(tmp / "cluster", workers=2) as cluster:
        run("sparza", "run", "--master", cluster.url, ...)
        cluster.kill_worker(1)
        cluster.wait_workers(1)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from sparza.devservers.processes import LocalServerProcess
from sparza.devservers.spark import spark_env, spark_home
from sparza.errors import SparzaError
from sparza.host import free_port, pid_alive

__all__ = ["ClusterError", "SparkMaster", "SparkWorker", "StandaloneCluster"]

STATE_ENV = "SPARZA_EXECUTOR_STATE"
"""The variable that names a worker's state dir in its executors' environment."""


class ClusterError(SparzaError):
    """The standalone cluster did not reach the state asked for in time (the message names the logs)."""


def _spark_class() -> str:
    return str(spark_home() / "bin" / "spark-class")


@dataclass
class _SparkDaemon(LocalServerProcess):
    """What the master and a worker share: a dir, an environment, an RPC port and a web UI port."""

    PORT_FIELDS = ("port", "webui_port")

    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # the environment may hold secrets
    port: int = 0
    webui_port: int = 0

    def ports(self) -> tuple[int, ...]:
        """The RPC and web UI ports."""
        return (self.port, self.webui_port)


@dataclass
class SparkMaster(_SparkDaemon):
    """The standalone master on ``127.0.0.1:<port>``, its web UI (and JSON state) on ``<webui_port>``."""

    LOG_NAME = "master.log"
    PROGRAM = "the Spark standalone master"

    @property
    def url(self) -> str:
        """``spark://127.0.0.1:<port>``: what ``--master`` takes."""
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the master and wait until its JSON state answers."""
        self._spawn([_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.webui_port)],
                    env=self.env, cwd=self.data_dir)
        self._wait_until(self.state, self.url, timeout_s, poll_s=0.3)

    def state(self) -> dict[str, Any]:
        """The master's view (its ``/json/`` page): ``workers`` with their ``state``, ``activeapps``, ..."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as response:
            return dict(json.loads(response.read()))

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master counts as alive now."""
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]


@dataclass
class SparkWorker(_SparkDaemon):
    """One worker with ``cores`` cores and ``memory`` for executors, registered with ``master_url``.

    Its dirs are under ``data_dir``: ``work`` (``SPARK_WORKER_DIR``: executors' cwd and logs), ``local``
    (``SPARK_LOCAL_DIRS``) and ``state`` (``SPARZA_EXECUTOR_STATE``); they survive a stop, a kill and a
    start again, as a host's disk would.
    """

    LOG_NAME = "worker.log"
    PROGRAM = "a Spark standalone worker"

    master_url: str = ""
    cores: int = 1
    memory: str = "1g"

    @property
    def state_dir(self) -> Path:
        """The state dir its executors see as ``$SPARZA_EXECUTOR_STATE``."""
        return self.data_dir / "state"

    @property
    def work_dir(self) -> Path:
        """``SPARK_WORKER_DIR``: the executors' working dirs and their stdout/stderr logs."""
        return self.data_dir / "work"

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the worker and wait until its ports are open (registration: :meth:`StandaloneCluster.wait_workers`)."""
        for path in (self.state_dir, self.work_dir, self.data_dir / "local"):
            path.mkdir(parents=True, exist_ok=True)
        env = {**self.env, STATE_ENV: str(self.state_dir), "SPARK_WORKER_DIR": str(self.work_dir),
               "SPARK_LOCAL_DIRS": str(self.data_dir / "local")}
        self._spawn([_spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.webui_port), "--cores", str(self.cores),
                     "--memory", self.memory, self.master_url], env=env, cwd=self.data_dir)
        self._wait_until(lambda: None, f"127.0.0.1:{self.port}", timeout_s, poll_s=0.3)

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the worker's process group at once (the worker, its executors, their Python workers): a
        host lost, with no goodbye to the master or the driver. Its dirs stay."""
        pid = self.pid
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self._proc is not None:
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise ClusterError(f"{self.PROGRAM} (pid {pid}) did not die within {timeout_s:.0f}s of "
                                   "SIGKILL") from exc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _group_alive(pid):
            time.sleep(0.1)
        self.pid = None
        self._proc = None


def _group_alive(pgid: int) -> bool:
    """True while a live process of process group ``pgid`` remains."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) == pgid and pid_alive(int(entry)):
                return True
        except (ProcessLookupError, PermissionError):
            continue
    return False


class StandaloneCluster:
    """A master and ``workers`` workers on loopback under ``base_dir`` (see the module docstring).

    ``python`` is the executors' Python (default: this interpreter; :func:`~sparza.devservers.spark.executor_python`
    for one that does not see the project); ``env`` adds variables to every process's environment. Workers are
    numbered from 1 (``worker1`` ... under ``base_dir``).
    """

    def __init__(self, base_dir: str | os.PathLike[str], workers: int = 2, *, cores: int = 1, memory: str = "1g",
                 python: str | None = None, env: Mapping[str, str] | None = None) -> None:
        if workers < 1:
            raise ValueError("a cluster needs at least one worker")
        self.base_dir = Path(base_dir)
        self.env = {**spark_env(python), "SPARK_MASTER_HOST": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
                    **(env or {})}
        self.master = SparkMaster(self.base_dir / "master", env=self.env)
        self.workers = {i: SparkWorker(self.base_dir / f"worker{i}", env=self.env, master_url=self.master.url,
                                       cores=cores, memory=memory) for i in range(1, workers + 1)}

    @property
    def url(self) -> str:
        """The master URL for ``--master`` / ``spark.master``."""
        return self.master.url

    def state_dir(self, worker: int) -> Path:
        """Worker ``worker``'s state dir (``$SPARZA_EXECUTOR_STATE`` of its executors)."""
        return self.workers[worker].state_dir

    def start(self, timeout_s: float = 180.0) -> StandaloneCluster:
        """Start the master and every worker; wait until the master counts them all alive."""
        deadline = time.monotonic() + timeout_s
        try:
            self.master.start(timeout_s)
            for worker in self.workers.values():
                worker.start(max(deadline - time.monotonic(), 1.0))
            self.wait_workers(len(self.workers), max(deadline - time.monotonic(), 1.0))
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, worker: int, timeout_s: float = 120.0) -> None:
        """Start worker ``worker`` again (same dirs, new ports) and wait until it registered."""
        proc = self.workers[worker]
        if proc.is_running():
            return
        proc.port = free_port()
        proc.webui_port = free_port()
        alive = len(self.master.alive_workers())
        proc.start(timeout_s)
        self.wait_workers(alive + 1, timeout_s)

    def stop_worker(self, worker: int, timeout_s: float = 30.0) -> None:
        """Stop worker ``worker`` (SIGTERM, then SIGKILL): its executors end with it."""
        self.workers[worker].stop(timeout_s)

    def kill_worker(self, worker: int, timeout_s: float = 30.0) -> None:
        """SIGKILL worker ``worker`` with its executors and their Python workers (see :meth:`SparkWorker.kill`)."""
        self.workers[worker].kill(timeout_s)

    def running_workers(self) -> list[int]:
        """The numbers of the workers whose process runs."""
        return [i for i, w in self.workers.items() if w.is_running()]

    def wait_workers(self, count: int, timeout_s: float = 120.0) -> None:
        """Wait until the master counts exactly ``count`` alive workers (after a start, a stop or a kill)."""
        deadline = time.monotonic() + timeout_s
        seen: int | None = None
        while True:
            try:
                seen = len(self.master.alive_workers())
            except OSError:
                seen = None
            if seen == count:
                return
            if time.monotonic() >= deadline:
                logs = ", ".join(str(p.data_dir / p.LOG_NAME) for p in (self.master, *self.workers.values()))
                raise ClusterError(f"the Spark master counted {seen} alive worker(s), not {count}, after "
                                   f"{timeout_s:.0f}s; see {logs}")
            time.sleep(0.3)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every worker, then the master (each SIGTERM, then SIGKILL)."""
        for worker in self.workers.values():
            worker.stop(timeout_s)
        self.master.stop(timeout_s)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
