"""The driver's side of a drain (:mod:`sparza.engine.drain`): request one, watch for one, tell when it is done."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable

from sparza.config import Config
from sparza.engine.checkpoint import checkpoint_store_from_config
from sparza.engine.drain import (
    DRAIN_MONITOR_ENABLED,
    DRAIN_MONITOR_INTERVAL_MS,
    DrainRequest,
    check_standalone,
    clear_drain,
    read_drain,
    source_ssps,
    write_drain,
)
from sparza.engine.errors import RuntimeStateError
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig
from sparza.metrics import MetricsRegistry

__all__ = ["DrainMonitor", "drain_completed", "drain_ends", "finish_drain", "request_drain"]

_log = logging.getLogger(__name__)


def drain_ends(job: JobConfig) -> tuple[dict[str, str], list[str]]:
    """Per source SSP of the job, the upcoming offset now (where a drain requested now ends it), and the job's
    tasks."""
    inputs = InputSystems(job)
    try:
        positions = inputs.positions()
        tasks = inputs.task_models()
        ssps = sorted({ssp for task in tasks for ssp in task.ssps})
        return {str(ssp): positions[ssp].upcoming for ssp in source_ssps(job, ssps)}, [t.name for t in tasks]
    finally:
        inputs.close()


def request_drain(configs: list[Config], *, now_ms: int | None = None) -> tuple[DrainRequest, bool]:
    """Request one drain of the jobs ``configs`` (a job, or the stages of one application): the offsets their
    source partitions have now, and their tasks. A pending request is kept as it is (its offsets were observed
    when it was made). Returns the request and whether it is new."""
    if not configs:
        raise ValueError("request_drain needs at least one job config")
    for cfg in configs:
        check_standalone(cfg)
    pending = read_drain(configs[0])
    if pending is not None:
        return pending, False
    ends: dict[str, str] = {}
    jobs: dict[str, list[str]] = {}
    for cfg in configs:
        job = JobConfig.from_config(cfg)
        job_ends, tasks = drain_ends(job)
        ends.update(job_ends)
        jobs[job.job_key] = tasks
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    request = DrainRequest(uuid.uuid4().hex, stamp, ends, jobs)
    write_drain(configs[0], request)
    return request, True


def drain_completed(config: Config, request: DrainRequest, jobs: Iterable[str] | None = None) -> bool:
    """True when every task of every job of ``request`` (or of ``jobs`` among them) committed its completion (or
    ended); ``config``: a config of one of those jobs (the others' checkpoints are found beside its own)."""
    for job_key, tasks in request.jobs.items():
        if jobs is not None and job_key not in jobs:
            continue
        checkpoints = checkpoint_store_from_config(config, job_key).read_all()
        for task in tasks:
            cp = checkpoints.get(task)
            if cp is None or not (cp.ended or (cp.drain or {}).get("completed") == request.id):
                return False
    return True


def finish_drain(config: Config) -> DrainRequest | None:
    """Remove the pending drain request once :func:`drain_completed`; returns the request removed, else None."""
    request = read_drain(config)
    if request is None or not drain_completed(config, request):
        return None
    return request if clear_drain(config, request.id) else None


class DrainMonitor:
    """Samza's DrainMonitor: the job's drain request, read at most every ``job.drain-monitor.poll.interval.ms``
    (the first call reads at once). A read that fails (storage unreachable) keeps what was read last."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.monotonic,
                 metrics: MetricsRegistry | None = None) -> None:
        self.config = config
        self.metrics = metrics
        """Where the reads' storage requests are counted (the driver's registry), or None."""
        self.enabled = DRAIN_MONITOR_ENABLED.get(config)
        self.interval_s = DRAIN_MONITOR_INTERVAL_MS.get(config) / 1000.0
        self._clock = clock
        self._next = float("-inf")
        self.current: DrainRequest | None = None
        """The request read last (None: none pending)."""
        self.reads = 0
        """How many times the request was read (a caller can tell a fresh read from the cached one)."""

    def poll(self, *, force: bool = False) -> DrainRequest | None:
        """The pending request, read again when the interval has passed (or ``force``)."""
        if not self.enabled:
            return None
        now = self._clock()
        if not force and now < self._next:
            return self.current
        self._next = now + self.interval_s
        try:
            self.current = read_drain(self.config, metrics=self.metrics)
            self.reads += 1
        except RuntimeStateError:
            raise
        except Exception as exc:  # storage trouble: judged by the run's storage watch, not here
            _log.warning("reading the drain request failed (%s); trying again in %.0f s", exc, self.interval_s)
        return self.current
