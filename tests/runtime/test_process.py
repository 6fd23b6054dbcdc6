"""`sparza run` as a subprocess: bad config, Ctrl-C to the process group, kill -9 mid-run and restart, injected
Spark task failure, a kill between Spark's offset log and the task commits (micro-batch mode)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import (
    REPO,
    counts_per_key,
    expected_counts,
    final_counts,
    run_sparza,
    sparza_cmd,
    sparza_env,
    write_config,
)

from sparza.runtime import checkpoint_store_from_config
from sparza.testing import eventually
from sparza.testing.faults import fault_keys

pytestmark = pytest.mark.slow


def test_bad_config_is_one_line_naming_the_key(make_job, work_dir):
    config = make_job(**{"task.max.batch.messages": "lots"})
    # COLUMNS: the CLI's error console wraps at the terminal width (80 when there is none).
    result = run_sparza("run", "--config", str(write_config(config, work_dir / "job.yaml")), timeout=60,
                        env={**sparza_env(), "COLUMNS": "300"})
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "task.max.batch.messages" in lines[0] and "'lots'" in lines[0]


def _wait_for_batch(config, at_least: int, proc: subprocess.Popen, timeout: float = 180) -> int:
    store = checkpoint_store_from_config(config, "kc-1")

    def reached() -> int | None:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
        batches = [cp.batch for cp in store.read_all().values()]
        return min(batches) if batches and min(batches) >= at_least else None

    return eventually(reached, timeout, 0.2, f"no batch {at_least} within {timeout}s")


def _start(config_path) -> subprocess.Popen:
    return subprocess.Popen(sparza_cmd("run", "--config", str(config_path), "--master", "local[2]"), cwd=REPO,
                            env=sparza_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _java_child(pid: int) -> int:
    """The pid of the JVM the driver ``pid`` started (its child running java)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"java" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]:
                return int(child)
    raise AssertionError(f"no java child of {pid}")


def test_ctrl_c_then_kill_9_then_restart_gives_exact_counts(make_job, work_dir):
    config = make_job(**{"task.max.batch.messages": "100"})
    append_messages(config, 3000, 9, commit_size=1000)
    path = write_config(config, work_dir / "job.yaml")

    # 1. Ctrl-C as a terminal sends it: SIGINT to the whole process group (the JVM and the Python workers
    # get it too). The running batch finishes and commits, then exit code 0, without a traceback.
    proc = _start(path)
    try:
        _wait_for_batch(config, 2, proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr
    assert "stopped by SIGINT" in stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    store = checkpoint_store_from_config(config, "kc-1")
    stopped_at = {t: cp.batch for t, cp in store.read_all().items()}

    # 2. kill -9 of the driver's process group (driver and JVM; the Python workers, in a group of their own, end
    # when their daemon sees the JVM gone) in the middle of the run. More input
    # first: containers run batches back to back, so step 1 may have caught up before its stop took effect.
    # Before that, a SIGTERM meant for the group reaches the JVM alone: it must not end Spark under the driver
    # (the driver decides when Spark stops), so the job goes on.
    append_messages(config, 3000, 9, start=3000, commit_size=1000)
    proc = _start(path)
    try:
        _wait_for_batch(config, max(stopped_at.values()) + 2, proc)
        jvm = _java_child(proc.pid)
        os.kill(jvm, signal.SIGTERM)
        time.sleep(3)  # the JVM's shutdown hooks, had it run them, end Spark within this
        status = Path(f"/proc/{jvm}/status")
        assert status.exists() and "State:\tZ" not in status.read_text(), "the JVM ended on SIGTERM"
        before = {t: cp.batch for t, cp in store.read_all().items()}
        append_messages(config, 300, 9, start=6000, commit_size=300)  # work that needs Spark, after the signal
        eventually(lambda: proc.poll() is None and all(cp.batch > before[t] for t, cp in store.read_all().items()),
                   120, 0.2, "no task committed a batch after the JVM's SIGTERM")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    # 3. Restart and catch up (bigger batches: the cap may change between runs): nothing lost or doubled.
    env = {**sparza_env(), "SPARZA_CONF_task__max__batch__messages": "100000"}
    result = run_sparza("run", "--config", str(path), "--once", "--master", "local[2]", env=env)
    assert result.returncode == 0, result.stderr
    counts, rows = final_counts(config)
    assert counts == expected_counts(6300, 9)
    assert rows == 6300


def test_injected_spark_task_failure_is_retried_exactly(make_job, work_dir):
    marker = work_dir / "failed-once"
    config = make_job(**{**fault_keys(marker), "task.max.batch.messages": "10000"})
    append_messages(config, 900, 5, commit_size=300)
    path = write_config(config, work_dir / "job.yaml")
    # local[2,2]: Spark retries a failed task once. The failure comes after the producers flushed.
    result = run_sparza("run", "--config", str(path), "--once", "--master", "local[2,2]")
    assert result.returncode == 0, result.stderr
    assert marker.exists()
    counts, rows = final_counts(config)
    assert counts == expected_counts(900, 5)
    assert rows == 900


def test_a_run_killed_between_sparks_offset_log_and_the_task_commits_restarts_from_the_task_checkpoints(
        make_job, work_dir):
    # The micro-batch mode on Structured Streaming: Spark logs batch 0, then its tasks run it. One task stops right
    # after its producers flushed (its intent open, its output visible), the other commits, and the run is killed
    # (-9). Spark's offset log then holds batch 0 without its commit, and replays it on restart; the source plans
    # that batch from the task checkpoints instead: the committed task reads on (what arrived since), the other
    # replays its intent's exact range. Nothing repeated, nothing lost, nothing skipped as a replay.
    from sparza.engine.jobconfig import JobConfig

    marker = work_dir / "hanging"
    config = make_job(**{"job.execution.mode": "batches", "task.max.batch.messages": "10000"})
    hanging = config.with_overrides({"task.commit.listeners": "tests.runtime.jobs.HangAfterFlush",
                                     "test.hang.marker": str(marker)})
    append_messages(config, 600, 5, commit_size=600)
    store = checkpoint_store_from_config(config, "kc-1")

    def half_committed() -> tuple[str, int] | None:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
        if not marker.exists() or not marker.read_text().strip():
            return None
        stopped = marker.read_text().strip()
        stored = store.read_all()
        intent = stored[stopped].open_intent() if stopped in stored else None
        others = [cp for name, cp in stored.items() if name != stopped]
        if intent is None or len(others) != 1 or others[0].batch != intent.batch:
            return None
        return stopped, intent.batch

    proc = _start(write_config(hanging, work_dir / "hanging.yaml"))
    try:
        stopped, batch = eventually(half_committed, 240, 0.2, "no half-committed batch within 240 s")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    spark_dir = JobConfig.from_config(config).spark_checkpoint_dir("0").removeprefix("file:")
    assert (Path(spark_dir) / "offsets" / "0").exists() and not (Path(spark_dir) / "commits" / "0").exists()
    intent = store.read_all()[stopped].open_intent()
    assert intent is not None
    assert final_counts(config)[1] == 600  # both tasks' outputs are visible, the stopped one's uncommitted

    append_messages(config, 400, 5, start=600, commit_size=400)
    result = run_sparza("run", "--config", str(write_config(config, work_dir / "job.yaml")), "--once",
                        "--master", "local[2]")
    assert result.returncode == 0, result.stderr
    assert "skipped (already committed: a replay)" not in result.stderr, result.stderr
    assert (Path(spark_dir) / "commits" / "0").exists()  # Spark ran its batch 0 again: planned anew
    after = store.read_all()
    assert all(cp.open_intent() is None for cp in after.values())
    assert after[stopped].batch >= batch
    assert counts_per_key(config) == {k: list(range(1, n + 1)) for k, n in expected_counts(1000, 5).items()}
