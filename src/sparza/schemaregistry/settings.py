"""The config keys of a system's schema registry, in the spirit of Confluent's serializer settings.

A system (``kafka``, ``eventhubs``, or any other) gets a registry with ``systems.<s>.schema.registry.url``;
its streams whose key or message serde is ``avro`` then use it. The subject of a stream is named by a
strategy, Confluent's three: ``topic`` (``<topic>-key`` / ``<topic>-value``, the default), ``record`` (the
schema's full record name) and ``topic_record`` (``<topic>-<full record name>``); Confluent's class names
(``io.confluent.kafka.serializers.subject.TopicNameStrategy``...) are accepted too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from sparza.config import BOOL, DURATION_MS, STR, Config, define_key
from sparza.errors import ConfigError
from sparza.schemaregistry.client import RegistryEndpoint

__all__ = ["AUTO_REGISTER", "KEY_STRATEGY", "TIMEOUT", "URL", "USER_INFO", "VALUE_STRATEGY", "RegistrySettings",
           "SubjectStrategy"]

SubjectStrategy = Literal["topic", "record", "topic_record"]
"""How a stream's subject is named (see the module docstring)."""

_PKG = "schemaregistry"
URL = define_key("systems.<system>.schema.registry.url", None,
                 "A Confluent-compatible schema registry (Apicurio: http://host:port/apis/ccompat/v7; 'sparza "
                 "dev-registry start' runs one): the avro serdes of the system's streams then write and read the "
                 "Confluent wire format (magic byte 0, 4-byte schema id, Avro binary), registering and fetching "
                 "schemas there.", _PKG, kind=STR)
USER_INFO = define_key("systems.<system>.schema.registry.basic.auth.user.info", None,
                       "user:password for the registry's HTTP basic authentication (secret; Confluent's "
                       "basic.auth.user.info).", _PKG, kind=STR)
AUTO_REGISTER = define_key("systems.<system>.schema.registry.auto.register.schemas", True,
                           "Register a stream's configured schema as a new version of its subject when it is not "
                           "there yet (false: it must be registered already, else the job fails at start).", _PKG,
                           kind=BOOL)
VALUE_STRATEGY = define_key("systems.<system>.schema.registry.value.subject.name.strategy", "topic",
                            "Subject of message schemas: topic (<topic>-value), record (the record's full name) or "
                            "topic_record (<topic>-<record full name>); Confluent's strategy class names are "
                            "accepted.", _PKG, kind=STR)
KEY_STRATEGY = define_key("systems.<system>.schema.registry.key.subject.name.strategy", "topic",
                          "Subject of key schemas: topic (<topic>-key), record or topic_record.", _PKG, kind=STR)
TIMEOUT = define_key("systems.<system>.schema.registry.request.timeout.ms", "10s",
                     "How long a registry request may take, retries of transient failures included.", _PKG,
                     kind=DURATION_MS)

_STRATEGIES: dict[str, SubjectStrategy] = {
    "topic": "topic", "topicnamestrategy": "topic",
    "record": "record", "recordnamestrategy": "record",
    "topic_record": "topic_record", "topicrecord": "topic_record", "topicrecordnamestrategy": "topic_record",
}


class RegistrySettings:
    """Typed access to ``systems.<system>.schema.registry.*`` and to what names a stream's subject."""

    def __init__(self, config: Mapping[str, Any], system: str) -> None:
        self.config = Config.of(config)
        self.system = system

    @property
    def enabled(self) -> bool:
        """True when the system has a registry URL."""
        return URL.is_set(self.config, system=self.system)

    def endpoint(self) -> RegistryEndpoint:
        """Where the registry is, its credentials and request timeout."""
        url = (URL.get(self.config, system=self.system) or "").strip()
        if not url.startswith(("http://", "https://")):
            raise ConfigError(URL.name(system=self.system), url or None,
                              "the http(s) URL of a Confluent-compatible schema registry, e.g. "
                              "http://127.0.0.1:8080/apis/ccompat/v7 (Apicurio) or http://127.0.0.1:8081 (Confluent)")
        return RegistryEndpoint(url.rstrip("/"), USER_INFO.get(self.config, system=self.system),
                                TIMEOUT.get(self.config, system=self.system) / 1000.0)

    @property
    def auto_register(self) -> bool:
        """``auto.register.schemas``."""
        return AUTO_REGISTER.get(self.config, system=self.system)

    def strategy(self, which: str) -> SubjectStrategy:
        """The subject name strategy of keys (``which="key"``) or messages (``"msg"``)."""
        key = KEY_STRATEGY if which == "key" else VALUE_STRATEGY
        raw = key.get(self.config, system=self.system).strip()
        chosen = _STRATEGIES.get(raw.rsplit(".", 1)[-1].lower())
        if chosen is None:
            raise ConfigError(key.name(system=self.system), raw, "topic, record or topic_record (or Confluent's "
                              "TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy)")
        return chosen

    def topic(self, stream: str) -> str:
        """The Kafka topic (event hub) of ``stream``: its physical name, an Event Hubs stream's entity path,
        else the stream id, as the system itself names it."""
        own = f"systems.{self.system}.streams.{stream}."
        keys = (own + "samza.physical.name", f"streams.{stream}.samza.physical.name",
                f"streams.{stream}.eventhubs.entitypath", own + "eventhubs.entitypath")
        for key in keys:
            value = self.config.get(key)
            if value and str(value).strip():
                return str(value).strip()
        return stream

    def subject(self, stream: str, which: str, schema: Any) -> str:
        """The subject of ``stream``'s keys or messages written with ``schema`` (None: no schema configured,
        only the topic strategy can name it)."""
        strategy = self.strategy(which)
        topic = self.topic(stream)
        if strategy == "topic":
            return f"{topic}-{'key' if which == 'key' else 'value'}"
        name = _record_name(schema)
        if name is None:
            key = (KEY_STRATEGY if which == "key" else VALUE_STRATEGY).name(system=self.system)
            raise ConfigError(key, strategy, "", message=(
                f"config key '{key}' is {strategy!r}, which names the subject after the record, but stream "
                f"{self.system}.{stream}'s {which} schema is {'missing' if schema is None else 'not a record'}: set "
                f"systems.{self.system}.streams.{stream}.samza.{which}.schema to a record schema, or use the topic "
                "strategy"))
        return name if strategy == "record" else f"{topic}-{name}"


def _record_name(schema: Any) -> str | None:
    """The full name (``namespace.name``) of a record schema, else None."""
    if not isinstance(schema, dict) or schema.get("type") != "record" or not schema.get("name"):
        return None
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"
