"""Shared by the runtime benchmarks: peak memory of a process tree, Spark's per-batch durations, and
an optional py-spy profile of every process of the benchmark (the Python workers included).

- :class:`TreeMemory` samples the resident memory of a process and all its descendants (the JVM and
  Spark's Python workers are children of the benchmark process) from ``/proc`` and keeps the peak.
- :func:`spark_durations` sums the ``durationMs`` parts of a query's progress reports: what Spark
  spends per micro-batch outside the sink (offset planning, offset log, query planning, commit log).
- :class:`SpyProfile` runs ``py-spy record --subprocesses`` on this process when a py-spy binary is
  available (``SPARZA_PY_SPY`` or ``py-spy`` on PATH; it is a tool, not a dependency) and sums its
  samples by function (self time) and by the categories a benchmark names.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["SpyProfile", "TreeMemory", "loadavg", "spark_durations", "tree_cpu_seconds"]


def loadavg() -> str:
    """``/proc/loadavg``'s three averages, e.g. ``1.20 0.95 0.80``."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree_pids(root: int) -> list[int]:
    """``root`` and every descendant process."""
    kids = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and of its children it has reaped (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # fields[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17
    return sum(int(v) for v in fields[11:15]) / _TICK


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of a live process tree (each process with its reaped children)."""
    return sum(cpu_seconds(p) for p in tree_pids(root))


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _own_cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


class TreeMemory:
    """Peak resident memory (MiB) of a process tree, sampled every ``interval_s`` in a thread; also the CPU
    seconds its processes used (:attr:`cpu_s`: each process's own user + system time at its last sample,
    so a process that ends loses at most its last interval)."""

    def __init__(self, root: int | None = None, interval_s: float = 0.25) -> None:
        self.root = root or os.getpid()
        self.interval_s = interval_s
        self.peak_mib = 0.0
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def cpu_s(self) -> float:
        """CPU seconds of every process seen in the tree."""
        return sum(self._cpu.values())

    def sample(self) -> float:
        """The tree's resident memory now (MiB), also folded into the peak."""
        pids = tree_pids(self.root)
        mib = sum(_rss_kib(p) for p in pids) / 1024
        for pid in pids:
            cpu = _own_cpu(pid)
            if cpu is not None:
                self._cpu[pid] = max(cpu, self._cpu.get(pid, 0.0))
        self.peak_mib = max(self.peak_mib, mib)
        return mib

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> TreeMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


SPARK_PARTS = ("latestOffset", "getBatch", "walCommit", "queryPlanning", "addBatch", "commitOffsets",
               "triggerExecution")


def spark_durations(progress: Iterable[Any]) -> dict[str, float]:
    """Sum of each ``durationMs`` part over a query's progress reports (batches with data only), plus
    ``batches`` and ``other`` (trigger time outside the named parts)."""
    total: Counter[str] = Counter()
    batches = 0
    for p in progress:
        d = p["durationMs"] if isinstance(p, dict) else p.durationMs
        if not d.get("addBatch"):
            continue
        batches += 1
        for part in SPARK_PARTS:
            total[part] += float(d.get(part, 0) or 0)
    out = dict(total)
    out["batches"] = batches
    out["other"] = total["triggerExecution"] - sum(total[p] for p in SPARK_PARTS if p != "triggerExecution")
    return out


def timer_total_ms(value: Any) -> float | None:
    """A timer's total in ms from a batch result's metrics: ``["t", count, total_ms, max_ms, last_ms]``
    (:meth:`MetricsRegistry.changes`) or a snapshot's ``{"total_ms": ...}``; None for anything else."""
    if isinstance(value, list) and value and value[0] == "t":
        return float(value[2])
    if isinstance(value, dict) and "total_ms" in value:
        return float(value["total_ms"])
    return None


def _py_spy() -> str | None:
    given = os.environ.get("SPARZA_PY_SPY")
    if given:
        return given if Path(given).exists() else None
    beside = Path(sys.executable).parent / "py-spy"  # the venv's, when its bin/ is not on PATH
    return str(beside) if beside.exists() else shutil.which("py-spy")


class SpyProfile:
    """``py-spy record`` of this process and its descendants while the ``with`` block runs (if py-spy exists).

    ``categories`` maps a category name to a predicate on a sample's stack (outermost frame first); the
    first that matches wins. :meth:`summary` gives the top functions by self samples and the share
    of each category among the samples of Python workers that were running sparza's task code.
    """

    def __init__(self, out: Path, rate: int = 100) -> None:
        self.out = out
        self.rate = rate
        self.binary = _py_spy()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def available(self) -> bool:
        """True when a py-spy binary was found."""
        return self.binary is not None

    def __enter__(self) -> SpyProfile:
        if self.binary is not None:
            self._proc = subprocess.Popen(
                [self.binary, "record", "--pid", str(os.getpid()), "--subprocesses", "--format", "raw",
                 "--rate", str(self.rate), "--function", "--nonblocking", "--output", str(self.out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let it attach before the measured work starts
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(60)
            if self._proc.poll() is None:
                self._proc.kill()

    def stacks(self) -> list[tuple[list[str], int]]:
        """``(frames outermost first, samples)`` for every recorded stack."""
        if not self.out.exists():
            return []
        out = []
        for line in self.out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                out.append((stack.split(";"), int(count)))
        return out

    def summary(self, within: Callable[[list[str]], bool],
                categories: list[tuple[str, Callable[[list[str]], bool]]], top: int = 15) -> dict[str, Any]:
        """Top self-time functions and category shares over the stacks ``within`` accepts."""
        selfs: Counter[str] = Counter()
        cats: Counter[str] = Counter()
        total = 0
        for frames, n in self.stacks():
            if not within(frames):
                continue
            total += n
            leaf = frames[-1] if frames else "?"
            selfs[_short(leaf)] += n
            for name, pred in categories:
                if pred(frames):
                    cats[name] += n
                    break
            else:
                cats["other"] += n
        return {"samples": total, "top": selfs.most_common(top), "categories": cats}


def _short(frame: str) -> str:
    """``func (path/to/module.py:12)`` → ``func (module.py:12)``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path, _, line = where.rpartition(":")
    return f"{name} ({Path(path).name}:{line})" if path else name


def has(*needles: str) -> Callable[[list[str]], bool]:
    """A stack predicate: some frame contains one of ``needles``."""
    return lambda frames: any(n in f for f in frames for n in needles)
