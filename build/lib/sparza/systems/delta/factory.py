"""``DeltaSystemFactory``: what ``systems.<s>.samza.factory: delta`` resolves to."""

from __future__ import annotations

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.systems.delta.admin import DeltaSystemAdmin
from sparza.systems.delta.consumer import DeltaSystemConsumer
from sparza.systems.delta.producer import DeltaSystemProducer
from sparza.systems.delta.settings import DeltaSystemSettings
from sparza.systems.delta.tables import table_spec_from_config

__all__ = ["DeltaSystemFactory"]


class DeltaSystemFactory:
    """Builds the admin, consumer and producer of a delta system (streams are Delta tables)."""

    def get_admin(self, system_name: str, config: Config) -> DeltaSystemAdmin:
        """The system's admin."""
        return DeltaSystemAdmin(system_name, config)

    def get_consumer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> DeltaSystemConsumer:
        """A consumer (cheap; safe to build on executors from a pickled config)."""
        return DeltaSystemConsumer(system_name, config, metrics)

    def check_config(self, system_name: str, config: Config) -> None:
        """The system's own keys and the schema, mode and keys of every typed table it declares."""
        settings = DeltaSystemSettings(system_name, config)
        _ = (settings.commit_retries, settings.log_retention)
        prefix = f"systems.{system_name}.streams."
        streams = {k[len(prefix):].split(".delta.table.")[0] for k in config if k.startswith(prefix)
                   and ".delta.table." in k}
        for stream in sorted(streams):
            table_spec_from_config(settings, stream)

    def get_producer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> DeltaSystemProducer:
        """A producer."""
        return DeltaSystemProducer(system_name, config, metrics)
