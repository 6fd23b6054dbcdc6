"""Hold a stopped job still while an operation rewrites its checkpoints.

A rewind or a savepoint must see (and leave) the task checkpoints as no running processor would change them. A
standalone job runs only while a processor holds its claim (:mod:`sparza.coordination.jobclaim`), so an operation
takes that claim itself: it is refused, naming the holder, while the job runs, and no processor can start until
the operation released it. Jobs under the azure coordinator have no such claim: an operation on one is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from sparza.config import Config
from sparza.config.registry import DefaultKey, find_key
from sparza.coordination.jobclaim import KEY_RENEW, KEY_TIMEOUT, ClaimHeldError, JobClaim
from sparza.engine.checkpoint import CheckpointStore, SupportsJobClaim, checkpoint_store_from_config
from sparza.engine.jobconfig import JobConfig
from sparza.errors import ConfigError, SparzaError

__all__ = ["OPERATOR_PROCESSOR", "JobRunningError", "StoppedJob", "stopped_job"]

OPERATOR_PROCESSOR = "sparza-ops"
"""The processor id an operation holds the claim under (what a refused ``sparza run`` names as the holder)."""


class JobRunningError(SparzaError):
    """A processor holds the job's claim: the operation needs the job stopped."""


@dataclass(frozen=True)
class StoppedJob:
    """A job held stopped: its runtime config and its checkpoint store."""

    job: JobConfig
    checkpoints: CheckpointStore


def _int_key(job: JobConfig, name: str) -> int:
    key = find_key(name)
    assert isinstance(key, DefaultKey), f"{name} is declared with a default by sparza.coordination.jobclaim"
    return int(key.get(job.config))


@contextlib.contextmanager
def stopped_job(config: Config) -> Iterator[StoppedJob]:
    """Take the job's standalone claim for the duration of the block (raises :class:`JobRunningError`, naming
    the processor, while one runs it)."""
    job = JobConfig.from_config(config, require_inputs=False)
    factory = job.coordinator_factory
    if factory != "standalone":
        raise ConfigError("job.coordinator.factory", factory,
                          "standalone for a rewind or savepoint (jobs under a coordinator have no claim that shows "
                          "they are stopped)")
    store = checkpoint_store_from_config(job.config, job.job_key)
    if not isinstance(store, SupportsJobClaim):
        raise ConfigError("job.checkpoint.factory", job.checkpoint_factory,
                          "a checkpoint store that keeps the job's claim (blobstore, local or azure)")
    claim = JobClaim(store.claim_backend(), job.job_key, OPERATOR_PROCESSOR,
                     timeout_ms=_int_key(job, KEY_TIMEOUT), renew_interval_ms=_int_key(job, KEY_RENEW),
                     epoch_floor=lambda: max((cp.generation for cp in store.read_all().values()), default=0))
    try:
        claim.acquire()
    except ClaimHeldError as exc:
        record = exc.state.record
        raise JobRunningError(
            f"job {job.job_key} is running in {record.describe()} ({store.describe()}): stop it first (SIGTERM or "
            "Ctrl-C, sparza drain, or sparza savepoint create NAME --stop), then run this again; a processor that "
            f"died releases the job after its claim expires ({KEY_TIMEOUT})") from exc
    try:
        yield StoppedJob(job, store)
    finally:
        claim.release()
