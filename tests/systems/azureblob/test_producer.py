"""The producer against Azurite: naming, blocks, rollover, formats, compression, metrics, metadata."""

from __future__ import annotations

import io
import re

import fastavro
import pytest
from azureblob_helpers import SCHEMA, download, list_blobs, read_avro, read_jsonl

from sparza.metrics import MetricsRegistry
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.azureblob import SchemaChangeError, UnsupportedMessageError

TS = r"[0-9]{4}/[0-9]{2}/[0-9]{2}/[0-9]{2}/[0-9]{2}-[0-9]{2}"


def env(container: str, stream: str, message: object, partition_key: object = None,
        timestamp: int | None = None) -> OutgoingMessageEnvelope:
    return OutgoingMessageEnvelope(SystemStream(container, stream), message, partition_key=partition_key,
                                   timestamp=timestamp)


def rec(i: int, body: str = "x") -> AvroRecord:
    return AvroRecord(SCHEMA, {"id": i, "body": body})


def test_names_with_and_without_partition_and_suffix(make_producer, azure_account, unique_name):
    plain = make_producer(unique_name)
    plain.send("task-0", env(unique_name, "clicks", rec(1)))
    plain.send("task-0", env(unique_name, "clicks", rec(2), partition_key="partition-0"))
    plain.flush("task-0")
    names = [b.name for b in list_blobs(azure_account, unique_name)]
    assert len(names) == 2
    # outside a transaction: source slug, this producer's random id and its blob counter
    producer_id = plain.identity.id
    assert re.fullmatch(rf"clicks/{TS}-task-0-{producer_id}-000[01]\.avro", names[0]), names
    assert re.fullmatch(rf"clicks/partition-0/{TS}-task-0-{producer_id}-000[01]\.avro", names[1]), names

    other = unique_name + "s"
    suffixed = make_producer(other, suffixRandomStringToBlobName="true", **{"compression.type": "gzip"})
    suffixed.send("task-0", env(other, "clicks", rec(1), partition_key="p7"))
    suffixed.flush("task-0")
    [blob] = [b.name for b in list_blobs(azure_account, other)]
    assert re.fullmatch(rf"clicks/p7/{TS}-task-0-{suffixed.identity.id}-0000-[0-9a-f]{{8}}\.avro\.gz", blob), blob


def test_messages_after_flush_go_to_new_blob_and_same_second_names_do_not_collide(make_producer, azure_account,
                                                                                  unique_name):
    producer = make_producer(unique_name)
    for batch in range(3):
        producer.send("t", env(unique_name, "s", rec(batch)))
        producer.flush("t")
    blobs = list_blobs(azure_account, unique_name)
    assert len(blobs) == 3  # three flushes within a second or two: the producer's counter, nothing overwritten
    ids = sorted(r["id"] for b in blobs for r in read_avro(download(azure_account, unique_name, b.name)))
    assert ids == [0, 1, 2]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_multi_block_blob_reads_back_every_message_in_order(make_producer, azure_account, unique_name, compression):
    metrics = MetricsRegistry()
    producer = make_producer(unique_name, metrics=metrics, maxFlushThresholdSize="4096",
                             **{"compression.type": compression})
    n = 3000
    for i in range(n):
        producer.send("task-1", env(unique_name, "events", rec(i, "b" * (i % 50)), partition_key="0"))
    producer.flush("task-1")
    [blob] = list_blobs(azure_account, unique_name)
    data = download(azure_account, unique_name, blob.name)
    records = read_avro(data, gzipped=compression == "gzip")
    assert [r["id"] for r in records] == list(range(n))
    assert records[7]["body"] == "b" * 7
    block_list = (azure_account.blob_service_client().get_blob_client(unique_name, blob.name)
                  .get_block_list("committed")[0])
    assert len(block_list) > 10
    assert blob.metadata == {"streamName": "events", "rawSizeBytes": blob.metadata["rawSizeBytes"],
                             "numberOfRecords": str(n), "sparzaWriter": f"producer-{producer.identity.id}"}
    snap = metrics.snapshot()
    for group in ("aggregate", unique_name, "task-1"):
        assert snap[group]["messages_sent"] == n
        assert snap[group]["blocks_uploaded"] == len(block_list)
        assert snap[group]["blobs_committed"] == 1
        assert snap[group]["send_errors"] == 0
        assert snap[group]["bytes_sent"] == int(blob.metadata["rawSizeBytes"])
        assert snap[group]["bytes_compressed"] == blob.size
    # The same counts under Samza's names, in Samza's groups (aggregate, <account>_<system>, source).
    for group in ("aggregate", f"{azure_account.account_name}_{unique_name}", "task-1"):
        assert snap[group]["eventWriteRate"] == n
        assert snap[group]["eventWriteByteRate"] == int(blob.metadata["rawSizeBytes"])
        assert snap[group]["eventCompressByteRate"] == blob.size
        assert snap[group]["eventProduceError"] == 0
        assert snap[group]["azureBlockUploadRate"] == len(block_list)
        assert snap[group]["azureBlobCommitRate"] == 1
    assert "azureContainerError" in snap["aggregate"] and "azureContainerError" not in snap["task-1"]
    if compression == "gzip":
        assert snap["aggregate"]["bytes_compressed"] < snap["aggregate"]["bytes_sent"]
    else:
        assert blob.size == int(blob.metadata["rawSizeBytes"])


def test_single_message_larger_than_a_block(make_producer, azure_account, unique_name):
    producer = make_producer(unique_name, maxFlushThresholdSize="1000")
    producer.send("t", env(unique_name, "big", rec(1, "z" * 10_000)))
    producer.send("t", env(unique_name, "big", rec(2, "small")))
    producer.flush("t")
    [blob] = list_blobs(azure_account, unique_name)
    records = read_avro(download(azure_account, unique_name, blob.name))
    assert [(r["id"], len(r["body"])) for r in records] == [(1, 10_000), (2, 5)]


def test_rollover_by_message_count(make_producer, azure_account, unique_name):
    producer = make_producer(unique_name, maxMessagesPerBlob="10")
    for i in range(25):
        producer.send("t", env(unique_name, "s", rec(i)))
    producer.flush("t")
    blobs = list_blobs(azure_account, unique_name)
    contents = sorted([r["id"] for r in read_avro(download(azure_account, unique_name, b.name))] for b in blobs)
    assert contents == [list(range(10)), list(range(10, 20)), list(range(20, 25))]
    assert sorted(b.metadata["numberOfRecords"] for b in blobs) == ["10", "10", "5"]


def test_rollover_by_size_keeps_every_blob_under_the_limit(make_producer, azure_account, unique_name):
    producer = make_producer(unique_name, maxBlobSize="2000", maxFlushThresholdSize="512",
                             **{"compression.type": "gzip"})
    for i in range(60):
        producer.send("t", env(unique_name, "s", rec(i, "p" * 90)))
    producer.flush("t")
    blobs = list_blobs(azure_account, unique_name)
    assert len(blobs) >= 3
    ids = []
    for blob in blobs:
        assert int(blob.metadata["rawSizeBytes"]) <= 2000
        ids += [r["id"] for r in read_avro(download(azure_account, unique_name, blob.name), gzipped=True)]
    assert sorted(ids) == list(range(60))


def test_pre_encoded_bytes_after_a_record_and_dicts_with_configured_schema(make_producer, azure_account,
                                                                           unique_name):
    import json

    producer = make_producer(unique_name, **{f"systems.{unique_name}.streams.typed.avro.schema": json.dumps(SCHEMA)})
    encoded = io.BytesIO()
    fastavro.schemaless_writer(encoded, fastavro.parse_schema(SCHEMA), {"id": 2, "body": "pre"})
    producer.send("t", env(unique_name, "loose", rec(1)))
    producer.send("t", env(unique_name, "loose", encoded.getvalue()))
    producer.send("t", env(unique_name, "typed", {"id": 3, "body": "dict"}))
    producer.send("t", env(unique_name, "typed", encoded.getvalue()))
    with pytest.raises(UnsupportedMessageError, match="schema"):
        producer.send("t", env(unique_name, "untyped", {"id": 4, "body": "no schema"}))
    with pytest.raises(UnsupportedMessageError, match="schema first"):
        producer.send("t", env(unique_name, "untyped", encoded.getvalue()))
    producer.flush("t")
    got = {b.name.split("/")[0]: [r["id"] for r in read_avro(download(azure_account, unique_name, b.name))]
           for b in list_blobs(azure_account, unique_name)}
    assert got == {"loose": [1, 2], "typed": [3, 2]}


def test_schema_change_without_flush_is_refused_and_not_written(make_producer, azure_account, unique_name):
    metrics = MetricsRegistry()
    producer = make_producer(unique_name, metrics=metrics)
    other = dict(SCHEMA, fields=[*SCHEMA["fields"], {"name": "extra", "type": "int", "default": 0}])
    producer.send("t", env(unique_name, "s", rec(1)))
    with pytest.raises(SchemaChangeError, match="flush before changing the schema"):
        producer.send("t", env(unique_name, "s", AvroRecord(other, {"id": 2, "body": "b", "extra": 1})))
    producer.send("t", env(unique_name, "s", AvroRecord(dict(SCHEMA), {"id": 3, "body": "same schema, new dict"})))
    producer.flush("t")
    producer.send("t", env(unique_name, "s", AvroRecord(other, {"id": 4, "body": "b", "extra": 1})))
    producer.flush("t")
    blobs = list_blobs(azure_account, unique_name)
    contents = [[r["id"] for r in read_avro(download(azure_account, unique_name, b.name))] for b in blobs]
    assert sorted(contents) == [[1, 3], [4]]
    assert metrics.snapshot()["t"]["send_errors"] == 1
    assert metrics.snapshot()["t"]["messages_sent"] == 3


def test_jsonl_and_raw_formats(make_producer, azure_account, unique_name):
    producer = make_producer(unique_name, **{"writer.format": "jsonl", "compression.type": "gzip"})
    producer.send("t", env(unique_name, "j", {"a": 1}))
    producer.send("t", env(unique_name, "j", b'{"a": 2}'))
    producer.flush("t")
    [blob] = list_blobs(azure_account, unique_name)
    assert blob.name.endswith(".jsonl.gz")
    assert read_jsonl(download(azure_account, unique_name, blob.name), gzipped=True) == [{"a": 1}, {"a": 2}]

    raw_container = unique_name + "r"
    raw = make_producer(raw_container, **{"writer.format": "raw"})
    raw.send("t", env(raw_container, "r", b"\x00\x01"))
    raw.send("t", env(raw_container, "r", "text"))
    with pytest.raises(UnsupportedMessageError):
        raw.send("t", env(raw_container, "r", {"not": "bytes"}))
    raw.flush("t")
    [blob] = list_blobs(azure_account, raw_container)
    assert blob.name.endswith(".bin")
    assert download(azure_account, raw_container, blob.name) == b"\x00\x01text"


def test_custom_metadata_generator(make_producer, azure_account, unique_name):
    producer = make_producer(unique_name, metadataPropertiesGeneratorFactory=f"{__name__}.TeamMetadata",
                             **{"metadataGeneratorConfig.team": "data"})
    producer.send("t", env(unique_name, "s", rec(1)))
    producer.flush("t")
    [blob] = list_blobs(azure_account, unique_name)
    # the generator's entries, and the writer stamp it cannot drop (commits are checked against it)
    assert blob.metadata == {"team": "data", "records": "1", "sparzaWriter": f"producer-{producer.identity.id}"}


class TeamMetadata:
    def __init__(self, config):
        self.team = config["team"]

    def get_blob_metadata(self, context):
        return {"team": self.team, "records": str(context.number_of_records)}


def test_memory_cap_stages_early_with_many_open_partitions(make_producer, azure_account, unique_name):
    metrics = MetricsRegistry()
    producer = make_producer(unique_name, metrics=metrics, maxBufferedBytes="65536")
    for i in range(3000):
        producer.send("t", env(unique_name, "wide", rec(i, "m" * 80), partition_key=f"p{i % 200:03d}"))
    assert metrics.snapshot()["t"]["blocks_uploaded"] > 0  # staged before any flush, because of the cap
    assert producer.budget.peak < 2 * 65536
    producer.flush("t")
    blobs = list_blobs(azure_account, unique_name)
    assert len(blobs) == 200
    ids = sorted(r["id"] for b in blobs for r in read_avro(download(azure_account, unique_name, b.name)))
    assert ids == list(range(3000))
    assert producer.budget.used == 0
