"""Running where Spark already runs: ``sparza.run`` on a session the caller owns, the start checks that refuse
local paths on a cluster or Spark Connect, and ``sparza package``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import REPO, expected_counts, final_counts, run_sparza, write_config

import sparza
from sparza.config import Config
from sparza.devservers.spark import executor_python
from sparza.errors import StartCheckError
from sparza.runtime.driver.packaging import build_package, job_modules
from sparza.runtime.driver.preflight import check_deployment
from sparza.runtime.driver.session import SparkTarget, planned_target

CLUSTER = SparkTarget("spark://spark-master:7077", local=False)
CONNECT = SparkTarget("Spark Connect sc://h:15002", local=False, connect=True)


@pytest.mark.spark
def test_run_on_a_session_the_caller_owns_returns_the_summary_and_leaves_it_running(spark, make_job):
    config = make_job()
    append_messages(config, 700, 7, commit_size=350)
    outcome = sparza.run(config, spark=spark, once=True)
    # The containers stay up a moment for a next job; stop_containers ends them before the caller stops the session.
    sparza.stop_containers(spark)
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()
    assert (outcome.reason, outcome.exit_code, outcome.error) == ("caught up (--once)", 0, None)
    assert outcome.batches >= 2 and not outcome.discards
    counts, rows = final_counts(config)
    assert counts == expected_counts(700, 7)
    assert rows == 700
    assert spark.range(5).count() == 5  # not stopped: the session is the caller's


def test_run_reports_a_failure_as_an_outcome_when_asked(work_dir):
    outcome = sparza.run({"job.name": "x", "task.class": "nowhere.Task", "task.inputs": "delta.events",
                          "systems.delta.samza.factory": "delta", "systems.delta.delta.root": str(work_dir)},
                         raise_on_error=False)
    assert (outcome.exit_code, outcome.batches) == (2, 0)
    assert "task.class" in outcome.error and "nowhere" in outcome.error
    with pytest.raises(StartCheckError):
        sparza.run({"job.name": "x", "task.class": "nowhere.Task", "task.inputs": "delta.events",
                    "systems.delta.samza.factory": "delta", "systems.delta.delta.root": str(work_dir)})


def _keyed_count(root: Path, **overrides: str) -> Config:
    from examples.keyed_count.config import job_values

    return Config(job_values(root, **overrides))


@pytest.mark.parametrize("target", [CLUSTER, CONNECT], ids=["cluster", "connect"])
def test_local_paths_executors_would_not_share_are_refused_with_the_key_and_the_fix(target, work_dir, monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    config = _keyed_count(work_dir)
    with pytest.raises(StartCheckError, match=r"'blob.store.local.root' = .* is a local path, but the job runs on "
                                              r".*: use blob.store.manager.factory: azure .* job.filesystem.shared"):
        check_deployment(config, target)
    azure_blobs = {"blob.store.manager.factory": "azure", "blob.store.azure.container": "state",
                   "azure.storage.connect": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=a2V5"}
    with pytest.raises(StartCheckError, match=r"'systems.delta.delta.root' = .*: put the streams on Azure"):
        check_deployment(config.with_overrides(azure_blobs), target)
    on_azure = config.with_overrides({**azure_blobs, "systems.delta.delta.root": "az://streams/kc"})
    check_deployment(on_azure, target)  # nothing local left
    with pytest.raises(StartCheckError, match="'job.checkpoint.local.dir'"):
        check_deployment(on_azure.with_overrides({"job.checkpoint.factory": "local",
                                                  "job.checkpoint.local.dir": "/data/cp"}), target)
    with pytest.raises(StartCheckError, match="'stores.counts.msg.schema' .* JSON text"):
        check_deployment(on_azure.with_overrides({"stores.counts.msg.schema": "schemas/count.avsc"}), target)
    without_account = {k: v for k, v in on_azure.items() if k != "azure.storage.connect"}
    with pytest.raises(StartCheckError, match="'azure.storage.connect' is missing: on .* dev storage"):
        check_deployment(Config(without_account), target)


def test_the_shared_file_system_opt_out_takes_absolute_paths_only(work_dir):
    config = _keyed_count(work_dir, **{"job.filesystem.shared": "true"})
    check_deployment(config, CLUSTER)
    with pytest.raises(StartCheckError, match="'blob.store.local.root' = '.sparza/blobs' is relative"):
        check_deployment(config.with_overrides({"blob.store.local.root": ".sparza/blobs"}), CLUSTER)


def test_local_targets_take_local_paths_and_py_files_must_exist(work_dir):
    config = _keyed_count(work_dir)
    check_deployment(config, planned_target(config, "local[2]"))
    assert planned_target(config, "spark://h:7077") == SparkTarget("spark://h:7077", local=False)
    assert planned_target(config.with_overrides({"spark.remote": "sc://h:1"})).connect
    with pytest.raises(StartCheckError, match="'job.py.files': .*missing.zip' does not exist: build it with"):
        check_deployment(config.with_overrides({"job.py.files": str(work_dir / "missing.zip")}), CLUSTER)


def test_sparza_run_on_a_cluster_master_with_a_local_blob_store_exits_2_before_spark(make_job, work_dir):
    path = write_config(make_job(), work_dir / "job.yaml")
    result = run_sparza("run", "--config", str(path), "--master", "spark://127.0.0.1:1", timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("start check failed: config key 'blob.store.local.root'"), result.stderr
    assert "spark://127.0.0.1:1" in lines[-1]


def test_package_holds_sparza_and_the_jobs_modules_and_imports_without_the_project(work_dir):
    config = _keyed_count(work_dir)
    assert job_modules(config) == ["examples"]
    built = build_package(work_dir / "dist" / "job.zip", job_modules(config))
    names = set(zipfile.ZipFile(built.path).namelist())
    assert {"sparza/__init__.py", "sparza/engine/executor.py", "examples/keyed_count/task.py",
            "examples/"} <= names
    assert not any("__pycache__" in n for n in names)
    assert "pyarrow" in built.requirements.read_text()
    python = str(executor_python(work_dir / "py"))
    probe = ("import examples.keyed_count.task, sparza.engine.executor; "
             "print(sparza.engine.executor.__file__)")
    env = {"PATH": "/usr/bin:/bin"}
    without = subprocess.run([python, "-c", probe], cwd=work_dir, env=env, capture_output=True, text=True, check=False)
    assert without.returncode != 0 and "No module named" in without.stderr  # the executor Python has no project
    with_zip = subprocess.run([python, "-c", probe], cwd=work_dir, env={**env, "PYTHONPATH": str(built.path)},
                              capture_output=True, text=True, check=False)
    assert with_zip.returncode == 0, with_zip.stderr
    assert with_zip.stdout.strip().startswith(str(built.path))
    again = build_package(work_dir / "dist" / "again.zip", ["examples"])
    assert again.path.read_bytes() == built.path.read_bytes()  # reproducible: same sources, same zip


def test_package_built_while_a_packaged_zip_is_on_sys_path_still_holds_the_sources(work_dir, monkeypatch):
    # SparkContext.addPyFile puts the zip on the driver's sys.path too: the namespace package `examples` then
    # also lists the zip, and a package built next (the suite's second) came out without the job's modules.
    built = build_package(work_dir / "dist" / "job.zip", ["examples"])
    monkeypatch.syspath_prepend(str(built.path))
    importlib.invalidate_caches()
    again = build_package(work_dir / "dist" / "again.zip", ["examples"])
    assert "examples/keyed_count/task.py" in set(zipfile.ZipFile(again.path).namelist())


def test_sparza_package_command_writes_the_zip(make_job, work_dir):
    path = write_config(make_job(), work_dir / "job.yaml")
    result = run_sparza("package", "--config", str(path), "--output", str(work_dir / "out.zip"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "examples" in result.stdout and (work_dir / "out.zip").exists()
    assert (work_dir / "out.requirements.txt").exists()


@pytest.mark.slow
def test_the_spark_submit_example_runs_a_packaged_job_on_the_session_spark_submit_built(make_job, work_dir,
                                                                                      sparza_package):
    from sparza.devservers.spark import spark_home

    config = make_job()
    append_messages(config, 500, 7, commit_size=250)
    path = write_config(config, work_dir / "job.yaml")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": "127.0.0.1"})
    result = subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--master", "local[2]",
                             "--conf", "spark.ui.enabled=false", "--py-files", str(sparza_package),
                             str(REPO / "examples" / "spark_submit" / "run_job.py"), str(path), "--once"],
                            cwd=work_dir, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sparza: caught up (--once);" in result.stdout  # spark-submit merges the script's stderr into stdout
    counts, rows = final_counts(config)
    assert counts == expected_counts(500, 7)
    assert rows == 500


def test_an_unreachable_connect_server_or_a_master_with_remote_is_one_line_in_seconds(make_job, work_dir):
    from sparza.host import free_port

    path = write_config(make_job(**{"job.filesystem.shared": "true"}), work_dir / "job.yaml")
    url = f"sc://127.0.0.1:{free_port()}"
    result = run_sparza("run", "--config", str(path), "--remote", url, "--once", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"config error: Spark Connect URL '{url}' (--remote / spark.remote): cannot connect to "
        f"{url.removeprefix('sc://')} (Connection refused): check the URL and that the Spark Connect server runs")
    both = run_sparza("run", "--config", str(path), "--remote", url, "--master", "local[2]", "--once", timeout=120)
    assert both.returncode == 2
    assert "--master and spark.remote" in both.stderr.strip().splitlines()[-1]
