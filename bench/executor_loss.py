"""One of three workers of a standalone cluster killed: do the tasks on the other workers keep going, and how soon do
the lost worker's tasks commit again? Three shapes of the container mode, measured in one run:

- ``jobs``: every container is a single-task Spark job (sparza's default now);
- ``stage``: all containers are one (non-barrier) Spark stage, Spark retrying a lost one
  (``job.container.launch: stage``);
- ``barrier``: the shape before (epochs of one barrier stage; the tree at ``--baseline-tree``, sparza as it was
  at commit 1c0592d), the same-run baseline.

Each round starts a fresh cluster (:class:`~sparza.devservers.sparkcluster.StandaloneCluster`: a master and three
one-core workers on loopback, each with its own state dir, as three hosts), runs the keyed count (6 tasks, RocksDB
backed up to Azurite, Delta streams in and out, ``task.commit.ms: 200``) with input arriving every 0.25 s, waits
until every task committed 10 times, SIGKILLs one worker (with its executor and Python workers), waits until every
task committed 10 more times, then drains the input and stops the job, and checks the output exactly (each key's
counts are 1..n). What it reports, from the output stream's own Delta log (every commit carries its time and the
task that wrote it):

- **survivors' longest gap**: the longest time between two output commits of a task whose worker lived, over the
  30 s after the kill (its steady gap, before the kill, is printed beside it);
- **moved tasks back**: seconds from the kill to the first output commit of each task of the killed worker at its
  new place (the loss is detected within a second here: the killed executor's sockets close).

Usage: ``python bench/executor_loss.py [--rounds N] [--shapes jobs,stage,barrier] [--baseline-tree DIR]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _report  # noqa: E402
from _trees import build_package, executor_python, python_of  # noqa: E402

from sparza.config import Config  # noqa: E402
from sparza.devservers.sparkcluster import StandaloneCluster  # noqa: E402
from sparza.devservers.storage import AzuriteProcess  # noqa: E402

TASKS = 6
KEYS = 29
MEASURES = ("One of three one-core workers of a standalone cluster killed under steady input (6 tasks, RocksDB "
            "backed up to Azurite): the longest output gap of the tasks whose worker lived, and how soon the lost "
            "worker's tasks commit again, for each shape of the container mode (single-task Spark jobs per "
            "container, one non-barrier stage of containers, and the barrier-stage epochs of before as the baseline).")
GOALS = "survivors: no gap > 1 s in their output; moved tasks commit again <= 10 s after the loss"


def _config(root: Path, storage: AzuriteProcess, name: str, package: Path, shape: str) -> Config:
    from examples.keyed_count.config import job_values
    from examples.keyed_count.load import create_streams

    values = job_values(root, **{
        "job.name": name, "task.max.batch.messages": "200", "task.commit.ms": "200",
        "job.logged.store.base.dir": "${SPARZA_EXECUTOR_STATE}",
        "job.spark.checkpoint.dir": str(root / "spark-checkpoint"),
        "job.py.files": str(package), "job.filesystem.shared": "true",
        "job.execution.mode": "containers",
        "blob.store.manager.factory": "azure", "blob.store.azure.container": name,
        "azure.storage.connect": storage.connection_string,
        "metrics.reporter.jsonl.path": str(root / "metrics.jsonl"),
        "spark.executor.memory": "512m", "spark.cores.max": "3", "spark.task.maxFailures": "4",
    })
    if shape == "barrier":
        values["job.container.epoch.ms"] = "300000"
    else:
        values["job.container.launch"] = shape
    config = Config(values)
    create_streams(config, TASKS)
    return config


def _commits(config: Config) -> list[tuple[float, str]]:
    """``(seconds since the epoch, task)`` of every commit of the output stream, from its Delta log."""
    log = Path(config["systems.delta.delta.root"]) / "counts" / "_delta_log"
    out = []
    for path in sorted(log.glob("*.json")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            info = entry.get("commitInfo")
            if info and info.get("sparza.producer"):
                out.append((info["timestamp"] / 1000.0, str(info["sparza.producer"])))
            elif info and isinstance(info.get("userMetadata"), str) and "sparza.producer" in info["userMetadata"]:
                out.append((info["timestamp"] / 1000.0, json.loads(info["userMetadata"])["sparza.producer"]))
    return out


def _locations(config: Config, python: str, env: dict[str, str], path: Path) -> dict[str, str]:
    result = subprocess.run([python, "-c", "from sparza.cli import main; main()", "checkpoints", "show", "--config",
                             str(path), "--json", "--no-lag"], capture_output=True, text=True, timeout=180, env=env,
                            check=False)
    if result.returncode != 0 or not result.stdout.strip().startswith("{"):
        return {}
    return {t: str(cp.get("location") or "") for t, cp in json.loads(result.stdout).items()}


def _round(shape: str, tree: Path, storage: AzuriteProcess, work: Path, index: int) -> dict[str, Any]:
    from examples.keyed_count.load import SteadyInput, append_messages
    from tests.runtime.helpers import counts_per_key, expected_counts, start_sparza, stop_sparza, write_config

    root = work / f"{shape}-{index}"
    root.mkdir(parents=True)
    python = python_of(tree)
    package = root / "sparza-job.zip"
    build_package(tree, python, package)
    name = f"loss{shape[:3]}{index}{int(time.time()) % 100000}"
    config = _config(root, storage, name, package, shape)
    append_messages(config, 300, KEYS, commit_size=300)
    path = write_config(config, root / "job.yaml")
    exec_python = executor_python(root / "executor-python", python)
    cluster = StandaloneCluster(root / "cluster", workers=3, python=exec_python)
    env = {k: v for k, v in os.environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    env.update({"PYTHONPATH": str(tree), "PYSPARK_PYTHON": exec_python})
    log = root / "run.log"
    feeder = SteadyInput(config, KEYS, 10, start=300, interval_s=0.25)
    proc: subprocess.Popen[bytes] | None = None
    out: dict[str, Any] = {"shape": shape}
    with cluster:
        try:
            proc = start_sparza("run", "--config", str(path), "--master", cluster.url, log=log, env=env, cwd=root,
                                python=python)
            feeder.start()
            _until(lambda: _min_commits(config) >= 10, proc, log, 600)
            where = _locations(config, python, env, path)
            victim = 3
            lost_dir = str(cluster.state_dir(victim))
            moved = sorted(t for t, loc in where.items() if f":{lost_dir}#" in loc)
            if not moved:  # nothing ran there: kill the worker that holds the first task
                for worker in (1, 2, 3):
                    dir_ = str(cluster.state_dir(worker))
                    if any(f":{dir_}#" in loc for loc in where.values()):
                        victim, lost_dir = worker, dir_
                        moved = sorted(t for t, loc in where.items() if f":{dir_}#" in loc)
                        break
            before = {t: n for t, n in _per_task(config).items()}
            killed_at = time.time()
            cluster.kill_worker(victim)
            _until(lambda: all(n >= before.get(t, 0) + 10 for t, n in _per_task(config).items())
                   and len(_per_task(config)) == TASKS, proc, log, 600)
            time.sleep(max(0.0, killed_at + 30 - time.time()))  # the gap window is 30 s after the kill
            total = feeder.stop()
            _until(lambda: sum(len(c) for c in counts_per_key(config).values()) >= total, proc, log, 600)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=240)
        finally:
            feeder.stop()
            stop_sparza(proc)
    exact = counts_per_key(config) == {k: list(range(1, n + 1)) for k, n in expected_counts(total, KEYS).items()}
    commits = _commits(config)
    tasks = sorted({t for _, t in commits})
    survivors = [t for t in tasks if t not in moved]
    out.update(exact=exact, moved=moved, survivors=survivors, killed_at=killed_at)
    out["steady_gap_s"] = max((_max_gap(commits, t, killed_at - 20, killed_at) for t in survivors), default=0.0)
    out["survivor_gap_s"] = max((_max_gap(commits, t, killed_at, killed_at + 30) for t in survivors), default=0.0)
    backs = [min((ts for ts, t in commits if t == task and ts > killed_at), default=float("inf")) - killed_at
             for task in moved]
    out["moved_back_s"] = max(backs, default=0.0)
    out["log_tail"] = log.read_text(errors="replace").splitlines()[-5:]
    return out


def _per_task(config: Config) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, task in _commits(config):
        counts[task] = counts.get(task, 0) + 1
    return counts


def _min_commits(config: Config) -> int:
    per = _per_task(config)
    return min(per.values()) if len(per) == TASKS else 0


def _max_gap(commits: list[tuple[float, str]], task: str, start: float, end: float) -> float:
    times = [ts for ts, t in commits if t == task]
    inside = [ts for ts in times if start <= ts <= end]
    prior = [ts for ts in times if ts < start]
    points = ([prior[-1]] if prior else []) + inside
    after = [ts for ts in times if ts > end]
    if after:
        points.append(after[0])
    if len(points) < 2:
        return end - start
    return max(b - a for a, b in itertools.pairwise(points))


def _until(condition: Any, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"sparza run exited {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"timed out: {log.read_text(errors='replace')[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--shapes", default="jobs,stage,barrier")
    parser.add_argument("--baseline-tree", default=os.environ.get("SPARZA_BASELINE_TREE", "/work/wt-baseline"))
    args = parser.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sparza-executor-loss-") as tmp:
        work = Path(tmp)
        with AzuriteProcess(work / "azurite") as storage:
            for index in range(args.rounds):
                for shape in shapes if index % 2 == 0 else list(reversed(shapes)):
                    tree = Path(args.baseline_tree) if shape == "barrier" else ROOT
                    result = _round(shape, tree, storage, work, index)
                    results.append(result)
                    print(json.dumps({k: v for k, v in result.items() if k != "log_tail"}), flush=True)
    rows = []
    for shape in shapes:
        mine = [r for r in results if r["shape"] == shape]
        rows.append([shape, str(len(mine)), "yes" if all(r["exact"] for r in mine) else "NO",
                     f"{statistics.median(r['steady_gap_s'] for r in mine):.2f}",
                     f"{max(r['survivor_gap_s'] for r in mine):.2f}",
                     f"{max(r['moved_back_s'] for r in mine):.1f}"])
    header = ["shape", "rounds", "exact", "survivors' gap before the kill (s)", "survivors' longest gap after (s)",
              "moved tasks back after (s)"]
    body = _report.table(header, rows) + f"\n\nGoal: {GOALS}.\n"
    _report.record("executor_loss", "Executor loss: what stops when one of three workers dies",
                   "python bench/executor_loss.py " + " ".join(sys.argv[1:]), body, measures=MEASURES)


if __name__ == "__main__":
    main()
