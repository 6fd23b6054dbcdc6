"""``AzureBlobSystemFactory``: what ``systems.<container>.samza.factory: azureblob`` resolves to.

The system is write-only, as in Samza: the admin and consumer raise :class:`WriteOnlySystemError`.
"""

from __future__ import annotations

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.systems import SystemAdmin, SystemConsumer
from sparza.systems.azureblob.errors import WriteOnlySystemError
from sparza.systems.azureblob.producer import AzureBlobSystemProducer
from sparza.systems.azureblob.settings import AzureBlobSettings

__all__ = ["AzureBlobSystemFactory"]


class AzureBlobSystemFactory:
    """Builds :class:`AzureBlobSystemProducer` for a system; azureblob has no admin or consumer."""

    def get_admin(self, system_name: str, config: Config) -> SystemAdmin:
        """Always raises: azureblob keeps no stream metadata or offsets."""
        raise WriteOnlySystemError(system_name, "admin (stream metadata, offsets)")

    def get_consumer(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> SystemConsumer:
        """Always raises: azureblob cannot be read as a stream."""
        raise WriteOnlySystemError(system_name, "consumer")

    def check_config(self, system_name: str, config: Config) -> None:
        """Every ``systems.<container>.azureblob.*`` value within Azure's and the seed's limits."""
        AzureBlobSettings.from_config(system_name, config)

    def get_producer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> AzureBlobSystemProducer:
        """A producer writing to the container named ``system_name``."""
        return AzureBlobSystemProducer(system_name, config, metrics)
