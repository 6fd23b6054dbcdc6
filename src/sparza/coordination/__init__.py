"""Processors of one job sharing its tasks through Azure storage (SEP: Samza coordination on Azure).

A leader elected by a blob lease publishes job models (task → processor, with a version that is
also a fencing generation) into a blob; processors heartbeat rows in an Azure Table and adopt each
model through a barrier. ``standalone`` (one processor owns every task) is the default.
See ``docs/coordination.md``.
"""

from sparza.coordination.assignment import assign_tasks
from sparza.coordination.coordinator import AzureJobCoordinator
from sparza.coordination.errors import (
    CoordinationError,
    FencedError,
    LeaseHeldError,
    LeaseLostError,
    LockTimeoutError,
    StaleLeaderError,
    StoreConflictError,
)
from sparza.coordination.factory import job_coordinator_from_config
from sparza.coordination.fencing import GenerationFence, claim, write_fenced
from sparza.coordination.jobmodel import JobModel
from sparza.coordination.leader import AzureLeaderElector, LeaderElectorListener
from sparza.coordination.lease import LeaseBlobManager
from sparza.coordination.listener import JobCoordinator, JobCoordinatorListener, MemberNotes
from sparza.coordination.lock import AzureLock
from sparza.coordination.naming import CoordinationResources
from sparza.coordination.scheduler import Scheduler
from sparza.coordination.settings import CoordinationConfig
from sparza.coordination.standalone import StandaloneJobCoordinator
from sparza.coordination.store import BarrierState, CoordinatorState, JobModelStore
from sparza.coordination.table import ProcessorEntity, ProcessorTable

__all__ = [
    "AzureJobCoordinator",
    "AzureLeaderElector",
    "AzureLock",
    "BarrierState",
    "CoordinationConfig",
    "CoordinationError",
    "CoordinationResources",
    "CoordinatorState",
    "FencedError",
    "GenerationFence",
    "JobCoordinator",
    "JobCoordinatorListener",
    "JobModel",
    "JobModelStore",
    "LeaderElectorListener",
    "LeaseBlobManager",
    "LeaseHeldError",
    "LeaseLostError",
    "LockTimeoutError",
    "MemberNotes",
    "ProcessorEntity",
    "ProcessorTable",
    "Scheduler",
    "StaleLeaderError",
    "StandaloneJobCoordinator",
    "StoreConflictError",
    "assign_tasks",
    "claim",
    "job_coordinator_from_config",
    "write_fenced",
]
