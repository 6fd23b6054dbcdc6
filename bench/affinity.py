"""Host affinity on real standalone clusters: restores from the blob store, and throughput with heavy state.

Every job here is the keyed count with ~1 KiB of state per key (``bench/_heavy_count.py``), its stores
backed up to Azurite and its task checkpoints there too, run by ``sparza run`` against a Spark standalone
cluster on loopback (:class:`~sparza.devservers.sparkcluster.StandaloneCluster`: one-core workers, each
with its own state dir, as separate hosts have). Each figure is measured beside its same-run baseline:

1. **Restores, steady input** (clusters of 2 and of 4 workers, 8 tasks). Messages arrive steadily (every
   0.5 s) while the job runs until every task committed >= 20 times (and, in the container mode, >= 3
   epochs passed); then one worker is killed (SIGKILL of the worker, its executor and its Python
   workers), and the job runs on until every task committed 10 more times (and 3 more epochs passed). The
   job is the container mode (``job.execution.mode: containers``, ``job.container.epoch.ms`` short) and its
   baseline the same job in the micro-batch mode (``batches``: today's placement). Restores are the
   per-task counters ``<task>:stores/restored-from-blob-store`` of the metrics (JSON lines); task-batches
   the per-task commits; moves the status lines "task X moved from A to B". Each run ends by SIGTERM once
   the input is drained, and its output is checked exactly against a plain-Python count of the input.
2. **Throughput with >= 100 MB of state per task** (``--scale full``; ~5 MB at ``small``): 4 tasks; a
   fill run gives every task its keys, then a timed run counts the same keys once more, on the 4-worker
   cluster and on ``local[2]`` of the same machine (both the container mode), and the cluster in the
   micro-batch mode as the third figure. The rate is messages / seconds between the run's first and last
   metrics report (JVM start, executor registration and the first commit excluded, alike for all).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _procs import loadavg  # noqa: E402
from _report import record, table  # noqa: E402


@dataclass(frozen=True)
class Scale:
    """Sizes of one scale: affinity jobs (keys, messages per append) and the heavy-state job."""

    keys: int
    append: int
    heavy_keys_per_task: int
    heavy_tasks: int = 4
    tasks: int = 8
    commits: int = 20
    after_kill: int = 10
    epoch_ms: int = 5000


SCALES = {"small": Scale(keys=4_000, append=400, heavy_keys_per_task=5_000),
          "full": Scale(keys=40_000, append=800, heavy_keys_per_task=100_000)}
PHASE_TIMEOUT_S = 600.0
TASK_CLASS = "_heavy_count.HeavyCountTask"
MEASURES = ("Where tasks run on a real standalone cluster (one-core workers on loopback, each with its own state "
            "dir): restores from the blob store per task and per task-batch with steady input, then after a worker "
            "is killed, in the container mode against the same job in the micro-batch mode (today's placement); "
            "and the keyed count with >= 100 MB of state per task on 4 workers against the same job on local[2]. "
            "4 one-core executors commit 4 tasks at once where local[2] commits 2, and commits wait on storage: "
            "the ratio shows that no restore tax is paid, not a speed-up.")
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""
PROTOTYPES = (
    "**Prototypes** (throwaway, one Spark job per epoch or batch on a loopback standalone cluster, measured "
    "while choosing the mechanism): M0, today's placement (one Spark task per sparza task per batch, no "
    "preferred location): 65 of 112 task-batches changed executor on 2 workers, 58 of 88 on 4. M1, barrier "
    "containers (one barrier stage per epoch, the containers allGather their locations and every one computes "
    "the same task→container assignment from where each task last ran): 0 moves; after one of 2 workers was "
    "killed, 4 moves, each task of the lost worker once. M2, a stateful Spark operator keyed by task "
    "(applyInPandasWithState: Spark's state-store locality places each task): 0 moves, but the tasks were "
    "placed 6/2 on two executors and each batch took ~1.2 s. The product's container mode is M1.")


# --- jobs --------------------------------------------------------------------------------------
def job_config(root: Path, name: str, mode: str, connection: str, tasks: int, **extra: Any) -> Any:
    """The heavy keyed count under ``root`` (streams, metrics), its stores in the executors' state dirs and
    its blob store and checkpoints in an Azurite container named after the job."""
    from examples.keyed_count.config import job_values
    from examples.keyed_count.load import create_streams

    from sparza.config import Config

    config = Config(job_values(root, **{
        "job.name": name, "task.class": TASK_CLASS, "job.execution.mode": mode,
        "job.logged.store.base.dir": "${SPARZA_EXECUTOR_STATE}",
        "job.spark.checkpoint.dir": str(root / "spark-checkpoint"),
        "job.filesystem.shared": "true",
        "stores.counts.msg.serde": "bytes",
        "blob.store.manager.factory": "azure",
        "blob.store.azure.container": re.sub(r"[^a-z0-9-]", "-", name.lower())[:60],
        "azure.storage.connect": connection,
        "task.max.batch.messages": "5000",
        "metrics.reporter.jsonl.path": str(root / "metrics.jsonl"),
        "spark.executor.memory": "768m",
        "spark.task.maxFailures": "4",
        **{k: str(v) for k, v in extra.items()}}))
    create_streams(config, tasks)
    return config


def write_config(config: Any, path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(dict(config.items())))
    return path


def sparza_env(state_dir: Path | None = None) -> dict[str, str]:
    """The driver's environment: the repo and bench/ importable (executors get the same PYTHONPATH through
    ``job.filesystem.shared``), no connection string (it is in the config, so in the secrets file)."""
    env = {k: v for k, v in os.environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "bench"), str(ROOT / "src")])
    env["PYSPARK_PYTHON"] = sys.executable
    if state_dir is not None:  # local[N]: the driver's own executor state dir
        env["SPARZA_EXECUTOR_STATE"] = str(state_dir)
    return env


def sparza_run(config_path: Path, master: str, log: Path, *, once: bool,
               env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``sparza run`` of the config against ``master``, its output (status lines) to ``log``."""
    cmd = [sys.executable, "-c", "from sparza.cli import main; main()", "run", "--config", str(config_path),
           "--master", master] + (["--once"] if once else [])
    with log.open("w") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=config_path.parent)


class RunView:
    """A running job seen through its metrics (JSON lines) and its status lines."""

    def __init__(self, metrics: Path, log: Path, tasks: list[str]) -> None:
        self.metrics, self.log, self.tasks = metrics, log, tasks
        self._offset = 0
        self.snapshots: list[tuple[int, dict[str, Any]]] = []

    def refresh(self) -> None:
        if not self.metrics.exists():
            return
        with self.metrics.open() as fh:
            fh.seek(self._offset)
            data = fh.read()
        complete = data[:data.rfind("\n") + 1]
        self._offset += len(complete.encode())
        for line in complete.splitlines():
            if line.strip():
                body = json.loads(line)
                self.snapshots.append((int(body["time_ms"]), body["metrics"]))

    def latest(self) -> dict[str, Any]:
        self.refresh()
        return self.snapshots[-1][1] if self.snapshots else {}

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines() if self.log.exists() else []

    def epoch(self) -> int:
        found = [int(m.group(1)) for line in self.lines() for m in [re.search(r"\(epoch (\d+):", line)] if m]
        return max(found, default=0)

    def moves(self) -> list[str]:
        return [line for line in self.lines() if " moved from " in line]

    def restarts(self) -> list[str]:
        return [line for line in self.lines() if "containers failed" in line]


def per_task(snapshot: dict[str, Any], tasks: list[str]) -> dict[str, dict[str, int]]:
    """Per task: commits (task-batches) and restores from the blob store so far."""
    out = {}
    for task in tasks:
        timer = snapshot.get(f"{task}:task", {}).get("commit-ms")
        out[task] = {"commits": int(timer["count"]) if isinstance(timer, dict) else 0,
                     "restores": int(snapshot.get(f"{task}:stores", {}).get("restored-from-blob-store", 0))}
    return out


def wait_for(what: str, condition: Callable[[], bool], proc: subprocess.Popen[bytes], view: RunView,
             timeout_s: float = PHASE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            raise RuntimeError(f"sparza run exited ({proc.returncode}) while waiting for {what}; see {view.log}:\n"
                               + "\n".join(view.lines()[-30:]))
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout_s:.0f}s; see {view.log}:\n" + "\n".join(view.lines()[-30:]))
        time.sleep(0.5)


def output_counts(config: Any) -> tuple[dict[str, int], int]:
    """The highest count per key in the output and its number of rows."""
    from deltalake import DeltaTable

    table_ = DeltaTable(str(Path(config["systems.delta.delta.root"]) / "counts")).to_pyarrow_table(
        columns=["value", "type"])
    best: dict[str, int] = {}
    rows = 0
    for value, kind in zip(table_.column("value").to_pylist(), table_.column("type").to_pylist(), strict=True):
        if kind == 0:
            rows += 1
            body = json.loads(value)
            best[body["key"]] = max(best.get(body["key"], 0), int(body["count"]))
    return best, rows


def oracle(messages: int, keys: int, rounds: int = 1) -> dict[str, int]:
    """What the count must be per key after ``rounds`` passes of messages ``0..messages-1`` (key ``k{i % keys}``)."""
    out: dict[str, int] = {}
    for i in range(messages):
        out[f"k{i % keys}"] = out.get(f"k{i % keys}", 0) + rounds
    return out


def check_exact(config: Any, expected: dict[str, int], label: str) -> None:
    counts, rows = output_counts(config)
    if counts != expected or rows != sum(expected.values()):
        wrong = sorted(k for k in expected.keys() | counts.keys() if counts.get(k) != expected.get(k))[:5]
        raise RuntimeError(f"{label}: wrong counts ({rows} rows for {sum(expected.values())} messages; keys "
                           f"{wrong} differ, e.g. {[(k, counts.get(k), expected.get(k)) for k in wrong]})")


# --- 1. restores with steady input, and after a worker is killed --------------------------------
@dataclass
class AffinityResult:
    workers: int
    mode: str
    before: dict[str, dict[str, int]] = field(default_factory=dict)
    after: dict[str, dict[str, int]] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    killed_tasks: int = 0
    epochs: tuple[int, int] = (0, 0)
    restarts: int = 0
    seconds: float = 0.0
    messages: int = 0


def affinity_run(cluster: Any, base: Path, connection: str, scale: Scale, workers: int, mode: str) -> AffinityResult:
    """One job on the running ``cluster`` (see the module docstring, part 1)."""
    from examples.keyed_count.load import SteadyInput, append_messages

    root = base / f"aff-{workers}w-{mode}"
    name = f"aff-{workers}w-{mode}"
    tasks = [f"Partition {i}" for i in range(scale.tasks)]
    config = job_config(root, name, mode, connection, scale.tasks, **{
        "job.container.epoch.ms": scale.epoch_ms, "spark.cores.max": workers, "heavy_count.value.bytes": 1024})
    path = write_config(config, root / "job.yaml")
    append_messages(config, scale.keys, scale.keys, commit_size=scale.keys)  # every key once: the state exists
    view = RunView(root / "metrics.jsonl", root / "run.log", tasks)
    feeder = SteadyInput(config, scale.keys, scale.append, start=scale.keys)
    result = AffinityResult(workers, mode)
    started = time.monotonic()
    proc = sparza_run(path, cluster.url, view.log, once=False, env=sparza_env())
    try:
        feeder.start()
        containers = mode == "containers"

        def commits_at_least(n: int | dict[str, int]) -> bool:
            done = per_task(view.latest(), tasks)
            return all(done[t]["commits"] >= (n if isinstance(n, int) else n[t]) for t in tasks)

        wait_for(f"{scale.commits} commits per task", lambda: commits_at_least(scale.commits)
                 and (not containers or view.epoch() >= 3), proc, view)
        result.before = per_task(view.latest(), tasks)
        epoch_at_kill = view.epoch()
        cluster.kill_worker(workers)
        print(f"  {workers} workers, {mode}: killed worker {workers} at epoch {epoch_at_kill}; before: "
              f"{_brief(result.before)}", flush=True)
        wanted = {t: result.before[t]["commits"] + scale.after_kill for t in tasks}
        wait_for(f"{scale.after_kill} more commits per task", lambda: commits_at_least(wanted)
                 and (not containers or view.epoch() >= epoch_at_kill + 3), proc, view)
        total = feeder.stop()
        if feeder.error is not None:
            raise RuntimeError(f"appending input failed: {feeder.error}")
        stopped_ms = int(time.time() * 1000)

        def drained() -> bool:
            view.refresh()
            return bool(view.snapshots) and view.snapshots[-1][0] > stopped_ms and \
                view.snapshots[-1][1].get("aggregate", {}).get("lag") == 0
        wait_for("the input drained (lag 0)", drained, proc, view)
        result.seconds = time.monotonic() - started
        proc.send_signal(signal.SIGTERM)  # not SIGINT: PySpark's own handler cancels the jobs first
        code = proc.wait(timeout=300)
        if code != 0:
            raise RuntimeError(f"sparza run exited {code}; see {view.log}:\n" + "\n".join(view.lines()[-30:]))
    finally:
        feeder.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)
    final = per_task(view.latest(), tasks)
    result.after = {t: {k: final[t][k] - result.before[t][k] for k in final[t]} for t in tasks}
    result.moved = view.moves()
    result.restarts = len(view.restarts())
    result.epochs = (epoch_at_kill, view.epoch())
    result.messages = total
    check_exact(config, oracle(total, scale.keys), f"{workers} workers, {mode}")
    print(f"  {workers} workers, {mode}: after the kill {_brief(result.after)}; {len(result.moved)} move line(s), "
          f"{result.restarts} restart line(s), epochs {result.epochs}; exact output ({total} messages)", flush=True)
    return result


def _brief(per: dict[str, dict[str, int]]) -> str:
    return (f"commits {min(v['commits'] for v in per.values())}-{max(v['commits'] for v in per.values())} per task, "
            f"restores {sum(v['restores'] for v in per.values())}")


# --- 2. throughput with heavy state -------------------------------------------------------------
@dataclass
class ThroughputResult:
    label: str
    rate: float
    seconds: float
    wall_s: float
    fill_s: float
    state_mb: float
    restores: int
    commits: int


def store_mb(state_dirs: list[Path], job_key: str, tasks: list[str]) -> float:
    """The smallest task's live store (MB): its largest copy over the state dirs (where it last ran)."""
    sizes = []
    for task in tasks:
        copies = [sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
                  for base in state_dirs for d in [base / job_key / "counts" / task.replace(" ", "_")] if d.is_dir()]
        sizes.append(max(copies, default=0) / 1e6)
    return min(sizes, default=0.0)


def throughput_run(label: str, master: str, base: Path, connection: str, scale: Scale, mode: str,
                   state_dirs: list[Path], local_state: Path | None, cores: int) -> ThroughputResult:
    from examples.keyed_count.load import bulk_append

    name = "tp-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    root = base / name
    tasks = [f"Partition {i}" for i in range(scale.heavy_tasks)]
    keys = scale.heavy_keys_per_task * scale.heavy_tasks
    config = job_config(root, name, mode, connection, scale.heavy_tasks, **{
        "spark.cores.max": cores, "heavy_count.value.bytes": 1024,
        "task.max.batch.messages": max(scale.heavy_keys_per_task // scale.commits, 100)})
    path = write_config(config, root / "job.yaml")
    env = sparza_env(local_state)

    def once(what: str) -> tuple[float, RunView]:
        metrics = root / "metrics.jsonl"
        metrics.unlink(missing_ok=True)
        view = RunView(metrics, root / f"{what}.log", tasks)
        started = time.monotonic()
        proc = sparza_run(path, master, view.log, once=True, env=env)
        code = proc.wait(timeout=3600)
        if code != 0:
            raise RuntimeError(f"{label} {what}: sparza run exited {code}; see {view.log}:\n"
                               + "\n".join(view.lines()[-30:]))
        return time.monotonic() - started, view

    bulk_append(config, keys, keys, scale.heavy_tasks)  # every key once: fills each task's store
    fill_s, _ = once("fill")
    state = store_mb(state_dirs, f"{name}-1", tasks)
    bulk_append(config, keys, keys, scale.heavy_tasks)  # every key once more: the timed run
    wall_s, view = once("timed")
    view.refresh()
    (t0, first), (t1, last) = view.snapshots[0], view.snapshots[-1]
    done = last["aggregate"]["messages-processed"] - first["aggregate"]["messages-processed"]
    seconds = (t1 - t0) / 1000
    counts = per_task(last, tasks)
    check_exact(config, oracle(keys, keys, rounds=2), label)
    result = ThroughputResult(label, done / seconds if seconds > 0 else float("nan"), seconds, wall_s, fill_s, state,
                              sum(c["restores"] for c in counts.values()), min(c["commits"] for c in counts.values()))
    print(f"  {label}: {result.rate:,.0f} msg/s over {seconds:.1f} s ({wall_s:.1f} s wall, fill {fill_s:.1f} s), "
          f"{state:.0f} MB per task, {result.restores} restores, {result.commits}+ commits per task, load "
          f"{loadavg()}", flush=True)
    return result


# --- report ------------------------------------------------------------------------------------
def _per_batch(r: AffinityResult) -> float:
    """Restores per task-batch before the kill."""
    return sum(v["restores"] for v in r.before.values()) / max(sum(v["commits"] for v in r.before.values()), 1)


def render(scale_name: str, scale: Scale, affinity: list[AffinityResult], throughput: list[ThroughputResult]) -> str:
    rows = []
    for r in affinity:
        n = len(r.before)
        before_restores = sum(v["restores"] for v in r.before.values())
        before_commits = sum(v["commits"] for v in r.before.values())
        after_restores = sum(v["restores"] for v in r.after.values())
        after_commits = sum(v["commits"] for v in r.after.values())
        rows.append([f"{r.workers}", "containers" if r.mode == "containers" else "batches (baseline)",
                     f"{min(v['commits'] for v in r.before.values())}",
                     f"{before_restores / n:.2f}", f"{before_restores / max(before_commits, 1):.3f}",
                     f"{max(v['restores'] for v in r.after.values())}", f"{after_restores / n:.2f}",
                     f"{after_restores / max(after_commits, 1):.3f}",
                     f"{len(r.moved)}" if r.mode == "containers" else "-",
                     f"{r.epochs[0]} / {r.epochs[1]}" if r.mode == "containers" else "-"])
    body = (f"Scale {scale_name}: {scale.tasks} tasks, {scale.keys:,} keys of ~1 KiB state each (every key counted "
            f"once before the run), {scale.append * 2:,} messages/s appended in commits every 0.5 s; "
            f"`job.container.epoch.ms: {scale.epoch_ms}`; one-core workers, blob store and checkpoints on Azurite. "
            "Restores are per task (mean) and per task-batch, before the kill (the first epoch included) and "
            "after it; the kill takes the last worker with its executor.\n\n"
            + table(["workers", "mode", "commits per task before the kill (min)", "restores per task",
                     "restores per task-batch", "after the kill: restores per task (max)", "per task (mean)",
                     "per task-batch", "tasks moved (status lines)", "epoch at kill / last"], rows))
    for workers in sorted({r.workers for r in affinity}):
        pair = {r.mode: r for r in affinity if r.workers == workers}
        if len(pair) == 2:
            c, b = pair["containers"], pair["batches"]
            body += (f"\n\n{workers} workers: restores per task-batch before the kill **{_per_batch(c):.3f}** "
                     f"(containers; goal 0 after the first epoch) vs **{_per_batch(b):.3f}** (batches, same run); "
                     "after the kill at most "
                     f"**{max(v['restores'] for v in c.after.values())}** per task (goal ≤ 1) vs "
                     f"{max(v['restores'] for v in b.after.values())}.")
    if throughput:
        by = {r.label: r for r in throughput}
        rows2 = [[r.label, f"{r.state_mb:.0f}", f"{r.rate:,.0f}", f"{r.seconds:.1f}", f"{r.wall_s:.1f}",
                  f"{r.fill_s:.1f}", r.commits, r.restores] for r in throughput]
        local = by.get("local[2], containers")
        cluster = by.get("4 workers, containers")
        body += ("\n\nKeyed count with heavy state: "
                 f"{scale.heavy_tasks} tasks x {scale.heavy_keys_per_task:,} keys of ~1 KiB; the timed run counts "
                 f"every key once more in >= {scale.commits} batches per task. Rate = messages between the first "
                 "and the last metrics report / the time between them.\n\n"
                 + table(["run", "state per task (MB, min)", "messages/s", "measured s", "wall s (timed run)",
                          "wall s (fill run)", "commits per task (min)", "restores in the timed run"], rows2))
        if local and cluster:
            body += (f"\n\n4 workers vs local[2]: **{cluster.rate / local.rate:.2f}x** (goal ≥ 0.9x; by the timed "
                     f"runs' wall time, startup included: {local.wall_s / cluster.wall_s:.2f}x)")
            batches = by.get("4 workers, batches")
            if batches:
                body += f"; the micro-batch mode on 4 workers: {batches.rate / local.rate:.2f}x local[2]"
            body += "."
    return body + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--workers", type=int, nargs="*", default=[2, 4],
                        help="cluster sizes of part 1 (none: only part 2)")
    parser.add_argument("--skip-throughput", action="store_true", help="only part 1")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    from sparza.devservers.sparkcluster import StandaloneCluster
    from sparza.devservers.storage import AzuriteProcess

    base = Path(tempfile.mkdtemp(prefix="sparza-bench-affinity-"))
    affinity: list[AffinityResult] = []
    throughput: list[ThroughputResult] = []
    print(f"load before: {loadavg()}; work dir {base}", flush=True)
    azurite = AzuriteProcess(base / "azurite")
    azurite.start()
    try:
        for workers in args.workers:
            with StandaloneCluster(base / f"cluster-{workers}", workers=workers, memory="1g") as cluster:
                for mode in ("containers", "batches"):
                    affinity.append(affinity_run(cluster, base, azurite.connection_string, scale, workers, mode))
                    cluster.start_worker(workers)  # the killed one, back for the next run
        if not args.skip_throughput:
            with StandaloneCluster(base / "cluster-throughput", workers=4, memory="1g") as cluster:
                dirs = [cluster.state_dir(i) for i in cluster.workers]
                for mode in ("containers", "batches"):
                    throughput.append(throughput_run(f"4 workers, {mode}", cluster.url, base,
                                                     azurite.connection_string, scale, mode, dirs, None, 4))
            local_state = base / "local-state"  # the cluster is stopped: local[2] has the machine to itself
            throughput.insert(1, throughput_run("local[2], containers", "local[2]", base, azurite.connection_string,
                                                scale, "containers", [local_state], local_state, 2))
    finally:
        azurite.stop()
        shutil.rmtree(base, ignore_errors=True)
    body = render(args.scale, scale, affinity, throughput)
    print(f"load after: {loadavg()}")
    cmd = f"python bench/affinity.py --scale {args.scale}" + (
        f" --workers {' '.join(map(str, args.workers))}" if args.workers != [2, 4] else "") + (
        " --skip-throughput" if args.skip_throughput else "")
    record("affinity", "Host affinity on standalone clusters: restores and heavy-state throughput", cmd,
           body + "\n" + PROTOTYPES + "\n", measures=MEASURES)


if __name__ == "__main__":
    main()
