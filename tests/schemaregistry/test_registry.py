"""The registry ``avro`` serde on the real Apicurio Registry (and the real Kafka broker of the test session):
what it writes is read by the independent decoder of ``oracle.py`` and the reverse; schemas are cached; a
compatible change registers, an incompatible one is refused naming the subject and the version."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from sparza.config import Config
from sparza.errors import ConfigError, DataError
from sparza.host import free_port
from sparza.schemaregistry import (
    IncompatibleSchemaError,
    RegistryAvroSerde,
    SchemaNotRegisteredError,
    SchemaRegistryUnavailableError,
    UnknownSchemaIdError,
    client_for,
)
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec, check_registry_schemas
from sparza.systems.kafka import KafkaSystemAdmin, KafkaSystemConsumer, KafkaSystemProducer
from sparza.systems.settings import stream_serde

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.schemaregistry import oracle  # noqa: E402

V1 = {"type": "record", "name": "Order", "namespace": "shop",
      "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"},
                 {"name": "price", "type": "double"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "gift", "type": "boolean", "default": False}]}   # compatible
V3 = {**V1, "fields": [{"name": "id", "type": "string"}, *V1["fields"][1:]]}                  # id long -> string


def records(n: int, seed: int) -> list[dict[str, Any]]:
    """Generated orders (negative and huge ids, non-ASCII items, odd prices)."""
    rng = random.Random(seed)
    return [{"id": rng.randrange(-2**62, 2**62),
             "item": "".join(rng.choice("abç€ 7") for _ in range(rng.randrange(12))),
             "price": rng.uniform(-1e9, 1e9)} for _ in range(n)]


def config_for(url: str, stream: str, schema: dict[str, Any] | None, **extra: str) -> Config:
    values = {"systems.k.samza.factory": "kafka", "systems.k.schema.registry.url": url,
              "systems.k.consumer.bootstrap.servers": "127.0.0.1:1",
              f"systems.k.streams.{stream}.samza.msg.serde": "avro", **extra}
    if schema is not None:
        import json

        values[f"systems.k.streams.{stream}.samza.msg.schema"] = json.dumps(schema)
    return Config(values)


def serde_for(url: str, stream: str, schema: dict[str, Any] | None, **extra: str) -> RegistryAvroSerde:
    serde = stream_serde(config_for(url, stream, schema, **extra), "k", stream, "msg")
    assert isinstance(serde, RegistryAvroSerde)
    return serde


def test_written_records_are_the_confluent_wire_format_the_independent_decoder_reads(
        registry_url: str, unique_name: str) -> None:
    serde = serde_for(registry_url, unique_name, V1)
    written = records(300, seed=1)
    framed = [serde.to_bytes(r) for r in written]
    assert oracle.versions(registry_url, f"{unique_name}-value") == [1]  # TopicNameStrategy, registered once
    ids = {oracle.unframe(f)[0] for f in framed}
    assert len(ids) == 1
    (schema_id,) = ids
    assert oracle.schema_by_id(registry_url, schema_id) == V1
    assert [oracle.decode(V1, oracle.unframe(f)[1]) for f in framed] == written


def test_records_of_the_independent_encoder_read_back(registry_url: str, unique_name: str) -> None:
    schema_id = oracle.register(registry_url, f"{unique_name}-value", V1)
    written = records(300, seed=2)
    framed = [oracle.frame(schema_id, oracle.encode(V1, r)) for r in written]
    reader = serde_for(registry_url, unique_name, None)  # no schema configured: read as written
    assert [reader.from_bytes(f) for f in framed] == written


def test_schemas_are_cached_not_asked_for_per_message(registry_url: str, unique_name: str) -> None:
    serde = serde_for(registry_url, unique_name, V1)
    client = client_for(serde.endpoint)
    before = client.requests
    framed = [serde.to_bytes(r) for r in records(500, seed=3)]
    fresh = serde_for(registry_url, unique_name, V1)   # another serde of the same process shares the client's cache
    assert len([fresh.from_bytes(f) for f in framed]) == 500
    assert client.requests - before <= 2, f"{client.requests - before} registry requests for 1,000 messages"


def test_a_compatible_change_registers_a_new_version_and_old_records_read_with_the_default(
        registry_url: str, unique_name: str) -> None:
    old = [serde_for(registry_url, unique_name, V1).to_bytes(r) for r in records(50, seed=4)]
    v2 = serde_for(registry_url, unique_name, V2)
    v2.check()
    new = v2.to_bytes({**records(1, seed=5)[0], "gift": True})
    assert oracle.versions(registry_url, f"{unique_name}-value") == [1, 2]
    assert oracle.unframe(new)[0] != oracle.unframe(old[0])[0]
    assert [v2.from_bytes(f) for f in old] == [{**r, "gift": False} for r in records(50, seed=4)]
    assert v2.from_bytes(new)["gift"] is True
    v1_reader = serde_for(registry_url, unique_name, V1)
    assert "gift" not in v1_reader.from_bytes(new)   # the old reader resolves the new record into its schema


def test_an_incompatible_change_is_refused_naming_subject_and_version(registry_url: str, unique_name: str) -> None:
    serde_for(registry_url, unique_name, V1).to_bytes(records(1, seed=6)[0])
    serde_for(registry_url, unique_name, V2).to_bytes({**records(1, seed=7)[0], "gift": True})
    v3 = serde_for(registry_url, unique_name, V3)
    subject = f"{unique_name}-value"
    key = f"systems.k.streams.{unique_name}.samza.msg.schema"
    with pytest.raises(IncompatibleSchemaError) as checked:   # before anything is written: what start checks
        check_registry_schemas(config_for(registry_url, unique_name, V3))
    for error in (checked.value, _raises(lambda: v3.to_bytes({"id": "x", "item": "y", "price": 1.0}))):
        assert isinstance(error, ConfigError) and not isinstance(error, DataError)  # fails the job, never dead-lettered
        text = str(error)
        assert f"subject '{subject}'" in text and "version 2" in text and "BACKWARD" in text and key in text, text
    assert oracle.versions(registry_url, subject) == [1, 2]


def _raises(fn: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def test_without_auto_registration_an_unregistered_schema_fails_at_start(registry_url: str, unique_name: str) -> None:
    config = config_for(registry_url, unique_name, V1, **{"systems.k.schema.registry.auto.register.schemas": "false"})
    with pytest.raises(SchemaNotRegisteredError, match=f"subject '{unique_name}-value'"):
        check_registry_schemas(config)
    oracle.register(registry_url, f"{unique_name}-value", V1)
    check_registry_schemas(config)
    serde = stream_serde(config, "k", unique_name, "msg")
    assert oracle.decode(V1, oracle.unframe(serde.to_bytes(records(1, seed=8)[0]))[1]) == records(1, seed=8)[0]


def test_unknown_schema_ids_are_data_errors_and_a_missing_registry_is_not(registry_url: str, unique_name: str) -> None:
    serde = serde_for(registry_url, unique_name, V1)
    with pytest.raises(UnknownSchemaIdError, match="schema id 987654321") as info:
        serde.from_bytes(oracle.frame(987_654_321, oracle.encode(V1, records(1, seed=9)[0])))
    assert isinstance(info.value, DataError)
    down = serde_for(f"http://127.0.0.1:{free_port()}/apis/ccompat/v7", unique_name, V1,
                     **{"systems.k.schema.registry.request.timeout.ms": "1s"})
    with pytest.raises(SchemaRegistryUnavailableError) as unavailable:
        down.from_bytes(oracle.frame(1, b""))
    assert isinstance(unavailable.value, ConnectionError) and not isinstance(unavailable.value, DataError)


def test_kafka_producer_and_consumer_carry_registry_avro(registry_url: str, kafka_bootstrap: str,
                                                        unique_name: str) -> None:
    topic = unique_name
    config = Config({**config_for(registry_url, topic, V1), "systems.k.consumer.bootstrap.servers": kafka_bootstrap})
    KafkaSystemAdmin("k", config).create_stream(StreamSpec(topic, 2))
    producer = KafkaSystemProducer("k", config)
    producer.register("loader")
    written = records(200, seed=10)
    for r in written:
        producer.send("loader", OutgoingMessageEnvelope(SystemStream("k", topic), r, key=str(r["id"]).encode()))
    producer.flush("loader")
    producer.stop()
    consumer = KafkaSystemConsumer("k", config)
    meta = KafkaSystemAdmin("k", config).get_system_stream_metadata({topic})[topic]
    got = []
    for partition, pm in meta.partitions.items():
        for env in consumer.read(SystemStreamPartition("k", topic, partition), "0", pm.upcoming, include_control=False):
            schema_id, payload = oracle.unframe(env.message)
            got.append(oracle.decode(oracle.schema_by_id(registry_url, schema_id), payload))
    consumer.stop()
    assert sorted(got, key=lambda r: r["id"]) == sorted(written, key=lambda r: r["id"])
