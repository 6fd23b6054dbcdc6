"""The Azure coordinator as processors grow (2, 4, 8, 16): storage requests, CPU, joining and failover, split brain.

Each size runs that many processors as separate OS processes (``sparza.coordination._processor_main``, one
coordinator each) sharing 32 tasks on a private Azurite started with its request log (``--debug``), in which
every request is one ``...StorageContextMiddleware: RequestMethod=...`` line. For each size it measures:

* the time from starting the processors to one job model that every one of them adopted;
* over a steady window (no change), the Table, lease and other blob requests per second, counted in
  Azurite's log, in total and per processor, and the processors' CPU (from ``/proc``) per processor;
* after ``kill -9`` of one worker (not the leader), the time to the newer job model's publication and
  to every survivor adopting it;
* split brain, throughout: every term has one leader (sampled from the job-model store outside the
  steady window), every published model gives each task to exactly one processor, and at no sample did
  two processors report themselves leader at once.

The baseline is the smallest size (2 processors) measured in the same run: every figure is printed beside
its ratio to it, per processor where linear growth means a flat per-processor figure. Product defaults
(``job.coordinator.azure.*``) unless ``--fast`` (1 s heartbeat, 5 s liveness: the periods the 10 s
failover goal needs), which is also measured at the largest size by default.

Usage: ``python bench/coordinator_scale.py [--scale small|full] [--sizes 2,4,8,16] [--window 30] [--no-fast]``
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

from sparza.coordination._fleet import ProcessorFleet
from sparza.coordination.clients import CoordinationClients
from sparza.coordination.settings import CoordinationConfig
from sparza.devservers.storage import AzuriteProcess, find_azurite

TASKS = 32
FAST = {  # what a 10 s failover needs: death noticed after 5 s, checked every 0.5 s
    "job.coordinator.azure.heartbeat.interval.ms": "1000",
    "job.coordinator.azure.liveness.timeout.ms": "5000",
    "job.coordinator.azure.liveness.check.interval.ms": "500",
    "job.coordinator.azure.jobmodel.poll.interval.ms": "500",
}
GOAL_FAILOVER_S = 10.0

MEASURES = ("How the Azure coordinator's cost and reaction grow with the number of processors (2, 4, 8, 16 OS "
            "processes, 32 tasks, real Azurite): Table, lease and blob requests per second counted in Azurite's "
            "request log, processor CPU, time to join, time to a new job model after `kill -9` of one worker, and "
            "split brain; against 2 processors measured in the same run.")
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""

_LINE = re.compile(r"^(\S+Z) \S+ info: (Blob|Table)StorageContextMiddleware: RequestMethod=(\w+) RequestURL=(\S+)")


class LoggedAzurite(AzuriteProcess):
    """Azurite writing every request to ``debug_log`` (its ``--debug`` log)."""

    debug_log: Path

    def start(self, timeout_s: float = 30.0) -> None:
        """Start with the request log on."""
        self._spawn([find_azurite(), "--silent", "--location", str(self.data_dir), "--debug", str(self.debug_log),
                     "--blobHost", "127.0.0.1", "--blobPort", str(self.blob_port),
                     "--tableHost", "127.0.0.1", "--tablePort", str(self.table_port),
                     "--queueHost", "127.0.0.1", "--queuePort", str(self.queue_port),
                     "--skipApiVersionCheck", "--loose", "--disableProductStyleUrl"])
        self.wait_ready(timeout_s)


def count_requests(log: Path, start: float, end: float, offset: int) -> dict[str, int]:
    """Requests Azurite logged between the wall-clock times ``start`` and ``end`` (reading from byte ``offset``):
    table, lease (``comp=lease``) and other blob requests."""
    counts = {"table": 0, "lease": 0, "blob": 0}
    with open(log, "rb") as fh:
        fh.seek(offset)
        for raw in fh:
            if b"StorageContextMiddleware: RequestMethod=" not in raw:
                continue
            m = _LINE.match(raw.decode("utf-8", "replace"))
            if m is None:
                continue
            at = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
            if not start <= at < end:
                continue
            if m.group(2) == "Table":
                counts["table"] += 1
            elif "comp=lease" in m.group(4):
                counts["lease"] += 1
            else:
                counts["blob"] += 1
    return counts


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the processes (and their reaped children) so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


@dataclass
class Watch:
    """Split-brain checks, sampled in a thread: leaders per term from the store, models that give a task to two
    processors or leave one out, processors reporting themselves leader at once."""

    fleet: ProcessorFleet
    clients: CoordinationClients
    pids: list[str]
    store_paused: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    leaders_by_term: dict[int, set[str]] = field(default_factory=dict)
    bad_models: list[str] = field(default_factory=list)
    max_reported_leaders: int = 0
    samples: int = 0

    def run(self) -> None:
        while not self.stop.wait(0.25):
            alive = set(self.fleet.alive())
            reported = [p for p in self.fleet.leaders([p for p in self.pids if p in alive])]
            self.max_reported_leaders = max(self.max_reported_leaders, len(reported))
            self.samples += 1
            if self.store_paused.is_set():
                continue  # the steady window counts the processors' requests only
            try:
                state = self.clients.store.read().state
            except Exception:
                continue
            if state.leader is not None:
                self.leaders_by_term.setdefault(state.term, set()).add(state.leader)
            if state.current is not None:
                owned = state.current.tasks
                if sorted(owned) != sorted(self.fleet.tasks):
                    self.bad_models.append(f"model {state.current.version}: {len(owned)} tasks, "
                                           f"{len(set(owned))} distinct")

    def split_brain(self) -> list[str]:
        """What the samples saw wrong (empty: none)."""
        out = [f"term {t}: leaders {sorted(ls)}" for t, ls in self.leaders_by_term.items() if len(ls) > 1]
        out += self.bad_models
        if self.max_reported_leaders > 1:
            out.append(f"{self.max_reported_leaders} processors reported themselves leader at one sample")
        return out


@dataclass
class SizeResult:
    """Figures of one fleet size."""

    processors: int
    join_s: float
    window_s: float
    requests: dict[str, int]
    cpu_s: float
    kill_publish_s: float
    kill_adopt_s: float
    split_brain: list[str]
    label: str = ""

    def per_s(self, kind: str) -> float:
        return self.requests[kind] / self.window_s

    @property
    def total_per_s(self) -> float:
        return sum(self.requests.values()) / self.window_s


def run_size(storage: LoggedAzurite, work: Path, n: int, overrides: dict[str, str], window_s: float,
             label: str) -> SizeResult:
    """Start ``n`` processors, measure a steady window, kill one worker; the figures."""
    job = f"benchscale{label}{n}"
    config = {"azure.storage.connect": storage.connection_string, "job.name": job, "job.id": "1",
              "job.coordinator.factory": "azure", **overrides}
    pids = [f"p{i:02d}" for i in range(n)]
    clients = CoordinationClients.create(CoordinationConfig.from_config(config), storage.account)
    with ProcessorFleet(work / job, config, TASKS) as fleet:
        watch = Watch(fleet, clients, pids)
        watcher = threading.Thread(target=watch.run, daemon=True)
        started = time.monotonic()
        fleet.start(*pids)
        watcher.start()
        try:
            version = fleet.wait_converged(pids, 600)
            join_s = time.monotonic() - started
            time.sleep(3)  # let the adoption's clean-up requests pass
            watch.store_paused.set()
            os_pids = [p.pid for p in fleet.procs.values()]
            offset = storage.debug_log.stat().st_size
            cpu0, t0 = cpu_seconds(os_pids), time.time()
            time.sleep(window_s)
            cpu1, t1 = cpu_seconds(os_pids), time.time()
            watch.store_paused.clear()
            requests = count_requests(storage.debug_log, t0, t1, offset)
            leader = fleet.wait_for(lambda: fleet.leaders(pids), 60, "a leader")[0]
            victim = [p for p in pids if p != leader][-1]
            survivors = [p for p in pids if p != victim]
            killed = time.monotonic()
            fleet.signal(victim, signal.SIGKILL)
            fleet.wait_for(lambda: clients.store.read().state.version > version, 120, "a newer job model", 0.05)
            published = time.monotonic() - killed
            fleet.wait_converged(survivors, 120, newer_than=version)
            adopted = time.monotonic() - killed
            fleet.kill(victim)
        finally:
            watch.stop.set()
            watcher.join(10)
    result = SizeResult(n, join_s, t1 - t0, requests, cpu1 - cpu0, published, adopted, watch.split_brain(), label)
    print(f"  {label or 'defaults'} {n:2d} processors: joined in {join_s:5.1f} s; {result.total_per_s:6.1f} req/s "
          f"(table {result.per_s('table'):.1f}, lease {result.per_s('lease'):.1f}, blob {result.per_s('blob'):.1f}); "
          f"CPU {1000 * result.cpu_s / result.window_s / n:.0f} ms/s per processor; kill -9 of a worker: new model "
          f"published after {published:.1f} s, adopted by all after {adopted:.1f} s; split brain: "
          f"{'; '.join(result.split_brain) or 'none'} ({watch.samples} samples)", flush=True)
    return result


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("small", "full"), default="full",
                        help="full: 2,4,8,16 processors, 30 s windows, fast periods too; small: 2,4, 10 s, no fast")
    parser.add_argument("--sizes", default=None, help="fleet sizes, smallest first (the baseline)")
    parser.add_argument("--window", type=float, default=None, help="steady window, seconds")
    parser.add_argument("--no-fast", action="store_true", help="skip the fast-periods runs")
    args = parser.parse_args(argv)
    small = args.scale == "small"
    args.sizes = args.sizes or ("2,4" if small else "2,4,8,16")
    args.window = args.window or (10.0 if small else 30.0)
    args.no_fast = args.no_fast or small
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = os.getloadavg()[0]
    results: list[SizeResult] = []
    with tempfile.TemporaryDirectory(prefix="bench-coordscale-") as tmp:
        work = Path(tmp)
        storage = LoggedAzurite(work / "azurite")
        storage.debug_log = work / "azurite-requests.log"
        storage.start()
        try:
            for n in sizes:
                results.append(run_size(storage, work, n, {}, args.window, ""))
            if not args.no_fast:
                results.append(run_size(storage, work, sizes[0], FAST, args.window, "fast"))
                results.append(run_size(storage, work, sizes[-1], FAST, args.window, "fast"))
        finally:
            storage.stop()
    load_after = os.getloadavg()[0]
    base = results[0]
    rows: list[list[Any]] = []
    for r in results:
        per_proc = r.total_per_s / r.processors
        rows.append([
            f"{r.processors}" + (" (fast periods)" if r.label else ""),
            f"{r.join_s:.1f}",
            f"{r.total_per_s:.1f} ({_ratio(r.total_per_s, base.total_per_s)})",
            f"{r.per_s('table'):.1f} / {r.per_s('lease'):.1f} / {r.per_s('blob'):.1f}",
            f"{per_proc:.2f} ({_ratio(per_proc, base.total_per_s / base.processors)})",
            f"{1000 * r.cpu_s / r.window_s / r.processors:.0f}",
            f"{r.kill_publish_s:.1f} / {r.kill_adopt_s:.1f}",
            "yes" if r.kill_adopt_s <= GOAL_FAILOVER_S else "no",
            "; ".join(r.split_brain) or "none",
        ])
    headers = ["processors", "join s", "requests/s (x 2 processors)", "table / lease / blob per s",
               "requests/s per processor (x)", "CPU ms/s per processor", "kill -9 worker: published / adopted s",
               f"≤ {GOAL_FAILOVER_S:.0f} s", "split brain"]
    body = _report.table(headers, rows)
    body += (f"\n\n{TASKS} tasks; the baseline is the first row (2 processors, same run, same Azurite). Product "
             "defaults: heartbeat 2 s, liveness 10 s, liveness/leader checks and job-model polls every 1 s, lease "
             "15 s renewed every 4 s; fast periods: heartbeat 1 s, liveness 5 s, checks and polls every 0.5 s. "
             f"Steady window {args.window:.0f} s per size, counted in Azurite's request log; the 2 cores are "
             "shared with the processors' Azurite and other work.")
    print(f"machine load (1 min) {load_before:.1f} before, {load_after:.1f} after", flush=True)
    command = f"flock /work/heavy.lock python bench/coordinator_scale.py --scale {args.scale}" + \
        (f" --sizes {args.sizes}" if args.sizes != ("2,4" if small else "2,4,8,16") else "") + \
        (f" --window {args.window:g}" if args.window != (10.0 if small else 30.0) else "") + \
        (" --no-fast" if args.no_fast and not small else "")
    _report.record("coordinator_scale", "Azure coordinator: 2 to 16 processors", command, body, measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
