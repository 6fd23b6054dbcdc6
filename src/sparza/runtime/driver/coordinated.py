"""A processor under a job coordinator (``job.coordinator.factory: azure``): run only the tasks the
job model gives this processor, and switch at a batch boundary when the model changes.

On ``on_job_model_expired`` the running query stops after its current batch commits (the call
returns once it has); a run whose writes were fenced off (a newer model moved its tasks while this
processor, judged dead, still ran) stops the same way and waits for the next model. On
``on_new_job_model`` the processor claims its tasks' checkpoints under the model's version (the
fencing generation: a late write by the previous owner is refused) and starts a new query, with its
own Spark checkpoint dir per generation, that starts from the task checkpoints. All queries of the
processor share one SparkSession.

An application's stages are jobs of their own (``job.name`` ``<app>-<stage>``), but its processors are
one membership: one coordinator per processor, named after the application, whose job model holds the
tasks of every stage (:class:`CoordinatedStages`). ``sparza run --stage`` joins that stage's own
membership instead; the processors of one application run all one way or all the other.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from sparza.config import Config
from sparza.coordination.assignment import group_task, split_group_task
from sparza.coordination.jobmodel import JobModel
from sparza.coordination.listener import MemberNotes
from sparza.coordination.settings import CoordinationConfig
from sparza.engine.checkpoint import checkpoint_store_from_config, stamp_generation
from sparza.engine.errors import CheckpointFencedError, TasksFencedError
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig
from sparza.errors import StorageUnavailableError
from sparza.interrupts import StopOnSignals
from sparza.metrics import MetricsRegistry, attach_prometheus
from sparza.runtime.driver.report import Discards, RunOutcome
from sparza.runtime.driver.runner import JobRunner, build_spark_session

# The member notes of an application's processors (MemberNotes): how far a --once run got, or a continuous run.
_ONCE = "once:"
_CONTINUOUS = "continuous"

__all__ = ["CoordinatedProcessor", "CoordinatedStages", "claim_tasks", "run_coordinated", "run_coordinated_stages"]


def claim_tasks(config: Config, job_key: str, tasks: list[str], generation: int) -> None:
    """Stamp each task's checkpoint with ``generation`` (conditional write) before taking it over; a task
    with no checkpoint yet gets one holding only the generation, so a previous owner's first commit is
    refused too. A newer generation already there means a newer model took the task: this one is expiring."""
    with contextlib.suppress(CheckpointFencedError):
        stamp_generation(checkpoint_store_from_config(config, job_key), tasks, generation)


class CoordinatedProcessor:
    """The :class:`~sparza.coordination.JobCoordinatorListener` of one processor, and its run loop."""

    def __init__(self, config: Config, *, master: str | None, processor_id: str, once: bool,
                 spark: Any = None, status: Any = None, remote: str | None = None,
                 start_lock: threading.Lock | None = None) -> None:
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
        self._stop_asked = False
        self._newest: JobModel | None = None
        self._ran: set[str] = set()  # tasks a run of this processor took to its end (--once: caught up or ended)
        self._stop_reason = ""
        # The stages of one application start their queries one at a time (see run_together).
        self._start_lock = start_lock or threading.Lock()
        self.batches = 0
        self.discards = Discards()
        self.generations: list[int] = []
        self.share_ended: Callable[[CoordinatedProcessor, int], None] | None = None
        """Set by :class:`CoordinatedStages`: told when every task this stage has under a model ended (the run
        loop then waits for the next model instead of ending)."""
        self.fenced = 0
        """How often this processor's run was fenced off and it stepped back for the next job model."""
        self.metrics = MetricsRegistry()
        """The processor's metrics: its coordinator's and every run's (kept across job models)."""

    # --- listener (coordinator threads) ---------------------------------------------------------
    def on_new_job_model(self, job_model: Any) -> None:
        """Queue the model; the run loop starts this processor's tasks under its version."""
        self._newest = job_model
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
        self._stop_asked = True
        self._done.set()
        with self._runner_lock:
            runner = self._runner
        if runner is not None:
            runner.request_stop(reason)
        self._models.put(None)

    def _note(self, line: str) -> None:
        if self.status is not None:
            self.status(line)
        else:
            print(line, file=sys.stderr, flush=True)

    # --- run loop (main thread) -------------------------------------------------------------------
    def task_names(self) -> list[str]:
        """Every task of the job (each processor of it passes the same list to its coordinator)."""
        return [t.name for t in InputSystems(self.job).task_models()]

    def run(self) -> RunOutcome:
        """Join the job, run each model's tasks until stopped, leave the job."""
        from sparza.coordination import job_coordinator_from_config

        coordinator = job_coordinator_from_config(self.processor_id, self.config, self.task_names(), self,
                                                  metrics=self.metrics)
        if self._spark is None:
            self._spark = build_spark_session(self.job, self.master, f"sparza-{self.job.job_key}", self.remote)
        coordinator.start()
        try:
            return self.run_models()
        finally:
            coordinator.stop()
            if self._owns_spark and self._spark is not None:
                self._spark.stop()

    def run_models(self) -> RunOutcome:
        """Run each model the listener hears of until stopped (the membership is the caller's: :meth:`run`, or
        the application's one coordinator in :class:`CoordinatedStages`)."""
        detach = (attach_prometheus(self.metrics, self.job.prometheus_port, labels={"sparza_job": self.job.job_key})
                  if self.job.prometheus_port is not None else None)  # served between job models too
        if self.once and not self._stop_asked:
            self._done.clear()  # again (see unrun_share): the share a newer model gave this processor
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
            return RunOutcome(self._stop_reason or "stopped", self.batches, 0, discards=self.discards)
        finally:
            if detach is not None:
                detach()

    @property
    def stop_asked(self) -> bool:
        """True once :meth:`request_stop` was called (a signal, the coordinator stopping, another stage failing)."""
        return self._stop_asked

    def unrun_share(self) -> list[str]:
        """Under ``--once``, after :meth:`run_models` returned: this processor's tasks in a job model that came
        since (a peer died and its tasks moved here) that no run of it took to its end; :meth:`run_models` then
        runs that model."""
        newest = self._newest
        if newest is None or self._stop_asked or self._models.empty():
            return []
        return [t for t in newest.tasks_of(self.processor_id) if t not in self._ran]

    def _run_model(self, model: Any) -> bool:
        """Run ``model``'s tasks of this processor; True when the model expired (a new one follows)."""
        tasks = model.tasks_of(self.processor_id)
        generation = int(model.version)
        self.generations.append(generation)
        claim_tasks(self.config, self.job.job_key, tasks, generation)
        if not tasks:
            self._stopped.set()
            if self.share_ended is not None and not self.once:
                self.share_ended(self, generation)  # nothing of this stage here: its share has ended too
                return True
            return False
        runner = JobRunner(self.config, spark=self._spark, processor_id=self.processor_id, once=self.once,
                           tasks=tasks, generation=generation, install_signal_handlers=False, status=self.status,
                           metrics=self.metrics)
        with self._runner_lock:
            self._runner = runner
        try:
            with self._start_lock:
                runner.start()
                runner.wait_initialized()
            while runner.poll():
                pass
            try:
                outcome = runner.finish()
            except TasksFencedError as fenced:
                # Judged dead while still running (a pause, a slow host): a newer model gave our tasks away and
                # their new owners fenced our writes. Nothing of ours was committed past the fence; step back and
                # wait for the next model, which gives this processor its share again once it is seen alive.
                self._note(f"sparza: {self.job.job_key}: processor {self.processor_id} was fenced off under job "
                           f"model {generation} ({fenced}); waiting for the next job model")
                self.fenced += 1
                self._stop_reason = ""
                return True
            self.batches += outcome.batches
            self.discards.add(outcome.discards)
            if outcome.reason != "job model expired":
                self._ran.update(tasks)
            if outcome.reason == "all inputs ended" and self.share_ended is not None and not self.once:
                # A stage of an application: its membership goes on (and a newer model may give this stage tasks
                # not yet ended); the application leaves once every stage's share of the same model ended.
                self.share_ended(self, generation)
                return True
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


class CoordinatedStages:
    """The stages of an application in one processor under the coordinator: one membership (one coordinator,
    heartbeat and lease set, named after the application's ``job.name``) whose job model holds every stage's
    tasks (``<stage job key>/<task>``), and a :class:`CoordinatedProcessor` per stage on one SparkSession that
    runs its stage's share of each model under the model's version as fencing generation.

    ``run`` runs the stages side by side (a failed stage stops the others), or with ``once`` one after the
    other, writers first, so each stage sees what its upstream stage wrote in this processor.
    """

    def __init__(self, configs: list[Config], *, spark: Any, processor_id: str, once: bool,
                 status: Any = None, membership: Config | None = None) -> None:
        start_lock = threading.Lock()
        self.processors = [CoordinatedProcessor(c, master=None, processor_id=processor_id, once=once, spark=spark,
                                                status=status, start_lock=start_lock) for c in configs]
        self.processor_id = processor_id
        self.once = once
        self.membership = membership if membership is not None else configs[0]
        """The config the coordinator joins with: the application's (its ``job.name`` names the resources)."""
        self.metrics = MetricsRegistry()
        """The membership's coordinator metrics (group ``coordination``)."""
        self._stopping = threading.Event()
        self._ended: dict[str, int] = {}  # stage job key -> the model version under which its share here ended
        self._ended_lock = threading.Lock()
        self._listener = _StagesListener({p.job.job_key: p for p in self.processors})
        for processor in self.processors:
            processor.share_ended = self._share_ended

    def _share_ended(self, stage: CoordinatedProcessor, version: int) -> None:
        """Leave once every stage's share of the newest model ended (its tasks move to processors still here)."""
        with self._ended_lock:
            self._ended[stage.job.job_key] = version
            done = all(self._ended.get(p.job.job_key) == self._listener.version for p in self.processors)
        if done:
            for processor in self.processors:
                processor.request_stop("all inputs ended")

    def _halted(self) -> bool:
        """Asked to stop, or a stage was (its coordinator stopped, say): an ordered run goes no further."""
        return self._stopping.is_set() or any(p.stop_asked for p in self.processors)

    def request_stop(self, reason: str) -> None:
        """Stop every stage after its running batch (thread- and signal-safe)."""
        self._stopping.set()
        for processor in self.processors:
            processor.request_stop(reason)

    def run(self) -> RunOutcome:
        """Join the application's membership, run every stage's share until stopped, leave; raises the first
        stage's failure once all have stopped."""
        from sparza.coordination import job_coordinator_from_config

        listener = self._listener
        coordinator = job_coordinator_from_config(self.processor_id, self.membership, listener.task_names(),
                                                  listener, metrics=self.metrics)
        notes = coordinator if isinstance(coordinator, MemberNotes) else None
        if notes is not None and self.once:
            notes.write_note(f"{_ONCE}0")  # before joining: a note left by an earlier run must not speak for this one
        coordinator.start()
        try:
            if self.once:
                outcomes = self._run_in_order(notes)
            else:
                if notes is not None:
                    _write_note(notes, _CONTINUOUS)  # peers running --once do not wait for this processor
                outcomes = self._run_together()
        finally:
            coordinator.stop()
        discards = Discards()
        for outcome in outcomes:
            discards.add(outcome.discards)
        return RunOutcome("; ".join(sorted({o.reason for o in outcomes})) or "stopped",
                          sum(o.batches for o in outcomes), 0, discards=discards)

    def _run_in_order(self, notes: MemberNotes | None) -> list[RunOutcome]:
        """``--once``: the stages one after the other, writers first. A stage starts only once every member of the
        membership finished the stages before it: its end is frozen when it starts, so a stage started while a
        peer still wrote its input would end "caught up" short of that input (and leave it unprocessed when its
        processor left after the peer's last look at the job model). A processor through every stage leaves once
        all its peers are through too, and goes back to a stage whose tasks a newer model gave it meanwhile."""
        outcomes: list[RunOutcome] = []
        index, noted = 0, 0  # the first note was written before joining
        while not self._halted():
            if notes is not None and index != noted:
                _write_note(notes, f"{_ONCE}{index}")
                noted = index
            if notes is not None and index:
                self._wait_for_stages_before(notes, index)
                if self._halted():
                    break
            # A peer that died mid-run left its tasks to the others, maybe of a stage this processor is through:
            # go back and run them (the stages after it again too, as they read what it writes).
            back = next((j for j in range(index) if self.processors[j].unrun_share()), None)
            if back is not None:
                stage = self.processors[back]
                stage._note(f"sparza: {stage.job.job_key}: processor {self.processor_id} runs this stage again for "
                            f"task(s) {', '.join(stage.unrun_share())} a newer job model gave it (--once)")
                index = back
                continue
            if index == len(self.processors):
                break
            outcomes.append(self.processors[index].run_models())
            index += 1
        return outcomes

    def _wait_for_stages_before(self, notes: MemberNotes, index: int) -> None:
        """Wait until every other member of the newest job model noted that it finished the stages before stage
        ``index`` (a ``--once`` note of ``index`` or more, or a continuous run); ``index`` past the last stage: that
        they are through every stage, so a processor stays to take over the tasks of a peer that dies. A member that
        left is out of the next model; one with no note yet (it just joined) is waited for up to a liveness
        timeout, then taken for a processor that keeps no notes."""
        settings = CoordinationConfig.from_config(self.membership)
        poll_s = settings.jobmodel_poll_interval_ms / 1000
        unnoted_since: dict[str, float] = {}
        told: set[str] = set()
        while not self._halted():
            peers = [p for p in self._listener.members if p != self.processor_id]
            try:
                found = notes.read_notes(peers)
            except StorageUnavailableError:
                time.sleep(poll_s)  # the coordinator notices an outage itself; ask again at the next poll
                continue
            now = time.monotonic()
            behind = []
            for pid in peers:
                note = found.get(pid)
                if note is None:
                    if now - unnoted_since.setdefault(pid, now) < settings.liveness_timeout_ms / 1000:
                        behind.append(pid)
                elif note.startswith(_ONCE) and int(note[len(_ONCE):]) < index:
                    behind.append(pid)
            if not behind:
                return
            if set(behind) - told:
                told.update(behind)
                who = ", ".join(sorted(behind))
                if index < len(self.processors):
                    self.processors[index]._note(
                        f"sparza: {self.processors[index].job.job_key}: waits for processor(s) {who} to finish the "
                        f"stages before it (--once: this stage reads what they write)")
                else:
                    self.processors[-1]._note(
                        f"sparza: processor {self.processor_id} is through every stage and waits for processor(s) "
                        f"{who} to be through too (--once: it takes over their tasks should they die)")
            time.sleep(poll_s)

    def _run_together(self) -> list[RunOutcome]:
        results: list[RunOutcome | BaseException | None] = [None] * len(self.processors)

        def work(index: int, processor: CoordinatedProcessor) -> None:
            try:
                results[index] = processor.run_models()
            except BaseException as exc:
                results[index] = exc
                for other in self.processors:
                    if other is not processor:
                        other.request_stop("another stage failed")

        threads = [threading.Thread(target=work, args=(i, p), name=f"sparza-stage-{p.job.job_key}", daemon=True)
                   for i, p in enumerate(self.processors)]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.25)  # short waits: the main thread stays free to handle a signal
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise failure
        return [r for r in results if isinstance(r, RunOutcome)]


def _write_note(notes: MemberNotes, text: str) -> None:
    """A note that cannot be written now only delays peers (they wait on the older one until this processor's next
    note or its leaving the job model), so an outage here does not fail the run."""
    with contextlib.suppress(StorageUnavailableError):
        notes.write_note(text)


class _StagesListener:
    """The one membership's listener: each stage hears of its own tasks of every model, all at once."""

    def __init__(self, stages: dict[str, CoordinatedProcessor]) -> None:
        self._stages = stages
        self.version = 0
        """The newest model's version passed on."""
        self.members: list[str] = []
        """The processors of the newest model."""

    def task_names(self) -> list[str]:
        """Every task of every stage, named ``<stage job key>/<task>``."""
        return [group_task(key, t) for key, stage in self._stages.items() for t in stage.task_names()]

    def on_new_job_model(self, job_model: JobModel) -> None:
        """Give each stage its part of the model (same version: the fencing generation of all of them)."""
        self.version = int(job_model.version)
        self.members = job_model.processors
        for key, stage in self._stages.items():
            assignments = {pid: [split_group_task(t)[1] for t in tasks if split_group_task(t)[0] == key]
                           for pid, tasks in job_model.assignments.items()}
            stage.on_new_job_model(JobModel(job_model.version, assignments))

    def on_job_model_expired(self) -> None:
        """Stop every stage at a batch boundary, side by side; return once all stopped."""
        threads = [threading.Thread(target=stage.on_job_model_expired, name=f"sparza-expire-{key}", daemon=True)
                   for key, stage in self._stages.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def on_coordinator_stop(self) -> None:
        """The membership ended: every stage stops."""
        for stage in self._stages.values():
            stage.on_coordinator_stop()


def run_coordinated(config: Config, *, master: str | None = None, processor_id: str = "0", once: bool = False,
                    spark: Any = None, install_signal_handlers: bool = True, remote: str | None = None) -> RunOutcome:
    """Run this processor's share of the job under ``job.coordinator.factory`` until stopped."""
    return _until_stopped(CoordinatedProcessor(config, master=master, processor_id=processor_id, once=once,
                                               spark=spark, remote=remote), install_signal_handlers)


def run_coordinated_stages(configs: list[Config], *, spark: Any, processor_id: str = "0", once: bool = False,
                           install_signal_handlers: bool = True, membership: Config | None = None) -> RunOutcome:
    """Run this processor's share of every stage of an application (``configs``: the planned stages, writers
    first) under ``job.coordinator.factory`` until stopped, as one member of ``membership`` (the application's
    config; default: the first stage's)."""
    return _until_stopped(CoordinatedStages(configs, spark=spark, processor_id=processor_id, once=once,
                                            membership=membership), install_signal_handlers)


def _until_stopped(processor: CoordinatedProcessor | CoordinatedStages, install_signal_handlers: bool) -> RunOutcome:
    signals = (StopOnSignals(processor.request_stop, lambda line: print(line, file=sys.stderr, flush=True)).install()
               if install_signal_handlers else None)
    try:
        return processor.run()
    finally:
        if signals is not None:
            signals.restore()
