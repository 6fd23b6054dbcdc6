"""The config keys of a ``kafka`` system and the librdkafka settings built from them.

Samza's spellings: ``systems.<s>.consumer.bootstrap.servers`` and ``systems.<s>.producer.bootstrap.servers``
(either serves both when only one is set), and every other key under ``systems.<s>.consumer.*`` /
``systems.<s>.producer.*`` is handed to librdkafka unchanged (``consumer.isolation.level``,
``producer.linger.ms``, ``consumer.security.protocol``...). The :class:`KafkaSystemSettings` getters
are the only place that reads these keys; secrets among them are never shown.
"""

from __future__ import annotations

from typing import Any

from sparza.config import BOOL, DURATION_MS, INT, STR, define_key, is_secret_key
from sparza.config.shared import JOB_ID, JOB_NAME
from sparza.errors import ConfigError
from sparza.systems.settings import SystemSettings

__all__ = ["CONTROL_PRODUCER_HEADER", "CONTROL_TYPE_HEADER", "TIMESTAMP_HEADER", "KafkaSystemSettings",
           "redact_conf"]

_PKG = "systems.kafka"
_CONSUMER_SERVERS = define_key("systems.<system>.consumer.bootstrap.servers", None,
                               "Kafka brokers (host:port,...) the system reads from (and writes to, without "
                               "producer.bootstrap.servers).", _PKG, kind=STR)
_PRODUCER_SERVERS = define_key("systems.<system>.producer.bootstrap.servers", None,
                               "Kafka brokers the system writes to (default: consumer.bootstrap.servers).", _PKG,
                               kind=STR, fallback=_CONSUMER_SERVERS)
_CONSUMER = define_key("systems.<system>.consumer.*", None,
                       "Any librdkafka consumer setting, passed as is (isolation.level defaults to read_committed).",
                       _PKG)
_PRODUCER = define_key("systems.<system>.producer.*", None, "Any librdkafka producer setting, passed as is.", _PKG)
_TRANSACTIONS_TOPIC = define_key("systems.<system>.kafka.transactions.topic", "sparza-transactions",
                                 "One-partition topic whose consumer-group offsets record each task's last committed "
                                 "output transaction (created when missing; holds no records).", _PKG, kind=STR)
_READ_TIMEOUT = define_key("systems.<system>.kafka.read.timeout.ms", "60s",
                           "How long a read waits for the messages of a planned offset range before it fails.", _PKG,
                           kind=DURATION_MS)
_REQUEST_TIMEOUT = define_key("systems.<system>.kafka.request.timeout.ms", "30s",
                              "Timeout of admin requests and transaction operations (metadata, offsets, commit).",
                              _PKG, kind=DURATION_MS)
_MONITORING_COMMIT = define_key("systems.<system>.kafka.monitoring.group.commit", True,
                                "Also commit each read's start offset to consumer group <job.name>-<job.id> (or "
                                "consumer.group.id) so Kafka lag tools work; monitoring only, never read back.", _PKG,
                                kind=BOOL)
_SAMZA_TOPIC = define_key("streams.<stream>.samza.physical.name", None,
                          "Samza's spelling of the Kafka topic of stream <stream> "
                          "(systems.<s>.streams.<stream>.samza.physical.name wins when both are set).", _PKG, kind=STR)
_TOPIC = define_key("systems.<system>.streams.<stream>.samza.physical.name", None,
                    "The Kafka topic of stream <stream> (default: the stream name); Samza's "
                    "streams.<stream>.samza.physical.name is accepted too.", _PKG, kind=STR, fallback=_SAMZA_TOPIC)
_AUTO_OFFSET_RESET = define_key("systems.<system>.consumer.auto.offset.reset", "error",
                                "Where a task whose checkpointed offset was deleted before it read it (the topic's "
                                "retention) resumes: smallest, earliest or beginning (Samza's and Kafka's names: at "
                                "the oldest message left, the job saying what it skipped); anything else: the job "
                                "stops naming the gap. Readers themselves always get librdkafka's 'error'.", _PKG,
                                kind=STR)
_REPLICATION = define_key("systems.<system>.default.stream.replication.factor", -1,
                          "Replication factor of topics sparza creates (-1: the broker's default).", _PKG, kind=INT)

CONTROL_TYPE_HEADER = "sparza.type"
"""Header carrying the MessageType byte of control messages (watermark 1, end-of-stream 2); absent for user data."""
TIMESTAMP_HEADER = "sparza.timestamp"
"""Header carrying an event time Kafka's record timestamp cannot hold (0, which librdkafka reads as "now",
or negative), in decimal ms."""
CONTROL_PRODUCER_HEADER = "sparza.producer"
"""Header naming the task that wrote a control message (control messages are reconciled per producer)."""

# Keys under consumer.*/producer.* that are Samza's or sparza's own, not librdkafka's (zookeeper.connect:
# Samza's old consumer found brokers through ZooKeeper; librdkafka uses bootstrap.servers and refuses it).
_NOT_LIBRDKAFKA = {"factory", "zookeeper.connect"}


def redact_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """A copy of a librdkafka conf fit for logs and errors: secret values replaced."""
    return {k: ("<redacted>" if is_secret_key(k) or k in ("sasl.password", "sasl.oauthbearer.config")
                else v) for k, v in conf.items()}


class KafkaSystemSettings(SystemSettings):
    """Typed access to the ``systems.<system>.*`` keys of one kafka system."""

    def topic(self, stream: str) -> str:
        """The Kafka topic of ``stream``: its physical name (system-scoped or Samza's top-level
        ``streams.<x>.samza.physical.name``), else the stream name itself."""
        return _TOPIC.get(self.config, system=self.system, stream=stream) or stream

    # --- librdkafka settings -------------------------------------------------------------------
    def _passthrough(self, role: str) -> dict[str, str]:
        sub = (_CONSUMER if role == "consumer" else _PRODUCER).subset(self.config, system=self.system)
        return {k: v for k, v in sub.items() if k not in _NOT_LIBRDKAFKA}

    def bootstrap_servers(self, role: str = "consumer") -> str:
        """The brokers for ``role`` (consumer or producer); each falls back to the other."""
        first, second = (_CONSUMER_SERVERS, _PRODUCER_SERVERS) if role == "consumer" else \
            (_PRODUCER_SERVERS, _CONSUMER_SERVERS)
        value = first.get(self.config, system=self.system) or second.get(self.config, system=self.system)
        if value:
            return value
        raise ConfigError(_CONSUMER_SERVERS.name(system=self.system), None,
                          f"the Kafka brokers (host:port,...) of system {self.system!r} "
                          "(for a local broker run 'sparza dev-kafka start')")

    def consumer_conf(self) -> dict[str, Any]:
        """librdkafka settings of consumers: ``consumer.*`` plus sparza's defaults (read_committed,
        no auto commit, no offset store: offsets live in task checkpoints)."""
        # fetch.wait.max.ms: reads only ask for offsets that exist, so a long broker-side wait for more
        # data only delays the end of a range (librdkafka's 500 ms default cost 0.5 s per read).
        conf: dict[str, Any] = {"isolation.level": "read_committed", "group.id": self.monitoring_group,
                                "fetch.wait.max.ms": 20, "log_level": 3}
        conf.update(self._passthrough("consumer"))
        conf["bootstrap.servers"] = self.bootstrap_servers("consumer")
        # What the reader relies on, whatever the config says: it assigns partitions itself.
        conf.update({"enable.auto.commit": False, "allow.auto.create.topics": False, "enable.auto.offset.store": False,
                     "enable.partition.eof": True, "auto.offset.reset": "error"})
        return conf

    def admin_conf(self) -> dict[str, Any]:
        """librdkafka settings of admin clients: the consumer's connection settings."""
        kept = ("bootstrap.", "security.", "sasl.", "ssl.", "client.", "socket.", "broker.", "metadata.",
                "api.version", "log_level", "debug")
        conf: dict[str, Any] = {k: v for k, v in self._passthrough("consumer").items() if k.startswith(kept)}
        conf.setdefault("log_level", 3)
        # A metadata request must not create the topic it asks about (a broker with auto.create.topics.enable,
        # Kafka's default, would): a missing input is an error, not an empty new topic.
        conf["allow.auto.create.topics"] = False
        conf["bootstrap.servers"] = self.bootstrap_servers("consumer")
        return conf

    def producer_conf(self) -> dict[str, Any]:
        """librdkafka settings of producers: ``producer.*`` (idempotent unless configured otherwise)."""
        conf: dict[str, Any] = {"enable.idempotence": True, "linger.ms": 5, "log_level": 3}
        conf.update(self._passthrough("producer"))
        conf["bootstrap.servers"] = self.bootstrap_servers("producer")
        return conf

    # --- sparza's own keys ---------------------------------------------------------------------
    @property
    def monitoring_group(self) -> str:
        """The consumer group input offsets are committed to: ``consumer.group.id``, else
        ``<job.name>-<job.id>``, else ``sparza``."""
        explicit = self._passthrough("consumer").get("group.id", "").strip()
        if explicit:
            return explicit
        name = JOB_NAME.get(self.config)
        return f"{name}-{JOB_ID.get(self.config)}" if name else "sparza"

    @property
    def commit_monitoring_offsets(self) -> bool:
        """``systems.<s>.kafka.monitoring.group.commit``."""
        return _MONITORING_COMMIT.get(self.config, system=self.system)

    @property
    def transactions_topic(self) -> str:
        """``systems.<s>.kafka.transactions.topic``."""
        return _TRANSACTIONS_TOPIC.get(self.config, system=self.system)

    @property
    def read_timeout_s(self) -> float:
        """``systems.<s>.kafka.read.timeout.ms`` in seconds."""
        return _READ_TIMEOUT.get(self.config, system=self.system) / 1000.0

    @property
    def request_timeout_s(self) -> float:
        """``systems.<s>.kafka.request.timeout.ms`` in seconds."""
        return _REQUEST_TIMEOUT.get(self.config, system=self.system) / 1000.0

    def check(self) -> None:
        """Raise :class:`ConfigError` for the first setting that cannot work: sparza's own keys, then every
        librdkafka setting under ``consumer.*``/``producer.*`` as librdkafka itself judges it (name and range;
        building a client object validates its config without waiting for a broker)."""
        from confluent_kafka import Consumer, KafkaException, Producer

        _ = (self.read_timeout_s, self.request_timeout_s, self.replication_factor, self.transactions_topic)
        for role, make, conf in (("producer", Producer, self.producer_conf()),
                                 ("consumer", Consumer, self.consumer_conf())):
            try:
                client = make({**conf, "log_level": 0})
            except (KafkaException, ValueError, TypeError) as exc:
                error = exc.args[0] if exc.args else exc
                text = error.str() if hasattr(error, "str") else str(error)
                name = next((k for k in self._passthrough(role) if f'"{k}"' in text or f"'{k}'" in text
                             or f" {k}" in text), None)
                key = f"{self._prefix}{role}.{name}" if name else f"{self._prefix}{role}.*"
                raise ConfigError(key, self._passthrough(role).get(name) if name else None, "",
                                  message=f"config key '{key}': librdkafka refuses the {role} settings: {text}"
                                  ) from exc
            if role == "consumer":
                client.close()
            else:
                del client

    @property
    def skips_deleted_messages(self) -> bool:
        """``systems.<s>.consumer.auto.offset.reset`` is smallest, earliest or beginning (see the key)."""
        return _AUTO_OFFSET_RESET.get(self.config, system=self.system).strip().lower() in (
            "smallest", "earliest", "beginning")

    @property
    def replication_factor(self) -> int:
        """``systems.<s>.default.stream.replication.factor`` (-1: the broker's default)."""
        return _REPLICATION.get(self.config, system=self.system)

