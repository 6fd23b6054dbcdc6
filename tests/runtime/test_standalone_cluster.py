"""A job on a Spark standalone cluster started from the installed pyspark (:class:`StandaloneCluster`: one
master, three one-core workers on loopback, each executor with its own local state dir, as three hosts have; the
application takes two cores, so one worker is spare).

In the container mode, with steady input, every task stays on the executor that holds its state: its
checkpoint's ``location`` never changes and nothing is restored from the blob store. When one worker is killed
mid-run, each of its tasks moves to the survivor (one restore, a status line naming it), and the tasks of the
surviving executor never stop: their container is not restarted, so their stores are never closed and reopened (a
restarted container reopens them from its dir, which ``reused-local`` counts). Spark then gives the application an
executor on the spare worker (a replacement joining): a new container starts there and only the tasks over the
survivor's share move onto it, one by one. Every location change of a task is one move notice and one restore; the
output is exact (each key's counts are 1..n, against an oracle computed from the messages appended).

The executors do not have the project: their Python sees only the installed dependencies (no PYTHONPATH,
no editable install of sparza, working dirs outside the repo), so sparza and the task class reach them
only through ``job.py.files`` (``sparza package``). Their blob store and task checkpoints are on Azurite,
whose key they get only through the job's secrets file (not their environment); Spark's event log of the
run does not contain it. The Delta streams stay in a temp dir all processes of this host share
(``job.filesystem.shared: true``)."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from examples.keyed_count.load import SteadyInput, append_messages
from tests.runtime.helpers import (
    CheckpointWatch,
    counts_per_key,
    expected_counts,
    sparza_env,
    start_sparza,
    stop_sparza,
    write_config,
)

from sparza.azure import AZURITE_ACCOUNT_KEY
from sparza.config import Config
from sparza.devservers.spark import executor_python
from sparza.devservers.sparkcluster import StandaloneCluster
from sparza.host import free_port
from sparza.testing import eventually

pytestmark = pytest.mark.slow

KEYS = 23
TASKS = [f"Partition {i}" for i in range(4)]
PHASE_TIMEOUT_S = 300.0


class Watch(CheckpointWatch):
    """What the running job shows through its public surfaces: its task checkpoints sampled in a thread (each
    task's batch and location, what ``sparza checkpoints show`` prints; :attr:`error`, the last failed sample's, is
    shown when a wait times out), and the notices of its status lines."""

    def __init__(self, config: Config, log: Path) -> None:
        super().__init__(config, lambda cp: {"batch": cp.batch, "location": cp.location}, stop_timeout_s=150)
        self.log = log

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines() if self.log.exists() else []

    def moves(self) -> list[str]:
        return [line for line in self.lines() if " moves from " in line]


def _wait(what: str, condition: Callable[[], bool], proc: subprocess.Popen[Any], watch: Watch) -> None:
    def holds() -> bool:
        if condition():
            return True
        if proc.poll() is not None:
            raise AssertionError(f"sparza run exited ({proc.returncode}) while waiting for {what}:\n"
                                 + "\n".join(watch.lines()[-40:]))
        return False

    eventually(holds, PHASE_TIMEOUT_S, 0.5,
               lambda: f"no {what} within {PHASE_TIMEOUT_S:.0f}s; checkpoints {watch.latest()} "
               f"(last read error: {watch.error!r}):\n"
               + "\n".join(watch.lines()[-40:]))


def _worker_of(location: str | None, cluster: StandaloneCluster) -> int | None:
    """The worker whose state dir a checkpoint's ``location`` (``host:dir#id``) names."""
    for i, worker in cluster.workers.items():
        if location and f":{worker.state_dir}#" in location:
            return i
    return None


def _changes(values: list[str | None]) -> list[str]:
    """The distinct values in order of change (``a a b b a`` → ``a b a``), Nones left out."""
    out: list[str] = []
    for value in values:
        if value is not None and (not out or out[-1] != value):
            out.append(value)
    return out


def _last_metrics(path: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert lines, "no metrics were reported"
    return dict(lines[-1]["metrics"])


def test_tasks_stay_on_their_executors_move_when_a_worker_is_killed_and_rebalance_onto_a_replacement(
        make_job, work_dir, sparza_package, azure_connection_string, unique_name):
    python = str(executor_python(work_dir / "executor-python"))
    cluster = StandaloneCluster(work_dir / "cluster", workers=3, python=python)
    # The executors' Python, in a worker's environment and dir, cannot import the project by itself.
    bare = subprocess.run([python, "-c", "import sparza"], env=cluster.env, cwd=work_dir, capture_output=True,
                          text=True, check=False)
    assert "No module named 'sparza'" in bare.stderr
    (work_dir / "events").mkdir()
    config = make_job(partitions=len(TASKS), **{
        "job.logged.store.base.dir": "${SPARZA_EXECUTOR_STATE}",
        "job.spark.checkpoint.dir": str(work_dir / "spark-checkpoint"),
        "job.py.files": str(sparza_package),
        "job.filesystem.shared": "true",
        "job.execution.mode": "containers",
        "blob.store.manager.factory": "azure",
        "blob.store.azure.container": unique_name,
        "azure.storage.connect": azure_connection_string,
        "task.max.batch.messages": "200",
        "metrics.reporter.jsonl.path": str(work_dir / "metrics.jsonl"),
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.task.maxFailures": "2",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(work_dir / "events"),
        "spark.eventLog.compress": "false",
    })
    append_messages(config, 400, KEYS, commit_size=400)
    path = write_config(config, work_dir / "job.yaml")
    log = work_dir / "run.log"
    # The driver names the executors' Python (PySpark ships PYSPARK_PYTHON with each function).
    env = {**{k: v for k, v in sparza_env().items() if k != "AZURE_STORAGE_CONNECTION_STRING"},
           "PYSPARK_PYTHON": python}
    feeder = SteadyInput(config, KEYS, 40, start=400)
    watch = Watch(config, log)
    proc: subprocess.Popen[bytes] | None = None
    with cluster:
        try:
            proc = start_sparza("run", "--config", str(path), "--master", cluster.url, log=log, env=env, cwd=work_dir)
            feeder.start()
            watch.start()

            # 1. Steady input: every task commits >= 8 times where it started.
            _wait("8 commits per task", lambda: len(watch.latest()) == len(TASKS)
                  and min((cp["batch"] or 0) for cp in watch.latest().values()) >= 8, proc, watch)
            before = list(watch.samples)
            first = {t: before[-1][t]["location"] for t in TASKS}
            for sample in before:
                for task, cp in sample.items():
                    assert cp["location"] in (None, first[task]), f"{task} moved without cause: {before}"
            placed = {t: _worker_of(loc, cluster) for t, loc in first.items()}
            used = set(placed.values())
            assert len(used) == 2 and None not in used, f"tasks not on two executors: {first}"
            assert watch.moves() == [], watch.moves()
            steady = _last_metrics(work_dir / "metrics.jsonl")
            assert steady["aggregate"]["stores-restored-from-blob-store"] == 0, steady["aggregate"]

            # 2. One worker (host) lost: its tasks move to the survivor; then the spare worker gets an executor, a
            # container starts there and the tasks over the survivor's share move onto it.
            victim = max(w for w in used if w is not None)
            survivor = min(w for w in used if w is not None)
            spare = ({1, 2, 3} - used).pop()
            cluster.kill_worker(victim)
            killed_at = {t: before[-1][t]["batch"] for t in TASKS}
            _wait("every task committing on the survivor and the replacement", lambda: all(
                _worker_of(cp["location"], cluster) in (survivor, spare) and (cp["batch"] or 0) >= killed_at[t] + 5
                for t, cp in watch.latest().items())
                  and {_worker_of(cp["location"], cluster) for cp in watch.latest().values()} == {survivor, spare},
                  proc, watch)
            total = feeder.stop()
            assert feeder.error is None, feeder.error
            _wait("all messages counted", lambda: sum(len(c) for c in counts_per_key(config).values()) >= total,
                  proc, watch)
            proc.send_signal(signal.SIGTERM)  # Ctrl-C (SIGINT) reaches PySpark's own handler first
            assert proc.wait(timeout=180) == 0, "\n".join(watch.lines()[-40:])
        finally:
            feeder.stop()
            watch.stop()
            stop_sparza(proc)

    lines = watch.moves()
    metrics = _last_metrics(work_dir / "metrics.jsonl")
    stayed = []
    for task in TASKS:  # where each task's checkpoints say it committed, in order of change
        seen = _changes([sample[task]["location"] for sample in watch.samples if task in sample])
        workers = [_worker_of(loc, cluster) for loc in seen]
        assert seen[0] == first[task] and victim not in workers[1:] and len(set(seen)) == len(seen), (task, seen)
        if placed[task] == victim:
            assert workers[1] == survivor or workers[1:] == [spare], (task, workers)   # never back to the lost one
        named = [line for line in lines if f"task {task} moves from " in line]
        stores = metrics.get(f"{task}:stores", {})
        # One move notice and one restore for every place a task went to after its first.
        assert len(named) == len(seen) - 1, (task, seen, lines)
        assert stores.get("restored-from-blob-store", 0) == len(seen) - 1, (task, seen, stores)
        if len(seen) == 1:
            stayed.append(task)
            # The surviving executor's tasks that stayed never stopped: their stores stayed open all along (a
            # restarted container, as a restarted epoch was, would have reopened them from their dir).
            assert stores.get("reused-local", 0) == 0, (task, stores)
    assert stayed, "no task stayed where it was: the survivor's tasks were moved too"
    lost = [line for line in lines if "executor is gone" in line]
    rebalanced = [line for line in lines if "rebalanced onto a new container" in line]
    assert len(lost) == sum(1 for t in TASKS if placed[t] == victim) and rebalanced, lines
    assert len(lost) + len(rebalanced) == len(lines), lines
    assert metrics["aggregate"]["tasks-moved"] == len(lines)

    # Exactly once: each key's counts are 1..n for the n messages appended with that key.
    expected = expected_counts(total, KEYS)
    assert counts_per_key(config) == {key: list(range(1, n + 1)) for key, n in expected.items()}
    events = "\n".join(p.read_text(errors="replace") for p in (work_dir / "events").rglob("*") if p.is_file())
    assert "sparza-container-" in events and "sparza-secrets-" in events  # the containers and the secrets file
    assert AZURITE_ACCOUNT_KEY not in events
    # Every worker ran tasks: each worker's state dir holds task stores.
    for i in (1, 2, 3):
        assert list(cluster.state_dir(i).glob("*/counts/Partition_*")), f"no task ran on worker {i}"


def test_tasks_left_without_any_executor_are_named_by_the_stall_watchdog_and_resume_on_a_fresh_worker(
        make_job, work_dir, sparza_package):
    """Issue 40, item 3: the only worker of the application is SIGKILLed (with its executor and Python workers)
    while input keeps arriving: no container can start, so no container runs the tasks. The run neither fails at
    once nor waits in silence: the stall watchdog's status line names the tasks and says no container runs them
    (at half of job.stall.timeout.ms). Then a fresh worker (its own empty state dir) joins: a container starts
    there, the tasks restore from the blob store and commit again, and the output is exact."""
    python = str(executor_python(work_dir / "executor-python"))
    cluster = StandaloneCluster(work_dir / "cluster", workers=2, python=python)
    config = make_job(partitions=2, **{
        "job.logged.store.base.dir": "${SPARZA_EXECUTOR_STATE}",
        "job.spark.checkpoint.dir": str(work_dir / "spark-checkpoint"),
        "job.py.files": str(sparza_package),
        "job.filesystem.shared": "true",   # the local blob store and the Delta streams: one dir all workers see
        "job.execution.mode": "containers",
        "job.stall.timeout.ms": "60000",
        "task.max.batch.messages": "200",
        "task.commit.ms": "300",
        "metrics.reporter.jsonl.path": str(work_dir / "metrics.jsonl"),
        "spark.executor.memory": "512m",
        "spark.task.maxFailures": "2",
    })
    append_messages(config, 200, KEYS, commit_size=200)
    path = write_config(config, work_dir / "job.yaml")
    log = work_dir / "run.log"
    env = {**sparza_env(), "PYSPARK_PYTHON": python}
    feeder = SteadyInput(config, KEYS, 10, start=200)
    watch = Watch(config, log)
    proc: subprocess.Popen[bytes] | None = None
    with cluster:
        cluster.stop_worker(2)   # the fresh worker of later: never ran anything, its state dir is empty
        cluster.wait_workers(1)
        try:
            proc = start_sparza("run", "--config", str(path), "--master", cluster.url, log=log, env=env, cwd=work_dir)
            feeder.start()
            watch.start()
            _wait("3 commits per task", lambda: len(watch.latest()) == 2
                  and min((cp["batch"] or 0) for cp in watch.latest().values()) >= 3, proc, watch)
            cluster.kill_worker(1)
            _wait("the stall warning naming the tasks no container runs", lambda: any(
                "warning: " in line and "no container runs" in line and "'Partition 0'" in line
                and "'Partition 1'" in line for line in watch.lines()), proc, watch)
            at_warning = {t: cp["batch"] or 0 for t, cp in watch.latest().items()}
            worker = cluster.workers[2]   # started by hand: the master may count the killed worker alive a while
            worker.port, worker.webui_port = free_port(), free_port()
            worker.start()
            _wait("every task committing on the fresh worker", lambda: all(
                _worker_of(cp["location"], cluster) == 2 and (cp["batch"] or 0) >= at_warning[t] + 3
                for t, cp in watch.latest().items()), proc, watch)
            total = feeder.stop()
            assert feeder.error is None, feeder.error
            _wait("all messages counted", lambda: sum(len(c) for c in counts_per_key(config).values()) >= total,
                  proc, watch)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=180) == 0, "\n".join(watch.lines()[-40:])
        finally:
            feeder.stop()
            watch.stop()
            stop_sparza(proc)
    metrics = _last_metrics(work_dir / "metrics.jsonl")
    assert metrics["job"]["stall-warnings"] >= 1 and metrics["job"].get("stalls", 0) == 0, metrics["job"]
    assert metrics["aggregate"]["stores-restored-from-blob-store"] >= 2  # both tasks, on the fresh worker's dir
    expected = expected_counts(total, KEYS)
    assert counts_per_key(config) == {key: list(range(1, n + 1)) for key, n in expected.items()}
