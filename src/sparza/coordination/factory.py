"""job_coordinator_from_config: pick the coordinator named by ``job.coordinator.factory``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sparza.config import Config
from sparza.coordination.listener import JobCoordinator, JobCoordinatorListener
from sparza.coordination.settings import COORDINATOR_FACTORY, FACTORY_AZURE
from sparza.metrics import MetricsRegistry

__all__ = ["job_coordinator_from_config"]


def job_coordinator_from_config(processor_id: str, config: Mapping[str, str], tasks: Iterable[str],
                                listener: JobCoordinatorListener,
                                metrics: MetricsRegistry | None = None) -> JobCoordinator:
    """``standalone`` (default: this processor owns every task) or ``azure`` (shared through Azure storage).

    ``metrics`` receives the coordinator's metrics (group ``coordination``). Raises
    :class:`~sparza.errors.ConfigError` for any other value, or for bad ``job.coordinator.azure.*`` keys.
    """
    cfg = Config.of(config)
    kind = COORDINATOR_FACTORY.get(cfg)
    if kind == FACTORY_AZURE:
        from sparza.coordination.coordinator import AzureJobCoordinator

        return AzureJobCoordinator(processor_id, cfg, tasks, listener, metrics=metrics)
    from sparza.coordination.standalone import StandaloneJobCoordinator

    return StandaloneJobCoordinator(processor_id, tasks, listener)
