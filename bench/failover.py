"""Failover of a coordinated processor: after ``kill -9`` of one of two `sparza run` processors, how long until
every task it ran has committed again on the survivor.

Two processors (``job.coordinator.factory: azure`` on a private Azurite, `local[1]` each, their own state dirs)
share a keyed count of 4 tasks while input keeps arriving. Once each owns two tasks and has committed under
that model, the benchmark kills the processor that is not the leader with SIGKILL and measures, from the kill,
the time until each of its tasks has a task checkpoint written by the survivor (a newer generation, written
after the kill). The coordination periods are the fast ones of ``sparza.testing.FAST_AZURE_COORDINATION``
(3 s liveness timeout), so what remains is the runtime's own switch: stopping the survivor's running work at
a batch boundary and starting the new model's tasks. Measured in the container mode and, in the same run, the
micro-batch mode (the baseline). The output is checked exact after every round.

Usage: ``python bench/failover.py --scale small|full``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
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

from sparza.config import Config  # noqa: E402
from sparza.devservers.storage import AzuriteProcess  # noqa: E402
from sparza.testing import FAST_AZURE_COORDINATION  # noqa: E402

TASKS = [f"Partition {p}" for p in range(4)]
GOAL_S = 10.0
MEASURES = ("How long after `kill -9` of one of two Azure-coordinated `sparza run` processors every task it ran "
            "commits again on the survivor, in the container mode, against the micro-batch mode in the same run "
            "(fast coordination periods: 3 s liveness timeout).")


def _config(root: Path, storage: AzuriteProcess, name: str, mode: str) -> Config:
    from examples.keyed_count.config import job_values
    from examples.keyed_count.load import create_streams

    config = Config(job_values(root, **FAST_AZURE_COORDINATION, **{
        "job.name": name, "azure.storage.connect": storage.connection_string, "job.checkpoint.factory": "azure",
        "job.checkpoint.azure.container": name, "task.max.batch.messages": "200", "task.commit.ms": "200",
        "job.execution.mode": mode}))
    create_streams(config, len(TASKS))
    return config


def _start(config_path: Path, processor: str, state: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
           "SPARZA_CONF_job__logged__store__base__dir": str(state)}
    return subprocess.Popen([sys.executable, "-c", "from sparza.cli import main; main()", "run", "--config",
                             str(config_path), "--processor-id", processor, "--master", "local[1]"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)


def _checkpoints(config: Config, job_key: str) -> dict[str, Any]:
    from sparza.runtime import checkpoint_store_from_config

    return checkpoint_store_from_config(config, job_key).read_all()


def _owners(config: Config) -> tuple[int, dict[str, list[str]], str | None]:
    from sparza.coordination.status import read_status

    status = read_status(config)
    model = status.state.effective
    owners = {} if model is None else {p: sorted(t) for p, t in model.assignments.items()}
    return status.state.version, owners, status.leader


def _wait(what: str, check: Any, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def one_round(work: Path, storage: AzuriteProcess, mode: str, index: int) -> float:
    """One kill; returns seconds from the kill until the killed processor's tasks all committed again."""
    from examples.keyed_count.load import append_messages
    from tests.runtime.helpers import expected_counts, final_counts, write_config

    name = f"failover-{mode[:5]}-{index}-{os.getpid() % 10000}"
    root = work / name
    config = _config(root, storage, name, mode)
    job_key = f"{name}-1"
    path = write_config(config, root / "job.yaml")
    sent = [0]
    stop = threading.Event()

    def feed() -> None:  # steady input: 40 messages every 200 ms
        while not stop.is_set():
            append_messages(config, 40, 13, start=sent[0], commit_size=40)
            sent[0] += 40
            stop.wait(0.2)

    procs = {p: _start(path, p, root / f"state-{p}", root / f"{p}.log") for p in ("p1", "p2")}
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        _wait("a model giving two tasks to each processor",
              lambda: sorted(len(t) for t in _owners(config)[1].values()) == [2, 2])
        version, owners, leader = _owners(config)
        _wait("every task committed under that model",
              lambda: sorted(_checkpoints(config, job_key)) == TASKS
              and all(cp.generation >= version for cp in _checkpoints(config, job_key).values()))
        victim = next(p for p in owners if p != leader)
        moved = owners[victim]
        killed_at = time.time()
        os.killpg(procs[victim].pid, signal.SIGKILL)
        procs[victim].wait(timeout=30)

        def recommitted() -> bool:
            cps = _checkpoints(config, job_key)
            return all(t in cps and cps[t].generation > version and (cps[t].written_at_ms or 0) / 1000 > killed_at
                       for t in moved)

        _wait("the killed processor's tasks to commit on the survivor", recommitted, timeout=180)
        elapsed = max(_checkpoints(config, job_key)[t].written_at_ms for t in moved) / 1000 - killed_at
        stop.set()
        feeder.join(timeout=30)
        survivor = next(p for p in procs if p != victim)

        def caught_up() -> bool:
            from sparza.systems.delta import DeltaSystemAdmin

            admin = DeltaSystemAdmin("delta", config)
            meta = admin.get_system_stream_metadata(["events"])["events"]
            cps = _checkpoints(config, job_key)
            return all(cps[t].offsets.get(f"delta.events#{p}") == meta.partitions[p].upcoming
                       for p, t in enumerate(TASKS))

        _wait("the survivor to catch up", caught_up)
        procs[survivor].send_signal(signal.SIGTERM)
        procs[survivor].wait(timeout=120)
        counts, rows = final_counts(config)
        if counts != expected_counts(sent[0], 13) or rows != sent[0]:
            raise RuntimeError(f"{mode} round {index}: output not exact ({rows} rows for {sent[0]} messages)")
        return elapsed
    finally:
        stop.set()
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    args = parser.parse_args(argv)
    rounds = 1 if args.scale == "small" else 3
    work = Path(tempfile.mkdtemp(prefix="sparza-bench-failover-"))
    storage = AzuriteProcess(work / "azurite")
    storage.start()
    results: dict[str, list[float]] = {"containers": [], "batches": []}
    try:
        for i in range(rounds):
            for mode in ("containers", "batches"):  # interleaved: both see the same machine
                seconds = one_round(work, storage, mode, i)
                results[mode].append(seconds)
                print(f"{mode} round {i}: {seconds:.1f} s", flush=True)
    finally:
        storage.stop()
    rows = []
    for mode in ("containers", "batches"):
        values = results[mode]
        rows.append([mode, f"{statistics.median(values):.1f} s", ", ".join(f"{v:.1f}" for v in values),
                     "goal ≤ 10 s" if mode == "containers" else "baseline"])
    body = _report.table(["mode", "median", "rounds (s)", ""], rows)
    met = statistics.median(results["containers"]) <= GOAL_S
    body += (f"\n\nContainer mode {'meets' if met else 'does not meet'} the goal of ≤ {GOAL_S:.0f} s: median "
             f"{statistics.median(results['containers']):.1f} s against {statistics.median(results['batches']):.1f} s "
             "for the micro-batch mode in the same run.")
    _report.record("failover", "Failover of a coordinated processor",
                   f"python bench/failover.py --scale {args.scale}", body, measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
