"""The standalone cluster helper's set-up, without starting Spark (the cluster itself runs in
tests/runtime/test_standalone_cluster.py): what its processes inherit and where each worker keeps its state."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparza.devservers.sparkcluster import StandaloneCluster


def test_workers_get_their_own_dirs_and_no_project_or_secret_from_this_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountKey=secret-key")
    monkeypatch.setenv("PYTHONPATH", "/the/project")
    monkeypatch.setenv("SPARZA_EXECUTOR_STATE", "/the/driver/state")
    cluster = StandaloneCluster(tmp_path / "c", workers=3, python="/bin/py")
    assert "AZURE_STORAGE_CONNECTION_STRING" not in cluster.env and "PYTHONPATH" not in cluster.env
    assert "SPARZA_EXECUTOR_STATE" not in cluster.env  # each worker sets its own
    assert cluster.env["PYSPARK_PYTHON"] == "/bin/py" and cluster.env["SPARK_LOCAL_IP"] == "127.0.0.1"
    states = [cluster.state_dir(i) for i in (1, 2, 3)]
    assert len(set(states)) == 3 and all(s.is_relative_to(tmp_path / "c") for s in states)
    ports = [p for w in cluster.workers.values() for p in w.ports()] + list(cluster.master.ports())
    assert len(set(ports)) == len(ports)
    assert cluster.url == f"spark://127.0.0.1:{cluster.master.port}"
    assert all(w.master_url == cluster.url for w in cluster.workers.values())
    monkeypatch.setenv("SOME_TOKEN", "hidden-value")
    shown = repr(StandaloneCluster(tmp_path / "d", workers=1).workers[1])
    assert "hidden-value" not in shown and "secret-key" not in shown  # a repr in a log or error shows no environment


def test_a_cluster_needs_a_worker(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        StandaloneCluster(tmp_path, workers=0)
