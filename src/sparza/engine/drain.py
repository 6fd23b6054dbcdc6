"""Drain (Samza 1.8's): stop a job after it processed what was in flight, firing everything it holds.

A drain is requested by writing one :class:`DrainRequest` next to the task checkpoints (``sparza drain
--config``, or ``sparza run --drain`` at its start), for a job or for every stage of an application at once
(:func:`drain_scope`): its id (the ``runId`` of the drain messages), the jobs it covers with their tasks, and,
per *source* partition (every input partition except intermediate streams and adjunct-store inputs), the
upcoming offset observed at the request. The request is read by the driver every
``job.drain-monitor.poll.interval.ms`` (:class:`~sparza.runtime.driver.drainmonitor.DrainMonitor`, Samza's
DrainMonitor; :func:`~sparza.runtime.driver.drainmonitor.request_drain` writes requests) and handed to the
planner, which never plans a source partition past its end offset, records the drain in the plan it logs,
and tells every task in its split (:attr:`~sparza.engine.split.TaskSplit.drain`) which of its source
partitions have not reached their end yet. The split's drain goes into the batch's intent, so a replay
decides exactly as the first attempt did.

A task has drained once its source partitions reached their ends and every upstream producer of each of its
intermediate partitions sent its drain message (an ended partition counts as drained). In that batch it fires
``on_drain`` (after the watermark callback), writes its watermark and a drain message into every partition of
its intermediate outputs, and records the drain as completed in its checkpoint. The job stops with reason
``drained`` (exit 0) when every task drained; the last processor (or stage) to see every task of every job of
the request drained removes the request, so the next run continues with the input that arrived since: drain
is not end-of-stream (an ended task never reads again, a drained one does). One document per scope makes the
request and its removal atomic: the stages of an application never disagree on whether they drain.

Drain needs a standalone job (``job.coordinator.factory: standalone``, the default).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparza.config import BOOL, Config, Int, define_key
from sparza.config.shared import APP_STAGE
from sparza.coordination.settings import COORDINATOR_FACTORY, FACTORY_STANDALONE
from sparza.engine.checkpoint import SupportsJobDocuments, checkpoint_store_from_config
from sparza.engine.errors import RuntimeStateError
from sparza.engine.jobconfig import JobConfig
from sparza.errors import ConfigError
from sparza.metrics import MetricsRegistry
from sparza.streams import SystemStream, SystemStreamPartition
from sparza.systems.settings import STREAM_INTERMEDIATE

__all__ = ["DRAIN_DOCUMENT", "DRAIN_MONITOR_ENABLED", "DRAIN_MONITOR_INTERVAL_MS",
           "DrainRequest", "check_standalone", "clear_drain", "drain_scope", "read_drain",
           "source_ssps", "write_drain"]

DRAIN_DOCUMENT = "_drain"
"""The request's name among the task checkpoints of its scope (``<checkpoints>/<job or application>/_drain``)."""

DRAIN_MONITOR_ENABLED = define_key("job.drain-monitor.enabled", True,
                                   "Whether the driver reads drain requests (sparza drain) while the job runs "
                                   "(Samza's key; Samza's default is false).", "runtime", kind=BOOL)
DRAIN_MONITOR_INTERVAL_MS = define_key("job.drain-monitor.poll.interval.ms", 5000,
                                       "How often the driver reads the job's drain request (Samza polls every 60000 "
                                       "ms).", "runtime", kind=Int(min_value=0))


@dataclass(frozen=True)
class DrainRequest:
    """One drain (Samza's DrainNotification): ``id`` (the drain messages' ``runId``), when it was requested,
    ``ends``: per source SSP (``system.stream#N``), the upcoming offset observed then, and ``jobs``: job key →
    its tasks (the request goes when all of them drained)."""

    id: str
    requested_at_ms: int
    ends: dict[str, str] = field(default_factory=dict)
    jobs: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON keys ``id``, ``requested_at``, ``ends``, ``jobs`` (the request document, and the plan's ``drain``)."""
        return {"id": self.id, "requested_at": self.requested_at_ms, "ends": dict(self.ends),
                "jobs": {k: list(v) for k, v in self.jobs.items()}}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> DrainRequest:
        """Inverse of :meth:`to_json`."""
        return cls(str(body["id"]), int(body.get("requested_at", 0)),
                   {str(k): str(v) for k, v in (body.get("ends") or {}).items()},
                   {str(k): [str(t) for t in v] for k, v in (body.get("jobs") or {}).items()})


def drain_scope(config: Config) -> str:
    """Where a job's drain request lives: the application's key (``<job.name>-<job.id>`` of the ``app.class``
    config) for a stage of an application, so one request drains every stage; else the job's own key."""
    job = JobConfig.from_config(config, require_inputs=False)
    stage = APP_STAGE.get(config)  # set in every stage's config by sparza.api's planner
    if stage and job.name.endswith(f"-{stage}"):
        return f"{job.name[:-len(stage) - 1]}-{job.job_id}"
    return job.job_key


def _documents(config: Config, metrics: MetricsRegistry | None = None) -> tuple[SupportsJobDocuments, str]:
    key = drain_scope(config)
    store = checkpoint_store_from_config(config, key, metrics=metrics, scope="drain")  # its requests: storage.drain
    if not isinstance(store, SupportsJobDocuments):
        raise RuntimeStateError(f"the checkpoint store {store.describe()} cannot keep a drain request")
    return store, key


def check_standalone(config: Config) -> None:
    """Refuse a drain of a job whose processors run under a coordinator (not supported yet)."""
    factory = COORDINATOR_FACTORY.get(config)
    if factory != FACTORY_STANDALONE:
        raise ConfigError(COORDINATOR_FACTORY.key, factory,
                          "standalone for a drain (sparza drain, sparza run --drain): a drain of processors under "
                          "a coordinator is not supported yet; stop them with a signal instead")


def read_drain(config: Config, *, metrics: MetricsRegistry | None = None) -> DrainRequest | None:
    """The pending drain request of the job (or of its application), or None; ``metrics`` counts the request."""
    store, scope = _documents(config, metrics)
    data = store.read_document(DRAIN_DOCUMENT)
    if data is None:
        return None
    try:
        return DrainRequest.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeStateError(f"the drain request of {scope} is unreadable ({exc}); remove it with "
                                "sparza drain --cancel and request the drain again") from exc


def write_drain(config: Config, request: DrainRequest) -> None:
    """Store ``request`` as the drain request of the job (or of its application)."""
    store, _ = _documents(config)
    store.write_document(DRAIN_DOCUMENT, json.dumps(request.to_json(), sort_keys=True).encode())


def clear_drain(config: Config, drain_id: str | None = None) -> bool:
    """Remove the drain request of the job or its application (only if it is ``drain_id``, when given); True
    when one was removed."""
    store, _ = _documents(config)
    current = read_drain(config)
    if current is None or (drain_id is not None and current.id != drain_id):
        return False
    store.delete_document(DRAIN_DOCUMENT)
    return True


def source_ssps(job: JobConfig, ssps: Iterable[SystemStreamPartition]) -> list[SystemStreamPartition]:
    """The SSPs among ``ssps`` that a drain ends at an offset: not intermediate streams (they drain through the
    upstream tasks' drain messages) and not adjunct-store inputs (stores, not the task, read them)."""
    from sparza.state.adjunct import AdjunctConfig

    adjunct = AdjunctConfig.from_config(job.config).input_streams()
    intermediate: dict[SystemStream, bool] = {}
    out = []
    for ssp in ssps:
        stream = ssp.system_stream
        if stream not in intermediate:
            intermediate[stream] = STREAM_INTERMEDIATE.get(job.config, system=stream.system, stream=stream.stream)
        if not intermediate[stream] and stream not in adjunct:
            out.append(ssp)
    return out
