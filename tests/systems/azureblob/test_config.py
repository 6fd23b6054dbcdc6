"""Bad config fails at construction naming the key; the registry resolves ``azureblob``; write-only errors."""

from __future__ import annotations

import pytest
from azureblob_helpers import account_config

from sparza.config import Config
from sparza.errors import ConfigError
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import SystemProducer, get_system_factory
from sparza.systems.azureblob import (
    AzureBlobSettings,
    AzureBlobSystemFactory,
    AzureBlobSystemProducer,
    WriteOnlySystemError,
    WriterClosedError,
)


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("compression.type", "zip", "one of none, gzip"),
    ("threadPoolCount", "0", "integer >= 1"),
    ("maxFlushThresholdSize", "5000MB", "Azure's largest block"),
    ("maxFlushThresholdSize", "ten", "byte size"),
    ("flushTimeoutMs", "-1", "integer >= 1"),
    ("writer.format", "parquet", "avro, jsonl, raw"),
    ("suffixRandomStringToBlobName", "maybe", "true or false"),
    ("metadataPropertiesGeneratorFactory", "no.such.module.Gen", "importable module"),
])
def test_bad_values_name_the_key(key, value, needle):
    config = {f"systems.outbox.azureblob.{key}": value}
    with pytest.raises(ConfigError, match=needle) as info:
        AzureBlobSystemProducer("outbox", config)
    assert info.value.key == f"systems.outbox.azureblob.{key}"


def test_defaults_are_the_seeds():
    s = AzureBlobSettings.from_config("outbox", {})
    assert (s.compression, s.max_flush_threshold_size, s.max_blob_size, s.max_messages_per_blob) == \
        ("none", 10485760, (1 << 63) - 1, (1 << 63) - 1)
    assert (s.thread_pool_count, s.blocking_queue_size) == (2, 4)
    assert (s.flush_timeout_ms, s.close_timeout_ms) == (180000, 300000)
    assert (s.suffix_random_string, s.writer_format, s.extension) == (False, "avro", ".avro")
    assert AzureBlobSettings.from_config("outbox", {"systems.outbox.azureblob.threadPoolCount": "5"}) \
        .blocking_queue_size == 10


def test_invalid_container_name():
    with pytest.raises(ConfigError, match="container name"):
        AzureBlobSettings.from_config("Bad_Name", {})


def test_proxy_without_host_and_key_without_name():
    with pytest.raises(ConfigError, match="proxy.hostname"):
        AzureBlobSystemProducer("outbox", {"systems.outbox.azureblob.account.name": "a",
                                           "systems.outbox.azureblob.account.key": "k",
                                           "systems.outbox.azureblob.proxy.use": "true"}).start()
    with pytest.raises(ConfigError, match="account.name"):
        AzureBlobSystemProducer("outbox", {"systems.outbox.azureblob.sensitive.account.key": "k"}).start()


def test_registry_and_write_only(azure_account, unique_name):
    config = Config({f"systems.{unique_name}.samza.factory": "azureblob", **account_config(azure_account, unique_name)})
    factory = get_system_factory(config, unique_name)
    assert isinstance(factory, AzureBlobSystemFactory)
    with pytest.raises(WriteOnlySystemError, match="write-only"):
        factory.get_consumer(unique_name, config)
    with pytest.raises(WriteOnlySystemError, match="write-only"):
        factory.get_admin(unique_name, config)
    producer = factory.get_producer(unique_name, config)
    assert isinstance(producer, SystemProducer)
    envelope = OutgoingMessageEnvelope(SystemStream(unique_name, "s"), b"x")
    with pytest.raises(WriterClosedError, match="not started"):
        producer.send("t", envelope)
    producer.start()  # creates the container
    assert azure_account.blob_service_client().get_container_client(unique_name).exists()
    producer.stop()
    with pytest.raises(WriterClosedError, match="stopped"):
        producer.send("t", envelope)
