"""A job of many tasks: what each cost does as tasks grow (16, 64, 256, 1,024), on this machine's `local[2]`.

Each row is one `sparza run` of the keyed count (RocksDB stores backed up to a local blob store, task checkpoints
beside them, Delta streams in and out) over an input stream of N partitions, so N tasks, in 2 containers. Input
arrives at the same total rate whatever N (``--rate`` messages a second, spread over the partitions at random, one
Delta commit every 0.5 s). Measured, from the run's own surfaces:

- **start → first commit**: from launching `sparza run` to its first status line of a committed batch;
- **start → every task committed**: until each of the N task checkpoints names a batch;
- **driver CPU**: CPU seconds per second of the `sparza run` (driver) process over the steady part (the manager,
  the channel, the status line, the metrics), and of the whole process tree (containers and JVM included);
- **commit latency**: mean and max ``aggregate/commit-ms`` over the steady part (from the metrics' JSON lines);
- **batches/s**: task batches committed per second over the steady part.

The baseline is the smallest row of the same run: a cost that grows faster than the task count shows as a ratio
to it above N / N_min.

- **exact**: once the input stops, whether the output caught up within ``--catchup-s`` with every key's count
  right, and how long that took; a row that did not catch up says whether what it wrote so far is exact (counts
  1, 2 ... n per key: too slow) or not (wrong).

Usage: ``python bench/scale_tasks.py [--tasks 16,64,256,1024] [--steady-s 45] [--rate 200] [--catchup-s 600]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _report  # noqa: E402
from _procs import cpu_seconds, loadavg, tree_cpu_seconds  # noqa: E402

from sparza.config import Config  # noqa: E402

MEASURES = ("What the container mode's costs do as a job's task count grows (16 to 1,024 tasks on `local[2]`, the "
            "same input rate): start to first commit, start until every task committed, driver CPU, commit latency, "
            "against the smallest task count of the same run.")
GOAL = "start → first commit at 1,024 tasks ≤ 4x that at 16 tasks; nothing grows faster than the task count"


class Feeder:
    """Appends ``rate`` messages a second to random partitions of ``events``, one commit every 0.5 s."""

    def __init__(self, config: Config, partitions: int, rate: int) -> None:
        from sparza.systems.delta import DeltaSystemProducer

        self.producer = DeltaSystemProducer("delta", config)
        self.producer.register("feeder")
        self.partitions, self.rate = partitions, rate
        self.sent = 0
        self.keys: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._rng = random.Random(7)

    def _run(self) -> None:
        from sparza.streams import OutgoingMessageEnvelope, SystemStream

        stream = SystemStream("delta", "events")
        while not self._stop.wait(0.5):
            for _ in range(self.rate // 2):
                partition = self._rng.randrange(self.partitions)
                key = f"k{partition}-{self._rng.randrange(4)}"
                self.keys[key] = self.keys.get(key, 0) + 1
                self.producer.send("feeder", OutgoingMessageEnvelope(stream, b"x" * 50, key=key.encode(),
                                                                    partition=partition))
                self.sent += 1
            self.producer.flush("feeder")

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.sent


def _row(n: int, work: Path, steady_s: float, rate: int, catchup_s: float = 600.0) -> dict[str, Any]:
    from examples.keyed_count.config import job_values
    from examples.keyed_count.load import create_streams
    from tests.runtime.helpers import final_counts, write_config

    root = work / f"n{n}"
    config = Config(job_values(root, **{"job.name": f"scale{n}", "task.max.batch.messages": "1000",
                                        "blob.store.local.fsync": "false",
                                        "metrics.reporter.jsonl.path": str(root / "metrics.jsonl"),
                                        "spark.master": "local[2]"}))
    create_streams(config, n)
    path = write_config(config, root / "job.yaml")
    log = root / "run.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    feeder = Feeder(config, n, rate).start()
    began = time.monotonic()
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-c", "from sparza.cli import main; main()", "run", "--config",
                                 str(path)], env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=root)
    out: dict[str, Any] = {"tasks": n}
    try:
        first = _wait(lambda: any(line.startswith("batch ") for line in _lines(log)), proc, log, 900)
        out["first_s"] = first - began
        all_at = _wait(lambda: _committed_tasks(config) >= n, proc, log, 1800)
        out["all_s"] = all_at - began
        # The steady part: driver and tree CPU, batches and commit latency over steady_s seconds.
        cpu0, tree0, t0 = cpu_seconds(proc.pid), tree_cpu_seconds(proc.pid), time.monotonic()
        lines0 = len(_metrics(root))
        time.sleep(steady_s)
        cpu1, tree1, t1 = cpu_seconds(proc.pid), tree_cpu_seconds(proc.pid), time.monotonic()
        out["driver_cpu"] = (cpu1 - cpu0) / (t1 - t0)
        out["tree_cpu"] = (tree1 - tree0) / (t1 - t0)
        snaps = _metrics(root)[lines0:]
        commits = [s.get("aggregate", {}).get("commit-ms") for s in snaps]
        lasts = [c for c in commits if isinstance(c, dict)]
        out["commit_ms_mean"] = (sum(c.get("mean_ms", 0.0) for c in lasts) / len(lasts)) if lasts else 0.0
        out["commit_ms_max"] = max((c.get("max_ms", 0.0) for c in lasts), default=0.0)
        if len(snaps) >= 2:
            b0 = snaps[0].get("aggregate", {}).get("batches", 0)
            b1 = snaps[-1].get("aggregate", {}).get("batches", 0)
            out["batches_per_s"] = (b1 - b0) / (t1 - t0)
    finally:
        total = feeder.stop()
        stopped = time.monotonic()
        try:
            _wait(lambda: final_counts(config)[1] >= total, proc, log, catchup_s)
            out["exact"] = "yes" if final_counts(config)[0] == feeder.keys else "NO"
            out["caught_up_s"] = time.monotonic() - stopped
        except RuntimeError:
            out["exact"] = _so_far(config, feeder.keys, catchup_s)
        proc.terminate()
        try:
            proc.wait(240)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    out["load"] = loadavg()
    return out


def _so_far(config: Config, sent: dict[str, int], catchup_s: float) -> str:
    """A run that did not catch up within ``catchup_s``: whether what it wrote so far is exact (every key's counts
    1, 2 ... n with n at most what was sent: too slow) or not (a count repeated, missing or too high: wrong)."""
    from tests.runtime.helpers import counts_per_key

    written = counts_per_key(config)
    rows = sum(len(c) for c in written.values())
    wrong = [k for k, c in written.items() if c != list(range(1, len(c) + 1)) or len(c) > sent.get(k, 0)]
    if wrong:
        return f"NO ({len(wrong)} keys wrong)"
    return f"behind after {catchup_s:.0f} s ({rows:,} of {sum(sent.values()):,} rows, all exact)"


def _lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").splitlines() if log.exists() else []


def _metrics(root: Path) -> list[dict[str, Any]]:
    path = root / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line)["metrics"])
            except (ValueError, KeyError):
                continue
    return out


def _committed_tasks(config: Config) -> int:
    from sparza.engine.checkpoint import checkpoint_store_from_config

    try:
        return sum(1 for cp in checkpoint_store_from_config(config, config["job.name"] + "-1").read_all().values()
                   if cp.batch >= 1)
    except Exception:
        return 0


def _wait(condition: Any, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        if proc.poll() is not None:
            raise RuntimeError(f"sparza run exited {proc.returncode}: {''.join(_lines(log)[-20:])}")
        time.sleep(0.25)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s: {' | '.join(_lines(log)[-10:])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="16,64,256,1024")
    parser.add_argument("--steady-s", dest="steady_s", type=float, default=45.0)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--catchup-s", dest="catchup_s", type=float, default=600.0,
                        help="how long the output may take to catch up once the input stops")
    args = parser.parse_args()
    counts = [int(n) for n in args.tasks.split(",") if n.strip()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sparza-scale-") as tmp:
        for n in counts:
            row = _row(n, Path(tmp), args.steady_s, args.rate, args.catchup_s)
            print(json.dumps(row), flush=True)
            rows.append(row)
    base = rows[0]
    table = []
    for r in rows:
        ratio = r["tasks"] / base["tasks"]
        table.append([r["tasks"], f"{r['first_s']:.1f} ({r['first_s'] / base['first_s']:.1f}x)",
                      f"{r['all_s']:.1f} ({r['all_s'] / base['all_s']:.1f}x)",
                      f"{r['driver_cpu']:.2f} ({r['driver_cpu'] / max(base['driver_cpu'], 1e-6):.1f}x)",
                      f"{r['tree_cpu']:.2f}", f"{r['commit_ms_mean']:.0f} / {r['commit_ms_max']:.0f}",
                      f"{r.get('batches_per_s', 0.0):.1f}", f"{ratio:g}x",
                      r["exact"] + (f" ({r['caught_up_s']:.0f} s)" if "caught_up_s" in r else "")])
    header = ["tasks", "start → first commit s (x smallest)", "start → every task committed s", "driver CPU s/s",
              "tree CPU s/s", "commit ms mean / max", "task batches/s", "tasks (x smallest)",
              "exact (time to catch up once the input stopped)"]
    body = (f"`local[2]`, 2 containers, {args.rate} messages/s in all, steady part {args.steady_s:.0f} s per row; "
            f"load while measuring: {', '.join(r['load'] for r in rows)}.\n\n" + _report.table(header, table)
            + f"\n\nGoal: {GOAL}.\n")
    _report.record("scale_tasks", "A thousand tasks: the container mode's costs as tasks grow",
                   "python bench/scale_tasks.py " + " ".join(sys.argv[1:]), body, measures=MEASURES)


if __name__ == "__main__":
    main()
