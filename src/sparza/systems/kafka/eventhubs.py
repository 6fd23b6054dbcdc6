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

from sparza.config import LIST, STR, Config, OptionalKey, define_key
from sparza.errors import ConfigError
from sparza.metrics import MetricsRegistry
from sparza.systems.kafka.admin import KafkaSystemAdmin
from sparza.systems.kafka.consumer import KafkaSystemConsumer
from sparza.systems.kafka.producer import KafkaSystemProducer

__all__ = ["EventHubsSystemFactory", "eventhubs_kafka_config", "eventhubs_librdkafka_settings"]

_PKG = "systems.eventhubs"
_STREAM_LIST = define_key("systems.<system>.stream.list", None, "Event Hubs: the stream ids of the system (comma "
                          "separated; default: every stream with eventhubs keys under the system).", _PKG, kind=LIST)
_CONNECTION = define_key("systems.<system>.eventhubs.connection.string", None,
                         "A namespace or event hub connection string (secret), instead of namespace + SAS keys.", _PKG,
                         kind=STR)
_SCOPED = "systems.<system>.streams.<stream>.eventhubs."


def _stream_key(suffix: str, meaning: str) -> OptionalKey[str]:
    """Samza's ``streams.<x>.eventhubs.<suffix>``, read after the system-scoped spelling
    ``systems.<s>.streams.<x>.eventhubs.<suffix>`` (the more specific one wins)."""
    top = define_key(f"streams.<stream>.eventhubs.{suffix}", None, meaning, _PKG, kind=STR)
    return define_key(_SCOPED + suffix, None, f"System-scoped spelling of streams.<stream>.eventhubs.{suffix} (wins "
                      "when both are set).", _PKG, kind=STR, fallback=top)


def _sas_key(suffix: str, meaning: str) -> OptionalKey[str]:
    """The system-scoped spelling, else ``sensitive.streams.<x>.eventhubs.<suffix>``, else Samza's plain one."""
    plain = define_key(f"streams.<stream>.eventhubs.{suffix}", None, f"{meaning} without the sensitive. prefix.",
                       _PKG, kind=STR)
    sensitive = define_key(f"sensitive.streams.<stream>.eventhubs.{suffix}", None, f"{meaning} (secret).", _PKG,
                           kind=STR, fallback=plain)
    return define_key(_SCOPED + suffix, None, f"System-scoped spelling of sensitive.streams.<stream>.eventhubs."
                      f"{suffix} (wins when both are set).", _PKG, kind=STR, fallback=sensitive)


_NAMESPACE = _stream_key("namespace", "Event Hubs namespace of the stream (<namespace>.servicebus.windows.net).")
_ENTITY_PATH = _stream_key("entitypath", "The event hub of the stream (its Kafka topic).")
_CONSUMER_GROUP = define_key(_SCOPED + "consumer.group", None, "System-scoped spelling of "
                             "streams.<stream>.eventhubs.consumer.group (wins when both are set).", _PKG, kind=STR,
                             fallback=define_key("streams.<stream>.eventhubs.consumer.group", "$Default",
                                                 "Event Hubs consumer group (the Kafka group input offsets are "
                                                 "committed to, for monitoring).", _PKG, kind=STR))
_SAS_KEYNAME = _sas_key("sas.keyname", "Name of the SAS policy")
_SAS_TOKEN = _sas_key("sas.token", "Key of the SAS policy")

_ENDPOINT = re.compile(r"(?:^|;)\s*Endpoint\s*=\s*sb://(?P<host>[^/;]+)/?", re.IGNORECASE)
_ENTITY = re.compile(r"(?:^|;)\s*EntityPath\s*=\s*(?P<path>[^;]+)", re.IGNORECASE)


def _streams(config: Config, system: str) -> list[str]:
    listed = _STREAM_LIST.get(config, system=system)
    if listed:
        return list(listed)
    # Without stream.list: every stream that has Event Hubs keys under the system.
    prefix = f"systems.{system}.streams."
    return sorted({k[len(prefix):].split(".eventhubs.")[0] for k in config if k.startswith(prefix)
                   and ".eventhubs." in k})


def eventhubs_librdkafka_settings(config: Config, system: str) -> dict[str, str]:
    """The librdkafka settings (bootstrap, SASL) for Event Hubs system ``system``; ConfigError names
    the key to fix when a namespace or credential is missing or streams disagree."""
    conn_key = _CONNECTION.name(system=system)
    connection = _CONNECTION.get(config, system=system)
    streams = _streams(config, system)
    namespaces: dict[str, str] = {}
    credentials: dict[str, tuple[str, str]] = {}
    for stream in streams:
        ns = _NAMESPACE.get(config, system=system, stream=stream)
        if ns is not None:
            namespaces[stream] = ns
        keyname = _SAS_KEYNAME.get(config, system=system, stream=stream)
        token = _SAS_TOKEN.get(config, system=system, stream=stream)
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
        password = connection
    else:
        if len(set(namespaces.values())) > 1:
            raise ConfigError(_STREAM_LIST.name(system=system), ",".join(streams),
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
        entity = _ENTITY_PATH.get(config, system=system, stream=stream)
        connection = _CONNECTION.get(config, system=system)
        if entity is None and connection:
            match = _ENTITY.search(connection)
            entity = match.group("path").strip() if match else None
        if entity is not None:
            extra[f"systems.{system}.streams.{stream}.samza.physical.name"] = entity
        groups.add(_CONSUMER_GROUP.get(config, system=system, stream=stream))
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
