"""ProcessorFleet: run processors of one job as separate OS processes (for tests and benchmarks).

Each processor is ``python -m sparza.coordination._processor_main`` writing its state to a JSON
report; the fleet starts, signals and kills them and checks what they report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["ProcessorFleet"]

_T = TypeVar("_T")


class ProcessorFleet:
    """Processors of one job, each its own OS process, all killed on :meth:`close`."""

    def __init__(self, work_dir: Path, config: Mapping[str, Any], tasks: int, *, checkpoints: bool = False) -> None:
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.work_dir / "job.json"
        self.config_path.write_text(json.dumps(dict(config)))
        self.tasks = [f"Partition {i}" for i in range(tasks)]
        self.checkpoints = checkpoints
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def report_path(self, pid: str) -> Path:
        """Where processor ``pid`` reports."""
        return self.work_dir / f"{pid}.json"

    def start(self, *pids: str) -> None:
        """Start processors (each a new process group, so signals reach only it)."""
        for pid in pids:
            self.report_path(pid).unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "sparza.coordination._processor_main", "--config", str(self.config_path),
                   "--processor-id", pid, "--tasks", str(len(self.tasks)), "--report", str(self.report_path(pid))]
            if self.checkpoints:
                cmd.append("--checkpoints")
            log = open(self.work_dir / f"{pid}.log", "ab")  # noqa: SIM115 - owned by the child
            self.procs[pid] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            log.close()

    def report(self, pid: str) -> dict[str, Any] | None:
        """The last report of ``pid`` (None before its first)."""
        try:
            return json.loads(self.report_path(pid).read_text())
        except (OSError, ValueError):
            return None

    def alive(self) -> list[str]:
        """Processors whose process still runs."""
        return [pid for pid, p in self.procs.items() if p.poll() is None]

    def signal(self, pid: str, sig: int) -> None:
        """Send ``sig`` to ``pid``'s process."""
        os.kill(self.procs[pid].pid, sig)

    def kill(self, pid: str) -> None:
        """``kill -9`` and reap."""
        proc = self.procs.pop(pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def terminate(self, pid: str, timeout_s: float = 20.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        proc = self.procs.pop(pid)
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def leaders(self, pids: Iterable[str] | None = None) -> list[str]:
        """Processors reporting themselves leader."""
        out = []
        for pid in pids if pids is not None else self.alive():
            rep = self.report(pid)
            if rep and rep.get("leader"):
                out.append(pid)
        return out

    def converged(self, pids: Iterable[str]) -> int | None:
        """The version all ``pids`` adopted, when they agree, it covers exactly them, and each task is owned
        exactly once; else None."""
        expected = set(pids)
        versions, owned = set(), []
        model = None
        for pid in expected:
            rep = self.report(pid)
            if not rep or not rep.get("active") or not rep.get("model"):
                return None
            versions.add(rep["version"])
            owned.extend(rep["tasks"])
            model = rep["model"]
        if len(versions) != 1 or model is None or set(model["assignments"]) != expected:
            return None
        if sorted(owned) != sorted(self.tasks):
            return None
        return versions.pop()

    def wait_for(self, what: Callable[[], _T], timeout_s: float, message: str, poll_s: float = 0.2) -> _T:
        """Poll ``what`` until truthy; AssertionError naming ``message`` (and the reports) after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = what()
            if value:
                return value
            if time.monotonic() > deadline:
                states = {pid: self.report(pid) for pid in self.procs}
                brief = {pid: (r or {}).get("version") for pid, r in states.items()}
                raise AssertionError(f"timed out after {timeout_s}s waiting for {message}; versions {brief}")
            time.sleep(poll_s)

    def wait_converged(self, pids: Iterable[str], timeout_s: float, newer_than: int = 0) -> int:
        """Wait until :meth:`converged` gives a version above ``newer_than``; returns it."""
        expected = list(pids)

        def check() -> int | None:
            v = self.converged(expected)
            return v if v is not None and v > newer_than else None

        version = self.wait_for(check, timeout_s, f"{sorted(expected)} to converge above version {newer_than}")
        assert version is not None
        return version

    def close(self) -> None:
        """SIGCONT and SIGKILL every processor still running, and reap it."""
        for pid in list(self.procs):
            proc = self.procs.pop(pid)
            try:
                os.kill(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            proc.kill()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> ProcessorFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
