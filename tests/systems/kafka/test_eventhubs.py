"""The Event Hubs mapping: Samza's EventHubs keys -> the exact librdkafka settings, key by key.

Secrets must never show: not in errors, not in the mapped config's repr. The same job tests run
over the protocol path by pointing the mapped system at the test broker (the last test).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparza.config import Config
from sparza.errors import ConfigError
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import Transaction, get_system_factory
from sparza.systems.kafka import (
    EventHubsSystemFactory,
    KafkaSystemAdmin,
    KafkaSystemConsumer,
    KafkaSystemProducer,
    eventhubs_kafka_config,
)
from sparza.systems.kafka.eventhubs import eventhubs_librdkafka_settings

TOKEN = "c2VjcmV0LXNhcy10b2tlbg=="
BASE = {
    "systems.eh.samza.factory": "org.apache.samza.system.eventhub.EventHubSystemFactory",
    "systems.eh.stream.list": "edits",
    "streams.edits.eventhubs.namespace": "my-ns",
    "streams.edits.eventhubs.entitypath": "edits-hub",
    "sensitive.streams.edits.eventhubs.sas.keyname": "RootManageSharedAccessKey",
    "sensitive.streams.edits.eventhubs.sas.token": TOKEN,
}


def test_samza_keys_map_to_sasl_ssl_plain_with_connection_string() -> None:
    settings = eventhubs_librdkafka_settings(Config(BASE), "eh")
    assert settings == {
        "bootstrap.servers": "my-ns.servicebus.windows.net:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
        "sasl.password": ("Endpoint=sb://my-ns.servicebus.windows.net/;"
                          f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={TOKEN}"),
    }


def test_mapped_config_sets_consumer_producer_topic_and_group() -> None:
    config = eventhubs_kafka_config(Config(BASE), "eh")
    for role in ("consumer", "producer"):
        assert config[f"systems.eh.{role}.bootstrap.servers"] == "my-ns.servicebus.windows.net:9093"
        assert config[f"systems.eh.{role}.security.protocol"] == "SASL_SSL"
        assert config[f"systems.eh.{role}.sasl.mechanism"] == "PLAIN"
        assert config[f"systems.eh.{role}.sasl.username"] == "$ConnectionString"
    assert config["systems.eh.streams.edits.samza.physical.name"] == "edits-hub"   # entitypath = topic
    assert config["systems.eh.consumer.group.id"] == "$Default"
    grouped = eventhubs_kafka_config(Config({**BASE, "streams.edits.eventhubs.consumer.group": "sparza"}), "eh")
    assert grouped["systems.eh.consumer.group.id"] == "sparza"
    # What librdkafka gets, through the kafka system's own settings.
    admin = KafkaSystemAdmin("eh", config)
    conf = admin.settings.consumer_conf()
    assert conf["sasl.password"].endswith(TOKEN) and conf["group.id"] == "$Default"
    assert admin.settings.producer_conf()["security.protocol"] == "SASL_SSL"
    assert admin.settings.topic("edits") == "edits-hub"
    assert TOKEN not in repr(config)


def test_namespace_may_be_a_full_host_and_keys_may_be_system_scoped() -> None:
    values = {"systems.eh.stream.list": "a",
              "systems.eh.streams.a.eventhubs.namespace": "ns.servicebus.chinacloudapi.cn",
              "systems.eh.streams.a.eventhubs.sas.keyname": "send",
              "systems.eh.streams.a.eventhubs.sas.token": TOKEN}
    settings = eventhubs_librdkafka_settings(Config(values), "eh")
    assert settings["bootstrap.servers"] == "ns.servicebus.chinacloudapi.cn:9093"
    assert "SharedAccessKeyName=send;" in settings["sasl.password"]


def test_plain_connection_string_with_entity_path() -> None:
    conn = ("Endpoint=sb://other.servicebus.windows.net/;SharedAccessKeyName=listen;"
            f"SharedAccessKey={TOKEN};EntityPath=hub1")
    config = eventhubs_kafka_config(
        Config({"systems.eh.stream.list": "s", "systems.eh.eventhubs.connection.string": conn}), "eh")
    assert config["systems.eh.consumer.bootstrap.servers"] == "other.servicebus.windows.net:9093"
    assert config["systems.eh.consumer.sasl.password"] == conn
    assert config["systems.eh.streams.s.samza.physical.name"] == "hub1"


@pytest.mark.parametrize(("drop", "key"), [
    ("streams.edits.eventhubs.namespace", "streams.edits.eventhubs.namespace"),
    ("sensitive.streams.edits.eventhubs.sas.token", "sensitive.streams.edits.eventhubs.sas.token"),
    ("sensitive.streams.edits.eventhubs.sas.keyname", "sensitive.streams.edits.eventhubs.sas.keyname"),
])
def test_missing_keys_are_named_and_secrets_never_shown(drop: str, key: str) -> None:
    values = {k: v for k, v in BASE.items() if k != drop}
    with pytest.raises(ConfigError) as err:
        eventhubs_librdkafka_settings(Config(values), "eh")
    assert key in str(err.value)
    assert TOKEN not in str(err.value)


def test_streams_of_two_namespaces_or_policies_need_two_systems() -> None:
    two = {**BASE, "systems.eh.stream.list": "edits,clicks", "streams.clicks.eventhubs.namespace": "other-ns",
           "sensitive.streams.clicks.eventhubs.sas.keyname": "RootManageSharedAccessKey",
           "sensitive.streams.clicks.eventhubs.sas.token": TOKEN}
    with pytest.raises(ConfigError, match="one system per namespace"):
        eventhubs_librdkafka_settings(Config(two), "eh")
    policies = {**two, "streams.clicks.eventhubs.namespace": "my-ns",
                "sensitive.streams.clicks.eventhubs.sas.token": "b3RoZXItdG9rZW4="}
    with pytest.raises(ConfigError, match="one system per policy") as err:
        eventhubs_librdkafka_settings(Config(policies), "eh")
    assert TOKEN not in str(err.value) and "b3RoZXItdG9rZW4=" not in str(err.value)


def test_a_bad_connection_string_is_redacted() -> None:
    bad = f"SharedAccessKey={TOKEN}"
    with pytest.raises(ConfigError, match="systems.eh.eventhubs.connection.string") as err:
        eventhubs_librdkafka_settings(Config({"systems.eh.eventhubs.connection.string": bad}), "eh")
    assert TOKEN not in str(err.value)


def test_factory_names_resolve() -> None:
    for name in ("eventhubs", "org.apache.samza.system.eventhub.EventHubSystemFactory"):
        factory = get_system_factory(Config({**BASE, "systems.eh.samza.factory": name}), "eh")
        assert isinstance(factory, EventHubsSystemFactory)


def test_the_protocol_path_works_against_a_broker(kafka_bootstrap: str, unique_name: str,
                                                  topic: Callable[..., str]) -> None:
    """The mapped system with its bootstrap and security overridden for the (plaintext) test broker:
    the stream id ``edits`` reads and writes the event hub's topic, exactly once."""
    hub = topic(2, "-hub")
    config = Config({**BASE, "systems.eh.samza.factory": "eventhubs", "streams.edits.eventhubs.entitypath": hub,
                     "systems.eh.consumer.bootstrap.servers": kafka_bootstrap,
                     "systems.eh.producer.bootstrap.servers": kafka_bootstrap,
                     "systems.eh.consumer.security.protocol": "PLAINTEXT",
                     "systems.eh.producer.security.protocol": "PLAINTEXT",
                     "systems.eh.kafka.read.timeout.ms": "10s"})
    factory = get_system_factory(config, "eh")
    producer = factory.get_producer("eh", config)
    assert isinstance(producer, KafkaSystemProducer)
    producer.register("Partition 0")
    txn = Transaction(f"{unique_name}/Partition 0", 1)
    producer.begin("Partition 0", txn)
    producer.send("Partition 0", OutgoingMessageEnvelope(SystemStream("eh", "edits"), b"hello", partition=1))
    producer.flush("Partition 0", transaction=txn)
    producer.stop()
    admin = factory.get_admin("eh", config)
    meta = admin.get_system_stream_metadata({"edits"})["edits"]
    assert meta.partition_count == 2 and meta.partitions[1].upcoming == "2"   # the record and the marker
    consumer = factory.get_consumer("eh", config)
    assert isinstance(consumer, KafkaSystemConsumer)
    got = list(consumer.read(SystemStreamPartition("eh", "edits", 1), "0", "2"))
    assert [e.message for e in got] == [b"hello"]
    consumer.stop()
