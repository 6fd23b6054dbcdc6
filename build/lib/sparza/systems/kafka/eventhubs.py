"""Azure Event Hubs as a kafka system: Samza's EventHubs keys mapped onto librdkafka settings.

Event Hubs speaks the Kafka protocol on ``<namespace>.servicebus.windows.net:9093`` with SASL_SSL,
mechanism PLAIN, user ``$ConnectionString`` and the namespace's (or event hub's) connection string
as password. ``systems.<s>.samza.factory: eventhubs`` (or Samza's
``org.apache.samza.system.eventhub.EventHubSystemFactory``) reads Samza's keys::

    systems.<s>.stream.list: edits,clicks              # the stream ids of the system
    streams.<x>.eventhubs.namespace: my-namespace      # also systems.<s>.streams.<x>.eventhubs.*
    streams.<x>.eventhubs.entitypath: edits-hub        # the event hub = the Kafka topic
    sensitive.streams.<x>.eventhubs.sas.keyname: RootManageSharedAccessKey
    sensitive.streams.<x>.eventhubs.sas.token: <key>
    streams.<x>.eventhubs.consumer.group: $Default
    systems.<s>.eventhubs.connection.string: Endpoint=sb://...   # instead of namespace + SAS

and hands the kafka system the equivalent ``systems.<s>.consumer.*`` / ``producer.*`` settings
(:func:`eventhubs_kafka_config`). One system is one namespace with one credential, as one Kafka
client connects to one cluster with one identity: streams of several namespaces or SAS policies
need one system each. Secrets go only into librdkafka's ``sasl.password``; errors name keys, never
values.
"""

from __future__ import annotations

import re
from typing import Any

from sparza.config import Config, define_key
from sparza.errors import ConfigError
from sparza.metrics import MetricsRegistry
from sparza.systems.kafka.admin import KafkaSystemAdmin
from sparza.systems.kafka.consumer import KafkaSystemConsumer
from sparza.systems.kafka.producer import KafkaSystemProducer

__all__ = ["EventHubsSystemFactory", "eventhubs_kafka_config", "eventhubs_librdkafka_settings"]

_PKG = "systems.eventhubs"
define_key("systems.<system>.stream.list", None, "Event Hubs: the stream ids of the system (comma separated).", _PKG)
define_key("streams.<stream>.eventhubs.namespace", None,
           "Event Hubs namespace of the stream (<namespace>.servicebus.windows.net).", _PKG)
define_key("streams.<stream>.eventhubs.entitypath", None, "The event hub of the stream (its Kafka topic).", _PKG)
define_key("sensitive.streams.<stream>.eventhubs.sas.keyname", None, "Name of the SAS policy (secret).", _PKG)
define_key("sensitive.streams.<stream>.eventhubs.sas.token", None, "Key of the SAS policy (secret).", _PKG)
define_key("streams.<stream>.eventhubs.consumer.group", "$Default",
           "Event Hubs consumer group (the Kafka group input offsets are committed to, for monitoring).", _PKG)
define_key("systems.<system>.eventhubs.connection.string", None,
           "A namespace or event hub connection string (secret), instead of namespace + SAS keys.", _PKG)

_ENDPOINT = re.compile(r"(?:^|;)\s*Endpoint\s*=\s*sb://(?P<host>[^/;]+)/?", re.IGNORECASE)
_ENTITY = re.compile(r"(?:^|;)\s*EntityPath\s*=\s*(?P<path>[^;]+)", re.IGNORECASE)


def _stream_value(config: Config, system: str, stream: str, suffix: str, *, sensitive: bool = False) -> str | None:
    """A stream key in Samza's top-level form (``[sensitive.]streams.<x>.eventhubs.<suffix>``) or
    system-scoped (``systems.<s>.streams.<x>.eventhubs.<suffix>``)."""
    keys = [f"{'sensitive.' if sensitive else ''}streams.{stream}.eventhubs.{suffix}",
            f"systems.{system}.streams.{stream}.eventhubs.{suffix}"]
    if sensitive:
        keys.append(f"streams.{stream}.eventhubs.{suffix}")
    for key in keys:
        value = config.get_str(key, None)
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


def _streams(config: Config, system: str) -> list[str]:
    listed = config.get_list(f"systems.{system}.stream.list", None)
    if listed:
        return [s.strip() for s in listed if s.strip()]
    # Without stream.list: every stream that has Event Hubs keys under the system.
    prefix = f"systems.{system}.streams."
    return sorted({k[len(prefix):].split(".eventhubs.")[0] for k in config if k.startswith(prefix)
                   and ".eventhubs." in k})


def eventhubs_librdkafka_settings(config: Config, system: str) -> dict[str, str]:
    """The librdkafka settings (bootstrap, SASL) for Event Hubs system ``system``; ConfigError names
    the key to fix when a namespace or credential is missing or streams disagree."""
    conn_key = f"systems.{system}.eventhubs.connection.string"
    connection = config.get_str(conn_key, None)
    streams = _streams(config, system)
    namespaces: dict[str, str] = {}
    credentials: dict[str, tuple[str, str]] = {}
    for stream in streams:
        ns = _stream_value(config, system, stream, "namespace")
        if ns is not None:
            namespaces[stream] = ns
        keyname = _stream_value(config, system, stream, "sas.keyname", sensitive=True)
        token = _stream_value(config, system, stream, "sas.token", sensitive=True)
        if (keyname is None) != (token is None):
            missing = "sas.token" if token is None else "sas.keyname"
            raise ConfigError(f"sensitive.streams.{stream}.eventhubs.{missing}", None,
                              "both the SAS key name and the SAS token of the stream (or neither, with "
                              f"{conn_key})")
        if keyname is not None and token is not None:
            credentials[stream] = (keyname, token)
    if connection:
        match = _ENDPOINT.search(connection)
        if match is None:
            raise ConfigError(conn_key, connection, "an Event Hubs connection string 'Endpoint=sb://<namespace>"
                              ".servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=...'", secret=True)
        host = match.group("host")
        password = connection.strip()
    else:
        if len(set(namespaces.values())) > 1:
            raise ConfigError(f"systems.{system}.stream.list", ",".join(streams),
                              "streams of one Event Hubs namespace (found "
                              f"{sorted(set(namespaces.values()))}): define one system per namespace")
        if not namespaces:
            first = streams[0] if streams else "<stream>"
            raise ConfigError(f"streams.{first}.eventhubs.namespace", None,
                              f"the Event Hubs namespace of the streams of system {system!r} (or set {conn_key})")
        if len(set(credentials.values())) > 1:
            raise ConfigError(f"sensitive.streams.{sorted(credentials)[1]}.eventhubs.sas.keyname", "<redacted>",
                              "the same SAS policy for every stream of the system (one Kafka client has one "
                              "identity): define one system per policy")
        if not credentials:
            first = streams[0] if streams else "<stream>"
            raise ConfigError(f"sensitive.streams.{first}.eventhubs.sas.keyname", None,
                              f"a SAS key name and token for system {system!r} (or set {conn_key})")
        namespace = next(iter(namespaces.values()))
        host = namespace if "." in namespace else f"{namespace}.servicebus.windows.net"
        keyname, token = next(iter(credentials.values()))
        password = f"Endpoint=sb://{host}/;SharedAccessKeyName={keyname};SharedAccessKey={token}"
    return {"bootstrap.servers": f"{host}:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "$ConnectionString", "sasl.password": password}


def eventhubs_kafka_config(config: Config, system: str) -> Config:
    """``config`` plus the kafka-system keys equivalent to system ``system``'s Event Hubs keys:
    connection settings for its consumers and producers, each stream's event hub as its topic, and
    the consumer group for monitoring commits."""
    settings = eventhubs_librdkafka_settings(config, system)
    extra: dict[str, Any] = {}
    for role in ("consumer", "producer"):
        for key, value in settings.items():
            extra.setdefault(f"systems.{system}.{role}.{key}", value)
    groups: set[str] = set()
    for stream in _streams(config, system):
        entity = _stream_value(config, system, stream, "entitypath")
        connection = config.get_str(f"systems.{system}.eventhubs.connection.string", None)
        if entity is None and connection:
            match = _ENTITY.search(connection)
            entity = match.group("path").strip() if match else None
        if entity is not None:
            extra[f"systems.{system}.streams.{stream}.samza.physical.name"] = entity
        group = _stream_value(config, system, stream, "consumer.group")
        groups.add(group or "$Default")
    if len(groups) > 1:
        raise ConfigError(f"systems.{system}.stream.list", ",".join(_streams(config, system)),
                          f"one consumer group for the streams of a system (found {sorted(groups)})")
    extra.setdefault(f"systems.{system}.consumer.group.id", next(iter(groups)) if groups else "$Default")
    # Values the user set explicitly under consumer.*/producer.* win over the mapping.
    return config.with_overrides({k: v for k, v in extra.items() if k not in config})


class EventHubsSystemFactory:
    """``systems.<s>.samza.factory: eventhubs``: the kafka system over the Event Hubs Kafka endpoint."""

    def get_admin(self, system_name: str, config: Config) -> KafkaSystemAdmin:
        """The system's admin."""
        return KafkaSystemAdmin(system_name, eventhubs_kafka_config(config, system_name))

    def get_consumer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> KafkaSystemConsumer:
        """A consumer."""
        return KafkaSystemConsumer(system_name, eventhubs_kafka_config(config, system_name), metrics)

    def get_producer(self, system_name: str, config: Config,
                     metrics: MetricsRegistry | None = None) -> KafkaSystemProducer:
        """A producer (Kafka transactions: the namespace's tier must support them)."""
        return KafkaSystemProducer(system_name, eventhubs_kafka_config(config, system_name), metrics)
