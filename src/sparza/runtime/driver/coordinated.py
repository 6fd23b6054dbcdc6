"""A processor under a job coordinator (``job.coordinator.factory: azure``): run only the tasks the
job model gives this processor, and switch at a batch boundary when the model changes.

On ``on_job_model_expired`` the running query stops after its current batch commits (the call
returns once it has); on ``on_new_job_model`` the processor claims its tasks' checkpoints under
the model's version (the fencing generation: a late write by the previous owner is refused) and
starts a new query, with its own Spark checkpoint dir per generation, that starts from the task
checkpoints. All queries of the processor share one SparkSession.
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
from typing import Any

from sparza.config import Config
from sparza.interrupts import StopOnSignals
from sparza.metrics import MetricsRegistry, attach_prometheus
from sparza.runtime.checkpoint import checkpoint_store_from_config
from sparza.runtime.driver.report import RunOutcome
from sparza.runtime.driver.runner import JobRunner, build_spark_session
from sparza.runtime.errors import CheckpointConflictError
from sparza.runtime.inputs import InputSystems
from sparza.runtime.jobconfig import JobConfig

__all__ = ["CoordinatedProcessor", "claim_tasks", "run_coordinated"]


def claim_tasks(config: Config, job_key: str, tasks: list[str], generation: int) -> None:
    """Stamp each task's checkpoint with ``generation`` (conditional write) before taking it over."""
    store = checkpoint_store_from_config(config, job_key)
    for task in tasks:
        for _ in range(5):
            current = store.read(task)
            if current is None or current.checkpoint.generation >= generation:
                break
            try:
                store.write(dataclasses.replace(current.checkpoint, generation=generation), current.etag)
                break
            except CheckpointConflictError:
                continue  # the previous owner committed meanwhile: read again and claim that


class CoordinatedProcessor:
    """The :class:`~sparza.coordination.JobCoordinatorListener` of one processor, and its run loop."""

    def __init__(self, config: Config, *, master: str | None, processor_id: str, once: bool,
                 spark: Any = None, status: Any = None, remote: str | None = None) -> None:
        self.config = config
        self.job = JobConfig.from_config(config)
        self.master = master
        self.remote = remote
        self.processor_id = processor_id
        self.once = once
        self.status = status
        self._spark = spark
        self._owns_spark = spark is None
        self._models: queue.Queue[Any] = queue.Queue()
        self._runner: JobRunner | None = None
        self._runner_lock = threading.Lock()
        self._stopped = threading.Event()
        self._done = threading.Event()
        self._stop_reason = ""
        self.batches = 0
        self.generations: list[int] = []
        self.metrics = MetricsRegistry()
        """The processor's metrics: its coordinator's and every run's (kept across job models)."""

    # --- listener (coordinator threads) ---------------------------------------------------------
    def on_new_job_model(self, job_model: Any) -> None:
        """Queue the model; the run loop starts this processor's tasks under its version."""
        self._models.put(job_model)

    def on_job_model_expired(self) -> None:
        """Stop the running query at a batch boundary; return once it stopped."""
        with self._runner_lock:
            runner = self._runner
        if runner is not None:
            self._stopped.clear()
            runner.request_stop("job model expired")
            self._stopped.wait(timeout=300)

    def on_coordinator_stop(self) -> None:
        """The coordinator is gone: stop processing."""
        self.request_stop("coordinator stopped")

    def request_stop(self, reason: str) -> None:
        """Stop after the running batch and exit the run loop."""
        self._stop_reason = self._stop_reason or reason
        self._done.set()
        with self._runner_lock:
            runner = self._runner
        if runner is not None:
            runner.request_stop(reason)
        self._models.put(None)

    # --- run loop (main thread) -------------------------------------------------------------------
    def run(self) -> RunOutcome:
        """Join the job, run each model's tasks until stopped, leave the job."""
        from sparza.coordination import job_coordinator_from_config

        all_tasks = [t.name for t in InputSystems(self.job).task_models()]
        coordinator = job_coordinator_from_config(self.processor_id, self.config, all_tasks, self,
                                                  metrics=self.metrics)
        if self._spark is None:
            self._spark = build_spark_session(self.job, self.master, f"sparza-{self.job.job_key}", self.remote)
        coordinator.start()
        detach = (attach_prometheus(self.metrics, self.job.prometheus_port, labels={"sparza_job": self.job.job_key})
                  if self.job.prometheus_port is not None else None)  # served between job models too
        try:
            while not self._done.is_set():
                model = self._models.get()
                if model is None:
                    break
                while not self._models.empty():  # only the newest model matters
                    newer = self._models.get()
                    if newer is None:
                        self._done.set()
                        break
                    model = newer
                if self._done.is_set():
                    break
                expired = self._run_model(model)
                # --once ends after this processor caught up on its share, not when a rebalance merely
                # stopped the query: then the next model's tasks are its share, still to process.
                if self.once and not expired:
                    break
            return RunOutcome(self._stop_reason or "stopped", self.batches, 0)
        finally:
            coordinator.stop()
            if detach is not None:
                detach()
            if self._owns_spark and self._spark is not None:
                self._spark.stop()

    def _run_model(self, model: Any) -> bool:
        """Run ``model``'s tasks of this processor; True when the model expired (a new one follows)."""
        tasks = model.tasks_of(self.processor_id)
        generation = int(model.version)
        self.generations.append(generation)
        claim_tasks(self.config, self.job.job_key, tasks, generation)
        if not tasks:
            self._stopped.set()
            return False
        runner = JobRunner(self.config, spark=self._spark, processor_id=self.processor_id, once=self.once,
                           tasks=tasks, generation=generation, install_signal_handlers=False, status=self.status,
                           metrics=self.metrics)
        with self._runner_lock:
            self._runner = runner
        try:
            runner.start()
            while runner.poll():
                pass
            outcome = runner.finish()
            self.batches += outcome.batches
            if outcome.reason != "job model expired":
                self._stop_reason = self._stop_reason or outcome.reason
                if outcome.reason in ("all inputs ended", "a task asked to shut down") or self.once:
                    self._done.set()
                return False
            self._stop_reason = ""
            return True
        finally:
            with self._runner_lock:
                self._runner = None
            runner.close()
            self._stopped.set()


def run_coordinated(config: Config, *, master: str | None = None, processor_id: str = "0", once: bool = False,
                    spark: Any = None, install_signal_handlers: bool = True, remote: str | None = None) -> RunOutcome:
    """Run this processor's share of the job under ``job.coordinator.factory`` until stopped."""
    processor = CoordinatedProcessor(config, master=master, processor_id=processor_id, once=once, spark=spark,
                                     remote=remote)
    signals = (StopOnSignals(processor.request_stop, lambda line: print(line, file=sys.stderr, flush=True)).install()
               if install_signal_handlers else None)
    try:
        return processor.run()
    finally:
        if signals is not None:
            signals.restore()
