"""Coordination config keys, their defaults, and :class:`CoordinationConfig` (the parsed, checked form).

Defaults are chosen for fast failover inside Azure's lease limits (a lease lasts 15-60 s): the
lease is as short as Azure allows, renewed often enough that two renewals may fail before it
expires, and a processor is declared dead after five missed heartbeats. ``docs/coordination.md``
explains each choice and the failover bounds they give.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparza.config import DURATION_MS, Choice, Config, define_check, define_key
from sparza.config.shared import JOB_ID, JOB_NAME
from sparza.errors import ConfigError

__all__ = [
    "COORDINATOR_FACTORY",
    "FACTORY_AZURE",
    "FACTORY_STANDALONE",
    "KEY_FACTORY",
    "CoordinationConfig",
]

_PKG = "coordination"
_P = "job.coordinator.azure."
KEY_FACTORY = "job.coordinator.factory"
FACTORY_STANDALONE = "standalone"
FACTORY_AZURE = "azure"

COORDINATOR_FACTORY = define_key(KEY_FACTORY, FACTORY_STANDALONE,
                                 "How processors of a job share its tasks: 'standalone' (one processor owns all "
                                 "tasks) or 'azure' (blob-lease leader, table heartbeats); 'passthrough' is "
                                 "standalone.", _PKG, kind=Choice(FACTORY_STANDALONE, FACTORY_AZURE, "passthrough"))
_LEASE_DURATION = define_key(_P + "lease.duration.ms", 15000,
                             "Leader lease length (Azure allows 15000-60000). Bounds leader failover: a dead leader's"
                             " lease expires within this time.", _PKG, kind=DURATION_MS)
_LEASE_RENEW_INTERVAL = define_key(_P + "lease.renew.interval.ms", 4000,
                                   "How often the leader renews its lease; at most a third of the lease so two "
                                   "renewals may fail.", _PKG, kind=DURATION_MS)
_HEARTBEAT_INTERVAL = define_key(_P + "heartbeat.interval.ms", 2000,
                                 "How often every processor rewrites its processor-table row.", _PKG, kind=DURATION_MS)
_LIVENESS_TIMEOUT = define_key(_P + "liveness.timeout.ms", 10000,
                               "A processor whose row the storage service has not stamped for this long is dead (5 "
                               "heartbeats).", _PKG, kind=DURATION_MS)
_LIVENESS_CHECK_INTERVAL = define_key(_P + "liveness.check.interval.ms", 1000,
                                      "How often the leader compares the live processors with the job model and "
                                      "checks the barrier.", _PKG, kind=DURATION_MS)
_LEADER_CHECK_INTERVAL = define_key(_P + "leader.check.interval.ms", 1000,
                                    "How often a non-leader looks at the leader lease and tries to take it when it is"
                                    " free.", _PKG, kind=DURATION_MS)
_JOBMODEL_POLL_INTERVAL = define_key(_P + "jobmodel.poll.interval.ms", 1000,
                                     "How often every processor reads the job-model blob for a new version or barrier"
                                     " state.", _PKG, kind=DURATION_MS)
_BARRIER_TIMEOUT = define_key(_P + "barrier.timeout.ms", 20000,
                              "A barrier not acknowledged by every participant within this time is abandoned and "
                              "retried with a newer version.", _PKG, kind=DURATION_MS)
_REQUEST_TIMEOUT = define_key(_P + "request.timeout.ms", 5000,
                              "Timeout of one storage request; short so an outage is noticed well within a lease "
                              "period.", _PKG, kind=DURATION_MS)

_DURATIONS = (_LEASE_DURATION, _LEASE_RENEW_INTERVAL, _HEARTBEAT_INTERVAL, _LIVENESS_TIMEOUT, _LIVENESS_CHECK_INTERVAL,
              _LEADER_CHECK_INTERVAL, _JOBMODEL_POLL_INTERVAL, _BARRIER_TIMEOUT, _REQUEST_TIMEOUT)
"""Each is the field of :class:`CoordinationConfig` named after it (``lease.duration.ms`` → ``lease_duration_ms``)."""

_LEASE_MIN_MS = 15_000
_LEASE_MAX_MS = 60_000


def _clean(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@dataclass(frozen=True, slots=True)
class CoordinationConfig:
    """The checked coordination settings of one job (all durations in milliseconds)."""

    job_name: str
    job_id: str
    lease_duration_ms: int = _LEASE_DURATION.get({})
    lease_renew_interval_ms: int = _LEASE_RENEW_INTERVAL.get({})
    heartbeat_interval_ms: int = _HEARTBEAT_INTERVAL.get({})
    liveness_timeout_ms: int = _LIVENESS_TIMEOUT.get({})
    liveness_check_interval_ms: int = _LIVENESS_CHECK_INTERVAL.get({})
    leader_check_interval_ms: int = _LEADER_CHECK_INTERVAL.get({})
    jobmodel_poll_interval_ms: int = _JOBMODEL_POLL_INTERVAL.get({})
    barrier_timeout_ms: int = _BARRIER_TIMEOUT.get({})
    request_timeout_ms: int = _REQUEST_TIMEOUT.get({})

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> CoordinationConfig:
        """Parse and check the keys; a bad value raises :class:`ConfigError` naming the key."""
        job_name = JOB_NAME.require(config)
        if not _clean(job_name):
            raise ConfigError(JOB_NAME.key, job_name, "a name with at least one letter or digit")
        durations = {f"{key.key[len(_P):-len('.ms')].replace('.', '_')}_ms": key.get(config) for key in _DURATIONS}
        out = cls(job_name=job_name, job_id=JOB_ID.get(config), **durations)
        out._check()
        return out

    def _check(self) -> None:
        if not _LEASE_MIN_MS <= self.lease_duration_ms <= _LEASE_MAX_MS:
            raise ConfigError(_P + "lease.duration.ms", self.lease_duration_ms,
                              "15000-60000 (Azure's lease limits: 15 to 60 seconds)")
        if self.lease_duration_ms % 1000:
            raise ConfigError(_P + "lease.duration.ms", self.lease_duration_ms, "whole seconds (Azure leases)")
        if not 0 < self.lease_renew_interval_ms * 3 <= self.lease_duration_ms:
            raise ConfigError(_P + "lease.renew.interval.ms", self.lease_renew_interval_ms,
                              f"at most a third of lease.duration.ms ({self.lease_duration_ms // 3})")
        if not 0 < self.heartbeat_interval_ms * 2 <= self.liveness_timeout_ms:
            raise ConfigError(_P + "liveness.timeout.ms", self.liveness_timeout_ms,
                              f"at least twice heartbeat.interval.ms ({self.heartbeat_interval_ms * 2})")
        for key, value in (("liveness.check.interval.ms", self.liveness_check_interval_ms),
                           ("leader.check.interval.ms", self.leader_check_interval_ms),
                           ("jobmodel.poll.interval.ms", self.jobmodel_poll_interval_ms),
                           ("barrier.timeout.ms", self.barrier_timeout_ms),
                           ("request.timeout.ms", self.request_timeout_ms)):
            if value <= 0:
                raise ConfigError(_P + key, value, "a positive duration")
        if self.request_timeout_ms >= self.lease_duration_ms:
            raise ConfigError(_P + "request.timeout.ms", self.request_timeout_ms,
                              "less than lease.duration.ms (a renewal must finish before the lease ends)")

    @property
    def lease_duration_s(self) -> int:
        """The lease length in whole seconds, as Azure takes it."""
        return self.lease_duration_ms // 1000

    @property
    def resource_id(self) -> str:
        """``<job.name>-<job.id>`` reduced to lowercase letters and digits."""
        return f"{_clean(self.job_name)}{_clean(self.job_id)}"


def _check_coordination(config: Config) -> None:
    """Azure coordination's timings within Azure's lease limits, when the job is coordinated through Azure."""
    if COORDINATOR_FACTORY.get(config) == FACTORY_AZURE:
        CoordinationConfig.from_config(config)


define_check(_PKG, _check_coordination)
