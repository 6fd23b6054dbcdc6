"""The stores of a job that is running (``sparza run`` in a subprocess), read while it runs: ``sparza store`` and
the ``sparza-state`` Spark data source (with Spark SQL) see its last committed counts, and the job, untouched,
goes on to count what comes next exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from examples.keyed_count.load import append_messages, create_streams
from tests.runtime.helpers import (
    REPO,
    expected_counts,
    final_counts,
    job_values,
    run_sparza,
    sparza_cmd,
    sparza_env,
    write_config,
)

from sparza.config import Config
from sparza.runtime import checkpoint_store_from_config
from sparza.testing import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _wait(what: str, ready: Any, proc: subprocess.Popen[str], timeout: float = 420) -> None:
    def done() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"sparza run exited {proc.returncode} before {what}: {proc.stderr.read()}")
        return bool(ready())

    eventually(done, timeout, 0.3, f"no {what} within {timeout}s")


def _committed_all(config: Config, messages: int) -> bool:
    """Every message counted in the output, and no task with a batch flushed but not committed."""
    if final_counts(config)[1] < messages:
        return False
    checkpoints = checkpoint_store_from_config(config, "kc-1").read_all()
    return len(checkpoints) == 2 and all(cp.committed and cp.open_intent() is None for cp in checkpoints.values())


def _store(*args: str) -> Any:
    result = run_sparza("store", *args, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_running_jobs_committed_counts_through_the_cli_and_spark_sql(work_dir: Path, spark: Any) -> None:
    from sparza.storeview.spark import register

    config = Config(job_values(work_dir, **{"task.max.batch.messages": "200", "task.commit.ms": "200"}))
    create_streams(config, 2)
    append_messages(config, 400, 7, commit_size=200)
    path = write_config(config, work_dir / "job.yaml")
    proc = subprocess.Popen(sparza_cmd("run", "--config", str(path), "--master", "local[2]"), cwd=REPO,
                            env=sparza_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait("400 messages committed", lambda: _committed_all(config, 400), proc)
        # The job runs (idle, polling); its stores as committed:
        lines = [json.loads(line) for line in _store("scan", "counts", "--config", str(path), "--json").splitlines()]
        totals: dict[str, int] = {}
        for row in lines:
            totals[row["key"]] = totals.get(row["key"], 0) + int(row["value"])
        assert totals == expected_counts(400, 7)
        assert json.loads(_store("count", "counts", "--config", str(path), "--json"))["total"] == len(lines)

        register(spark)
        state = (spark.read.format("sparza-state").option("config", str(path)).option("store", "counts")
                 .option("valueSchema", "bigint").load())
        assert [f.dataType.simpleString() for f in state.schema.fields] == ["string", "string", "bigint"]
        state.createOrReplaceTempView("kc_counts")
        rows = spark.sql("SELECT key, SUM(value) AS total, COUNT(DISTINCT task) AS tasks FROM kc_counts "
                         "GROUP BY key ORDER BY key").collect()
        assert {r["key"]: r["total"] for r in rows} == expected_counts(400, 7)
        assert all(r["tasks"] == 1 for r in rows)      # a key lives in one task (its partition)

        append_messages(config, 300, 7, start=400, commit_size=300)
        _wait("700 messages committed", lambda: _committed_all(config, 700), proc)
        assert proc.poll() is None
        pinned = state.groupBy("key").sum("value").collect()  # one DataFrame: the checkpoints it was loaded at
        assert {r["key"]: r["sum(value)"] for r in pinned} == expected_counts(400, 7)
        again = (spark.read.format("sparza-state").option("config", str(path)).option("store", "counts")
                 .option("valueSchema", "bigint").load().groupBy("key").sum("value").collect())
        assert {r["key"]: r["sum(value)"] for r in again} == expected_counts(700, 7)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    counts, rows_out = final_counts(config)
    assert counts == expected_counts(700, 7) and rows_out == 700   # the job counted everything exactly once
