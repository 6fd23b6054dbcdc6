"""The driver's side of a drain (:mod:`sparza.runtime.drain`): request one, watch for one, tell when it is done."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable

from sparza.config import Config
from sparza.runtime.checkpoint import CheckpointStore
from sparza.runtime.drain import DrainRequest, check_standalone, read_drain, source_ssps, write_drain
from sparza.runtime.errors import RuntimeStateError
from sparza.runtime.inputs import InputSystems
from sparza.runtime.jobconfig import JobConfig

__all__ = ["DrainMonitor", "drain_completed", "drain_ends", "request_drain"]

_log = logging.getLogger(__name__)


def drain_ends(job: JobConfig) -> dict[str, str]:
    """Per source SSP of the job, the upcoming offset now: where a drain requested now ends it."""
    inputs = InputSystems(job)
    try:
        positions = inputs.positions()
        ssps = sorted({ssp for task in inputs.task_models() for ssp in task.ssps})
        return {str(ssp): positions[ssp].upcoming for ssp in source_ssps(job, ssps)}
    finally:
        inputs.close()


def request_drain(configs: list[Config], *, now_ms: int | None = None) -> tuple[str, list[str]]:
    """Request a drain of the jobs ``configs`` (a job, or an application's stages: one drain for all): each job
    without a pending request gets one with the offsets its source partitions have now. A pending request is
    kept (its offsets were observed when it was made), and its id becomes the id of the others, so every stage
    counts the same drain messages. Returns the id and the jobs that got a new request."""
    jobs = [JobConfig.from_config(cfg) for cfg in configs]
    for job in jobs:
        check_standalone(job.config)
    pending = {job.job_key: read_drain(job.config, job.job_key) for job in jobs}
    ids = sorted({r.id for r in pending.values() if r is not None})
    if len(ids) > 1:
        raise RuntimeStateError(f"the stages have different pending drains ({', '.join(ids)}); cancel them with "
                                "sparza drain --cancel and request the drain again")
    drain_id = ids[0] if ids else uuid.uuid4().hex
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    written = []
    for job in jobs:
        if pending[job.job_key] is None:
            write_drain(job.config, job.job_key, DrainRequest(drain_id, stamp, drain_ends(job)))
            written.append(job.job_key)
    return drain_id, written


def drain_completed(store: CheckpointStore, tasks: Iterable[str], drain_id: str) -> bool:
    """True when every task of ``tasks`` committed the completion of drain ``drain_id`` (or ended)."""
    checkpoints = store.read_all()
    for task in tasks:
        cp = checkpoints.get(task)
        if cp is None or not (cp.ended or (cp.drain or {}).get("completed") == drain_id):
            return False
    return True


class DrainMonitor:
    """Samza's DrainMonitor: the job's drain request, read at most every ``job.drain-monitor.poll.interval.ms``
    (the first call reads at once). A read that fails (storage unreachable) keeps what was read last."""

    def __init__(self, config: Config, job_key: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.job_key = job_key
        self.enabled = config.get_bool("job.drain-monitor.enabled", True)
        self.interval_s = config.get_int("job.drain-monitor.poll.interval.ms", 5000, min_value=0) / 1000.0
        self._clock = clock
        self._next = float("-inf")
        self.current: DrainRequest | None = None
        """The request read last (None: none pending)."""

    def poll(self, *, force: bool = False) -> DrainRequest | None:
        """The pending request, read again when the interval has passed (or ``force``)."""
        if not self.enabled:
            return None
        now = self._clock()
        if not force and now < self._next:
            return self.current
        self._next = now + self.interval_s
        try:
            self.current = read_drain(self.config, self.job_key)
        except RuntimeStateError:
            raise
        except Exception as exc:  # storage trouble: judged by the run's storage watch, not here
            _log.warning("%s: reading the drain request failed (%s); trying again in %.0f s", self.job_key, exc,
                         self.interval_s)
        return self.current
