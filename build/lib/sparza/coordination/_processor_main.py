"""A runnable processor for multi-process tests and benchmarks: one coordinator, reporting to a file.

``python -m sparza.coordination._processor_main --config job.yaml --processor-id p1 --tasks 8
--report p1.json [--checkpoints]`` joins the job and rewrites ``p1.json`` (atomically) whenever its
model changes. With ``--checkpoints`` it commits a small fenced checkpoint blob per owned task
every few hundred ms, as the task runtime would. Signals:

* SIGTERM: graceful stop (the coordinator leaves; peers rebalance at once);
* SIGUSR1: freeze the current (generation, tasks) as a batch "in flight";
* SIGCONT: commit the frozen batch now, as a processor resumed after a pause would, recording
  whether the fence check and the fenced write refused it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sparza.config import Config
from sparza.coordination.coordinator import AzureJobCoordinator
from sparza.coordination.errors import FencedError
from sparza.coordination.fencing import GenerationFence, claim, write_fenced
from sparza.coordination.jobmodel import JobModel

__all__ = ["main"]

CHECKPOINT_PREFIX = "checkpoints/"


class _Reporter:
    """Processor state → JSON file, written whole and renamed so readers never see half a file."""

    def __init__(self, path: Path, processor_id: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.data: dict[str, Any] = {"processor_id": processor_id, "os_pid": os.getpid(), "version": 0,
                                     "tasks": [], "active": False, "leader": False, "events": [],
                                     "checkpoints_ok": 0, "checkpoints_fenced": 0, "stale": None,
                                     "frozen": None, "stopped": False}

    def update(self, event: str | None = None, **changes: Any) -> None:
        with self.lock:
            self.data.update(changes)
            if event:
                self.data["events"] = (self.data["events"] + [[round(time.time(), 3), event]])[-40:]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            tmp.replace(self.path)


class _Processor:
    """Listener plus the checkpoint committer."""

    def __init__(self, args: argparse.Namespace, config: Config) -> None:
        self.pid = args.processor_id
        self.config = config
        self.report = _Reporter(Path(args.report), self.pid)
        self.model: JobModel | None = None
        self.active = False
        self.lock = threading.Lock()
        tasks = [f"Partition {i}" for i in range(args.tasks)]
        self.coordinator = AzureJobCoordinator(self.pid, config, tasks, self)
        self.checkpoints = args.checkpoints
        self.frozen: tuple[int, list[str]] | None = None
        self.stop_event = threading.Event()

    # listener
    def on_new_job_model(self, job_model: JobModel) -> None:
        mine = job_model.tasks_of(self.pid)
        if self.checkpoints:
            fence_blobs = [self._blob(t) for t in mine]
            for blob in fence_blobs:  # take the tasks over before "restoring" them
                try:
                    claim(blob, job_model.version, self.pid)
                except FencedError:
                    pass
        with self.lock:
            self.model = job_model
            self.active = True
        self.report.update(f"adopted {job_model.version}", version=job_model.version, tasks=mine, active=True,
                           leader=self.coordinator.is_leader(), model=job_model.to_dict())

    def on_job_model_expired(self) -> None:
        with self.lock:
            self.active = False
        self.report.update("expired", active=False)

    def on_coordinator_stop(self) -> None:
        self.report.update("stopped", stopped=True, active=False)

    def _blob(self, task: str) -> Any:
        return self.coordinator.blob(CHECKPOINT_PREFIX + task.replace(" ", "-"))

    def commit_loop(self) -> None:
        fence: GenerationFence | None = None
        counter = 0
        while not self.stop_event.wait(0.3):
            with self.lock:
                model, active = self.model, self.active
            if model is None or not active:
                continue
            if fence is None or fence.generation != model.version:
                fence = GenerationFence(self.config, self.pid, model.version)
            counter += 1
            for task in model.tasks_of(self.pid):
                try:
                    fence.write(self._blob(task), f"{self.pid}:{model.version}:{counter}".encode(), task)
                    self.report.data["checkpoints_ok"] += 1
                except FencedError:
                    self.report.data["checkpoints_fenced"] += 1
                except Exception as exc:  # storage outage: the next batch retries
                    logging.getLogger(__name__).debug("commit failed: %s", exc)
            self.report.update(None, leader=self.coordinator.is_leader())

    # signals
    def freeze(self, *_: Any) -> None:
        with self.lock:
            model = self.model
        if model is not None:
            self.frozen = (model.version, model.tasks_of(self.pid))
            self.report.update("frozen", frozen=list(self.frozen))

    def commit_frozen(self, *_: Any) -> None:
        if self.frozen is None:
            return
        generation, tasks = self.frozen
        self.frozen = None
        fence = GenerationFence(self.config, self.pid, generation)
        results = []
        for task in tasks:
            try:
                fence.check(task)
                checked = "passed"
            except FencedError:
                checked = "fenced"
            try:  # write even if the check fenced us, to prove the storage condition refuses it too
                write_fenced(self._blob(task), f"{self.pid}:{generation}:stale".encode(), generation, self.pid)
                written = "written"
            except FencedError:
                written = "refused"
            results.append({"task": task, "generation": generation, "check": checked, "write": written})
        self.report.update("stale commit", stale=results)


def main(argv: list[str] | None = None) -> int:
    """Run one processor until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--processor-id", required=True)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--report", required=True)
    parser.add_argument("--checkpoints", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s: %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    proc = _Processor(args, Config.load(args.config))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Handlers only raise flags: the work (locks, storage calls) runs in the loop below, never inside a
    # handler that may have interrupted this thread while it held one of those locks.
    freeze_requested, commit_requested = threading.Event(), threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: freeze_requested.set())
    signal.signal(signal.SIGCONT, lambda *_: commit_requested.set())
    proc.report.update("starting")
    proc.coordinator.start()
    if proc.checkpoints:
        threading.Thread(target=proc.commit_loop, daemon=True, name="commit").start()
    leader = False
    while not stop.is_set():
        time.sleep(0.1)  # signal handlers run in this thread, between sleeps
        if freeze_requested.is_set():
            freeze_requested.clear()
            proc.freeze()
        if commit_requested.is_set():
            commit_requested.clear()
            proc.commit_frozen()
        if proc.coordinator.is_leader() != leader:
            leader = not leader
            proc.report.update("leader" if leader else "not leader", leader=leader)
    proc.stop_event.set()
    proc.coordinator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
