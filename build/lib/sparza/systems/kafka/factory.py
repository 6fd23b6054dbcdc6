"""``KafkaSystemFactory``: what ``systems.<s>.samza.factory: kafka`` (or Samza's
``org.apache.samza.system.kafka.KafkaSystemFactory``) resolves to."""

from __future__ import annotations

from sparza.config import Config
from sparza.metrics import MetricsRegistry
from sparza.systems.kafka.admin import KafkaSystemAdmin
from sparza.systems.kafka.consumer import KafkaSystemConsumer
from sparza.systems.kafka.producer import KafkaSystemProducer
from sparza.systems.kafka.settings import KafkaSystemSettings

__all__ = ["KafkaSystemFactory"]


class KafkaSystemFactory:
    """Builds the admin, consumer and producer of a kafka system (streams are topics)."""

    def get_admin(self, system_name: str, config: Config) -> KafkaSystemAdmin:
        """The system's admin."""
        return KafkaSystemAdmin(system_name, config)

    def get_consumer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> KafkaSystemConsumer:
        """A consumer (cheap; safe to build on executors from a pickled config)."""
        return KafkaSystemConsumer(system_name, config, metrics)

    def check_config(self, system_name: str, config: Config) -> None:
        """sparza's ``kafka.*`` keys and every librdkafka setting (name and range) of the system."""
        KafkaSystemSettings(system_name, config).check()

    def get_producer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> KafkaSystemProducer:
        """A producer (transactional per task when the runtime drives it)."""
        return KafkaSystemProducer(system_name, config, metrics)
