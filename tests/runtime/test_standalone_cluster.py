"""A job on a Spark standalone cluster started from the installed pyspark: one master, two workers
(one core each, loopback only), each executor with its own local state dir. Tasks run on both
executors; when a task lands on the other executor it restores from the blob store. Exact counts.

The executors do not have the project: their Python sees only the installed dependencies (no PYTHONPATH,
no editable install of sparza, working dirs outside the repo), so sparza and the task class reach them
only through ``job.py.files`` (``sparza package``). Their blob store and task checkpoints are on Azurite,
whose key they get only through the job's secrets file (not their environment); Spark's event log of the
run does not contain it. The Delta streams stay in a temp dir all processes of this host share
(``job.filesystem.shared: true``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import expected_counts, final_counts, run_sparza, sparza_env, write_config

from sparza.azure import AZURITE_ACCOUNT_KEY
from sparza.devservers.spark import executor_python

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise AssertionError(f"port {port} did not open")


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _start(args: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([_spark_class(), *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=cwd)


def test_packaged_job_on_a_standalone_cluster_whose_executors_lack_the_project(make_job, work_dir, sparza_package,
                                                                             azure_connection_string, unique_name):
    python = str(executor_python(work_dir / "executor-python"))
    base_env = {**{k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "AZURE_STORAGE_CONNECTION_STRING") and not k.startswith("SPARZA_")},
                "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1", "PYSPARK_PYTHON": python,
                "SPARK_NO_DAEMONIZE": "1"}
    # The executors' Python, in a worker's environment and dir, cannot import the project by itself.
    bare = subprocess.run([python, "-c", "import sparza"], env=base_env, cwd=work_dir, capture_output=True,
                          text=True, check=False)
    assert "No module named 'sparza'" in bare.stderr
    master_port = _free_port()
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                             str(master_port), "--webui-port", str(_free_port())], base_env, work_dir / "master.log",
                            work_dir / "master"))
        _wait_port(master_port)
        for i in (1, 2):
            state = work_dir / f"worker{i}-state"
            env = {**base_env, "SPARZA_EXECUTOR_STATE": str(state),
                   "SPARK_WORKER_DIR": str(work_dir / f"worker{i}-work"),
                   "SPARK_LOCAL_DIRS": str(work_dir / f"worker{i}-local")}
            procs.append(_start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                                 "--memory", "1g", "--webui-port", str(_free_port()),
                                 f"spark://127.0.0.1:{master_port}"], env, work_dir / f"worker{i}.log",
                                work_dir / f"worker{i}"))
        (work_dir / "events").mkdir()
        config = make_job(partitions=4, **{
            "job.logged.store.base.dir": "${SPARZA_EXECUTOR_STATE}",
            "job.spark.checkpoint.dir": str(work_dir / "spark-checkpoint"),
            "job.py.files": str(sparza_package),
            "job.filesystem.shared": "true",
            "blob.store.manager.factory": "azure",
            "blob.store.azure.container": unique_name,
            "azure.storage.connect": azure_connection_string,
            "task.max.batch.messages": "200",
            "spark.executor.memory": "512m",
            "spark.cores.max": "2",
            "spark.task.maxFailures": "2",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(work_dir / "events"),
            "spark.eventLog.compress": "false",
        })
        append_messages(config, 1200, 11, commit_size=400)
        path = write_config(config, work_dir / "job.yaml")
        # The driver names the executors' Python (PySpark ships PYSPARK_PYTHON with each function).
        env = {**{k: v for k, v in sparza_env().items() if k != "AZURE_STORAGE_CONNECTION_STRING"},
               "PYSPARK_PYTHON": python}
        result = run_sparza("run", "--config", str(path), "--once", "--master", f"spark://127.0.0.1:{master_port}",
                            env=env, timeout=420)
        assert result.returncode == 0, result.stderr[-3000:]
        counts, rows = final_counts(config)
        assert counts == expected_counts(1200, 11)
        assert rows == 1200
        events = "\n".join(p.read_text(errors="replace") for p in (work_dir / "events").rglob("*") if p.is_file())
        assert "Partition 1" in events and "sparza-secrets-" in events  # the batches and the secrets file are logged
        assert AZURITE_ACCOUNT_KEY not in events
        # Both executors ran tasks: each worker's state dir holds task stores.
        for i in (1, 2):
            stores = list((work_dir / f"worker{i}-state").glob("*/counts/Partition_*"))
            assert stores, f"no task ran on worker {i}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
