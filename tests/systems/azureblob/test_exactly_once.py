"""Several writers on one blob stream, and abandon, are exactly-once against Azurite.

Each "task" is a source on a producer of its own (as tasks in separate Spark Python workers are), all
sending with the same event time so their blobs start in the same second. An independent reader (Azure
SDK + gzip + fastavro/json) must find every record exactly once, and a replay of the whole batch (same
transactions, fresh producers) must leave byte-identical blobs and nothing extra.
"""

from __future__ import annotations

import collections
import json
import re

import pytest
from azureblob_helpers import SCHEMA, FaultInjector, download, list_blobs, read_avro, read_jsonl

from sparza.metrics import MetricsRegistry
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.azureblob import AzureBlobRequestError, BlobOwnedError
from sparza.systems.azureblob.client import BlobStorage
from sparza.systems.azureblob.errors import TransactionStateError
from sparza.systems.azureblob.naming import OWNER_KEY, transaction_owner

EVENT_MS = 1_795_000_000_000  # every record: one second, so every writer's names share their time part
TASKS = 4


def message(container, i, fmt, partitioned):
    body = {"id": i, "body": f"{i:06d}" + "y" * 200}
    payload = AvroRecord(SCHEMA, body) if fmt == "avro" else json.dumps(body).encode()
    return OutgoingMessageEnvelope(SystemStream(container, "copied"), payload, timestamp=EVENT_MS,
                                   partition_key=f"p{i % 2}" if partitioned else None)


def run_batch(make_producer, container, options, ids_of_task, fmt, partitioned, version=7, fail_commit=None,
              account=None):
    """Each task: a producer of its own, begin, send its ids, flush in the transaction (job-1/<task>, version)."""
    for task, ids in ids_of_task.items():
        client = None
        if fail_commit is not None and task == fail_commit[0]:
            client = FaultInjector(account.blob_service_client())
            client.hooks["commit_block_list"] = fail_commit[1]
        producer = make_producer(container, service_client=client, **options)
        source = f"Partition {task}"
        producer.begin(source, (f"job-1/{source}", version))
        for i in ids:
            producer.send(source, message(container, i, fmt, partitioned))
        producer.flush(source, transaction=(f"job-1/{source}", version))


def read_all(account, container):
    blobs = list_blobs(account, container)
    content = {b.name: download(account, container, b.name) for b in blobs}
    ids = collections.Counter()
    for name, data in content.items():
        gz = name.endswith(".gz")
        records = read_avro(data, gz) if ".avro" in name else read_jsonl(data, gz)
        ids.update(int(r["id"]) for r in records)
    return blobs, content, ids


@pytest.mark.parametrize(("rollover", "compression", "fmt", "partitioned"), [
    ("size", "none", "avro", False),
    ("count", "gzip", "avro", True),
    ("size", "gzip", "jsonl", True),
    ("count", "none", "jsonl", False),
])
def test_four_tasks_one_stream_every_record_once_and_a_replayed_batch_is_byte_identical(
        make_producer, azure_account, unique_name, rollover, compression, fmt, partitioned):
    options = {"maxFlushThresholdSize": "4096", "compression.type": compression, "writer.format": fmt}
    options["maxBlobSize" if rollover == "size" else "maxMessagesPerBlob"] = "8192" if rollover == "size" else "40"
    ids_of_task = {t: range(t, 600, TASKS) for t in range(TASKS)}  # 150 records per task
    run_batch(make_producer, unique_name, options, ids_of_task, fmt, partitioned)
    blobs, before, ids = read_all(azure_account, unique_name)
    assert ids == collections.Counter(range(600))
    assert len(blobs) >= 4 * TASKS  # every task rolled over (several blobs per task)
    for blob in blobs:
        task = re.search(r"-partition-(\d)-v7-\d{4}-[0-9a-f]{12}\.", blob.name)
        assert task, blob.name
        assert blob.metadata[OWNER_KEY] == transaction_owner(f"job-1/Partition {task[1]}", 7,
                                                             f"Partition {task[1]}")
        assert blob.metadata["sparzaAppId"] == f"job-1/Partition%20{task[1]}"
    # the whole batch again (a replay after a crash): same names, same bytes, nothing added
    run_batch(make_producer, unique_name, options, ids_of_task, fmt, partitioned)
    assert read_all(azure_account, unique_name)[1] == before


def test_retry_after_a_partial_flush_completes_exactly_its_own_blobs(make_producer, azure_account, unique_name):
    options = {"maxFlushThresholdSize": "2048", "maxMessagesPerBlob": "30"}
    ids_of_task = {t: range(t, 400, TASKS) for t in range(TASKS)}

    def second_commit_fails(blob, n):
        if n == 2:
            raise OSError("connection reset")

    # task 2's flush commits one blob, then fails (a crash in the middle of the flush)
    with pytest.raises(Exception, match="storage unreachable"):
        run_batch(make_producer, unique_name, options, ids_of_task, "avro", False, fail_commit=(2, second_commit_fails),
                  account=azure_account)
    # the batch is retried as a whole (the runtime replays every task that did not checkpoint)
    run_batch(make_producer, unique_name, options, ids_of_task, "avro", False)
    _, before, ids = read_all(azure_account, unique_name)
    assert ids == collections.Counter(range(400))
    run_batch(make_producer, unique_name, options, ids_of_task, "avro", False)
    assert read_all(azure_account, unique_name)[1] == before


def test_a_committed_blob_is_never_replaced_by_another_writer(azure_account, unique_name):
    storage = BlobStorage(azure_account.blob_service_client(), unique_name)
    storage.create_container()
    name = "s/2026/01/01/00/00-00-x.bin"
    storage.stage_block(name, "YWFh", b"first")
    storage.commit_block_list(name, ["YWFh"], {"k": "v"}, owner="txn-a")
    storage.stage_block(name, "YWFh", b"other")
    with pytest.raises(BlobOwnedError, match="already committed by writer txn-a"):
        storage.commit_block_list(name, ["YWFh"], None, owner="txn-b")
    assert download(azure_account, unique_name, name) == b"first"
    storage.commit_block_list(name, ["YWFh"], None, owner="txn-a")  # the same writer again: a replay
    assert download(azure_account, unique_name, name) == b"other"
    assert storage.owner_of(name) == "txn-a"
    # a blob sparza did not write is not overwritten either
    client = azure_account.blob_service_client().get_blob_client(unique_name, "s/foreign.bin")
    client.upload_blob(b"theirs")
    storage.stage_block("s/foreign.bin", "YWFh", b"ours")
    with pytest.raises(BlobOwnedError, match="not sparza"):
        storage.commit_block_list("s/foreign.bin", ["YWFh"], None, owner="txn-a")
    assert download(azure_account, unique_name, "s/foreign.bin") == b"theirs"


def test_a_blob_put_whole_is_never_replaced_by_another_writer(azure_account, unique_name):
    """Put Blob (a transaction's small blobs) follows the same owner rule as a block-list commit."""
    storage = BlobStorage(azure_account.blob_service_client(), unique_name)
    storage.create_container()
    name = "s/2026/01/01/00/00-00-put.bin"
    storage.put_blob(name, b"first", {"k": "v"}, owner="txn-a")
    with pytest.raises(BlobOwnedError, match="already committed by writer txn-a"):
        storage.put_blob(name, b"other", None, owner="txn-b")
    assert download(azure_account, unique_name, name) == b"first"
    storage.put_blob(name, b"again", None, owner="txn-a")  # the same writer again: a replay
    assert download(azure_account, unique_name, name) == b"again"
    assert storage.owner_of(name) == "txn-a"
    client = azure_account.blob_service_client().get_blob_client(unique_name, "s/foreign-put.bin")
    client.upload_blob(b"theirs")
    with pytest.raises(BlobOwnedError, match="not sparza"):
        storage.put_blob("s/foreign-put.bin", b"ours", None, owner="txn-a")
    assert download(azure_account, unique_name, "s/foreign-put.bin") == b"theirs"


@pytest.mark.parametrize("suffix", ["false", "true"])
def test_producers_without_transactions_never_share_a_name(make_producer, azure_account, unique_name, suffix):
    # the reported collision in library use: several producers, one source name, the same second
    producers = [make_producer(unique_name, maxMessagesPerBlob="10", maxFlushThresholdSize="1024",
                               suffixRandomStringToBlobName=suffix) for _ in range(3)]
    for n, producer in enumerate(producers):
        for i in range(n * 100, n * 100 + 35):
            producer.send("task", OutgoingMessageEnvelope(SystemStream(unique_name, "s"),
                                                          AvroRecord(SCHEMA, {"id": i, "body": "b"})))
    for producer in producers:
        producer.flush("task")
    blobs = list_blobs(azure_account, unique_name)
    assert len(blobs) == 12  # 4 blobs (10+10+10+5) per producer
    ids = collections.Counter(r["id"] for b in blobs for r in read_avro(download(azure_account, unique_name, b.name)))
    assert ids == collections.Counter(i for n in range(3) for i in range(n * 100, n * 100 + 35))
    tail = r"-[0-9a-f]{8}" if suffix == "true" else ""
    for blob in blobs:
        assert re.fullmatch(rf"s/\d{{4}}/\d\d/\d\d/\d\d/\d\d-\d\d-task-[0-9a-f]{{12}}-\d{{4}}{tail}\.avro", blob.name)


def test_abandon_of_one_source_leaves_nothing_of_it_visible(make_producer, azure_account, unique_name):
    metrics = MetricsRegistry()
    producer = make_producer(unique_name, metrics=metrics, maxMessagesPerBlob="20", maxFlushThresholdSize="1024")
    stream = SystemStream(unique_name, "s")

    def send(source, ids):
        for i in ids:
            producer.send(source, OutgoingMessageEnvelope(stream, AvroRecord(SCHEMA, {"id": i, "body": source})))

    producer.begin("bad", ("job/bad", 3))
    send("bad", range(100))          # 5 blobs: 4 rolled over (staged) before the failure
    send("plain", range(1000, 1050))  # no transaction: rolled-over blobs are not committed early either
    assert list_blobs(azure_account, unique_name) == []
    producer.abandon("bad")
    producer.flush("plain")
    blobs = list_blobs(azure_account, unique_name)
    assert sorted(r["id"] for b in blobs for r in read_avro(download(azure_account, unique_name, b.name))) \
        == list(range(1000, 1050))
    # the fixed rerun of the failed batch: the same transaction, now flushed
    producer.begin("bad", ("job/bad", 3))
    send("bad", range(100))
    send("plain", range(2000, 2005))
    producer.abandon("plain")
    producer.flush("bad", transaction=("job/bad", 3))
    producer.stop()  # nothing left: abandoned sources are not flushed by stop
    records = [r for b in list_blobs(azure_account, unique_name)
               for r in read_avro(download(azure_account, unique_name, b.name))]
    assert collections.Counter(r["id"] for r in records) == collections.Counter([*range(100), *range(1000, 1050)])


def test_begin_while_another_transaction_is_unflushed_is_refused(make_producer, unique_name):
    producer = make_producer(unique_name)
    producer.begin("t", ("job/t", 1))
    producer.send("t", OutgoingMessageEnvelope(SystemStream(unique_name, "s"),
                                               AvroRecord(SCHEMA, {"id": 1, "body": ""})))
    producer.begin("t", ("job/t", 1))  # the same one again is fine
    with pytest.raises(TransactionStateError, match="flush or abandon them first"):
        producer.begin("t", ("job/t", 2))
    with pytest.raises(TransactionStateError, match="began"):
        producer.flush("t", transaction=("job/t", 2))
    producer.abandon("t")
    producer.begin("t", ("job/t", 2))


def test_request_errors_are_not_mistaken_for_ownership(azure_account, unique_name):
    storage = BlobStorage(azure_account.blob_service_client(), unique_name)
    storage.create_container()
    with pytest.raises(AzureBlobRequestError):  # no such block: a plain request error, not BlobOwnedError
        storage.commit_block_list("s/none.bin", ["YWFh"], None, owner="txn-a")


def test_a_message_without_event_time_is_named_by_the_batch_processing_time(make_producer, azure_account,
                                                                             unique_name):
    """Samza names such blobs by the time they are written; here that is the batch's planned time, which a
    replay of the batch sees again, so the replay still rewrites the very same blob (not 1970/01/01)."""
    planned_ms = 1_795_000_000_000   # 2026-11-18T11:06:40Z
    for _ in range(2):   # the batch and its replay: one blob, the same name
        producer = make_producer(unique_name)
        producer.begin("Partition 0", ("job-1/Partition 0", 3))
        producer.set_processing_time("Partition 0", planned_ms)
        producer.send("Partition 0", OutgoingMessageEnvelope(SystemStream(unique_name, "s"),
                                                             AvroRecord(SCHEMA, {"id": 1, "body": "untimed"})))
        producer.flush("Partition 0", transaction=("job-1/Partition 0", 3))
    names = [b.name for b in list_blobs(azure_account, unique_name)]
    assert len(names) == 1 and names[0].startswith("s/2026/11/18/11/06-40-"), names
