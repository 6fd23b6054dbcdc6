"""What the settings of every stream system share: its keys under ``systems.<system>.``, a stream's own keys
under ``systems.<system>.streams.<stream>.``, whether a stream is bounded and its serdes.

The keys every system reads are declared here; each system's settings
(:class:`~sparza.systems.delta.settings.DeltaSystemSettings`,
:class:`~sparza.systems.kafka.settings.KafkaSystemSettings`) adds its own keys to these.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparza.config import BOOL, STR, Config, define_key
from sparza.serde import Serde, load_avro_schema, serde_from_name

__all__ = [
    "STREAM_BOOTSTRAP",
    "STREAM_BOUNDED",
    "STREAM_INTERMEDIATE",
    "STREAM_KEY_SCHEMA",
    "STREAM_KEY_SERDE",
    "STREAM_MSG_SCHEMA",
    "STREAM_MSG_SERDE",
    "STREAM_RESET_OFFSET",
    "SYSTEM_KEY_SERDE",
    "SYSTEM_MSG_SERDE",
    "SystemSettings",
    "stream_serde",
]

_PKG = "sparza.systems"

SYSTEM_KEY_SERDE = define_key("systems.<system>.samza.key.serde", "bytes",
                              "Default serde of the keys of the system's streams (bytes, string, json, avro, "
                              "integer, long, double).", _PKG, kind=STR)
SYSTEM_MSG_SERDE = define_key("systems.<system>.samza.msg.serde", "bytes",
                              "Default serde of the message values of the system's streams.", _PKG, kind=STR)
STREAM_KEY_SERDE = define_key("systems.<system>.streams.<stream>.samza.key.serde", None,
                              "Serde of the stream's keys.", _PKG, kind=STR, fallback=SYSTEM_KEY_SERDE)
STREAM_MSG_SERDE = define_key("systems.<system>.streams.<stream>.samza.msg.serde", None,
                              "Serde of the stream's message values.", _PKG, kind=STR, fallback=SYSTEM_MSG_SERDE)
STREAM_MSG_SCHEMA = define_key("systems.<system>.streams.<stream>.samza.msg.schema", None,
                               "Avro schema (JSON text or a file path) of the stream's values when its msg serde is "
                               "avro; a typed table without delta.table.schema takes its columns from it.", _PKG,
                               kind=STR)
STREAM_KEY_SCHEMA = define_key("systems.<system>.streams.<stream>.samza.key.schema", None,
                               "Avro schema (JSON text or a file path) of the stream's keys when its key serde is "
                               "avro.", _PKG, kind=STR)
STREAM_INTERMEDIATE = define_key("systems.<system>.streams.<stream>.samza.intermediate", False,
                                 "true for a stream between two stages: its partitions carry control messages and "
                                 "its watermark comes from them (set by the planner).", _PKG, kind=BOOL)
STREAM_BOOTSTRAP = define_key("systems.<system>.streams.<stream>.samza.bootstrap", False,
                              "Bootstrap stream: other inputs wait until it reached the offsets seen at start.", _PKG,
                              kind=BOOL)
STREAM_RESET_OFFSET = define_key("systems.<system>.streams.<stream>.samza.reset.offset", False,
                                 "ignore the checkpointed offset at every start: a main input starts at "
                                 "samza.offset.default (its batches are processed again or skipped); an adjunct "
                                 "stream rebuilds its store from the oldest offset", _PKG, kind=BOOL)
STREAM_BOUNDED = define_key("systems.<system>.streams.<stream>.bounded", False,
                            "true: the stream ends at the newest offset seen when the job started (end-of-stream).",
                            _PKG, kind=BOOL)

_SERDES = {"key": (STREAM_KEY_SERDE, STREAM_KEY_SCHEMA), "msg": (STREAM_MSG_SERDE, STREAM_MSG_SCHEMA)}


def stream_serde(config: Mapping[str, str], system: str, stream: str, which: str) -> Serde:
    """The serde of stream ``system.stream``'s keys (``which="key"``) or messages (``which="msg"``): the
    stream's ``samza.<which>.serde``, else the system's, else bytes; an avro serde takes its schema from the
    stream's ``samza.<which>.schema``.

    When the system has a schema registry (``systems.<s>.schema.registry.url``), an avro serde goes through it
    (:class:`~sparza.schemaregistry.RegistryAvroSerde`: the Confluent wire format; the schema is then optional).

    Every system, the runtime and the test runner resolve a stream's serdes here, so they agree."""
    serde_key, schema_key = _SERDES[which]
    if str(serde_key.get(config, system=system, stream=stream)).strip().lower() == "avro":
        from sparza.schemaregistry import registry_serde

        schema = schema_key.get(config, system=system, stream=stream)
        found = registry_serde(config, system, stream, which, load_avro_schema(schema) if schema else None)
        if found is not None:
            return found
    return serde_from_name(serde_key.get(config, system=system, stream=stream),
                           key=serde_key.where(config, system=system, stream=stream),
                           schema=schema_key.get(config, system=system, stream=stream), config=config)


class SystemSettings:
    """Typed access to the ``systems.<system>.*`` keys of one system."""

    def __init__(self, system_name: str, config: Mapping[str, str]) -> None:
        self.system = system_name
        self.config = Config.of(config)
        self._prefix = f"systems.{system_name}."

    def stream_key(self, stream: str, suffix: str) -> str:
        """The full key ``systems.<system>.streams.<stream>.<suffix>`` (for messages that name it)."""
        return f"{self._prefix}streams.{stream}.{suffix}"

    def is_bounded(self, stream: str) -> bool:
        """``systems.<s>.streams.<x>.bounded``."""
        return STREAM_BOUNDED.get(self.config, system=self.system, stream=stream)

    def key_serde(self, stream: str) -> Serde:
        """Serde for keys that are not bytes."""
        return stream_serde(self.config, self.system, stream, "key")

    def msg_serde(self, stream: str) -> Serde:
        """Serde for message values that are not bytes."""
        return stream_serde(self.config, self.system, stream, "msg")
