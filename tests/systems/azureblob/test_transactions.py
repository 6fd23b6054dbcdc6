"""Transactional flushes: names, block ids and content derive from (app id, version), so a replayed
batch overwrites the same blobs byte for byte and nothing is committed twice."""

from __future__ import annotations

import re

from azureblob_helpers import SCHEMA, FaultInjector, download, list_blobs, read_avro

from sparza.metrics import MetricsRegistry
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream

EVENT_MS = 1_600_000_000_000  # 2020-09-13 12:26:40 UTC


def send_batch(producer, container, n, source="job-1/Partition 0", streams=("a", "b")):
    for i in range(n):
        for stream in streams:
            producer.send(source, OutgoingMessageEnvelope(
                SystemStream(container, stream), AvroRecord(SCHEMA, {"id": i, "body": "v" * (i % 40)}),
                partition_key=str(i % 2), timestamp=EVENT_MS + 1000 * i))


def snapshot(account, container):
    return {b.name: download(account, container, b.name) for b in list_blobs(account, container)}


def test_replayed_batch_overwrites_the_same_blobs(make_producer, azure_account, unique_name):
    source = "job-1/Partition 0"
    first = make_producer(unique_name)
    send_batch(first, unique_name, 40)
    first.flush(source, transaction=("job-1/Partition 0", 5))
    before = snapshot(azure_account, unique_name)
    assert len(before) == 4
    for name in before:
        # time from the first message's event timestamp; source, version, sequence, hash of (app id, source)
        assert re.fullmatch(r"[ab]/[01]/2020/09/13/12/2[67]-4[01]-job-1-partition-0-v5-0000-[0-9a-f]{12}\.avro",
                            name), name

    replay = make_producer(unique_name)  # e.g. a new process after a crash between flush and checkpoint
    send_batch(replay, unique_name, 40)
    replay.flush(source, transaction=("job-1/Partition 0", 5))
    assert snapshot(azure_account, unique_name) == before

    replay.flush(source)  # nothing sent: nothing committed
    send_batch(replay, unique_name, 3)
    replay.flush(source, transaction=("job-1/Partition 0", 6))  # the next batch: new blobs
    assert len(snapshot(azure_account, unique_name)) == 8


def test_begin_makes_multi_block_and_rolled_blobs_deterministic(make_producer, azure_account, unique_name):
    source = "job-1/Partition 3"
    options = {"maxFlushThresholdSize": "1024", "maxMessagesPerBlob": "150", "compression.type": "gzip"}
    metrics = MetricsRegistry()
    first = make_producer(unique_name, metrics=metrics, **options)
    first.begin(source, ("job-1/Partition 3", 11))
    send_batch(first, unique_name, 400, source=source, streams=("a",))
    # in a transaction, rolled-over blobs wait for the flush: an aborted batch shows nothing
    assert list_blobs(azure_account, unique_name) == []
    first.flush(source, transaction=("job-1/Partition 3", 11))
    before = snapshot(azure_account, unique_name)
    assert len(before) == 4  # 200 messages per partition key, 150 per blob
    assert metrics.snapshot()[source]["non_transactional_blobs"] == 0

    replay = make_producer(unique_name, **options)
    replay.begin(source, ("job-1/Partition 3", 11))
    send_batch(replay, unique_name, 400, source=source, streams=("a",))
    replay.flush(source, transaction=("job-1/Partition 3", 11))
    assert snapshot(azure_account, unique_name) == before
    import gzip
    ids = sorted(r["id"] for data in before.values() for r in read_avro(gzip.decompress(data)))
    assert ids == list(range(400))


def test_transaction_known_only_at_flush_after_blocks_were_staged_is_counted(make_producer, azure_account,
                                                                             unique_name):
    metrics = MetricsRegistry()
    producer = make_producer(unique_name, metrics=metrics, maxFlushThresholdSize="512")
    send_batch(producer, unique_name, 200, source="s", streams=("a",))
    producer.flush("s", transaction=("job/s", 1))
    assert metrics.snapshot()["s"]["non_transactional_blobs"] == 2
    assert len(list_blobs(azure_account, unique_name)) == 2


def test_small_blobs_of_a_transaction_are_one_put_each_and_big_ones_stage_blocks(make_producer, azure_account,
                                                                                 unique_name):
    """A blob whose content never filled a block is written by one Put Blob at commit (half the requests);
    one that did is staged and committed as a block list. Both read back whole, and a replay rewrites both."""
    source = "job-1/Partition 0"
    injector = FaultInjector(azure_account.blob_service_client())
    metrics = MetricsRegistry()
    producer = make_producer(unique_name, metrics=metrics, service_client=injector, maxFlushThresholdSize="4096",
                             **{"compression.type": "gzip"})
    producer.begin(source, (source, 9))
    send_batch(producer, unique_name, 40, source=source, streams=("small",))    # ~1 KiB: one put
    send_batch(producer, unique_name, 400, source=source, streams=("big",))     # ~10 KiB: blocks
    producer.flush(source, transaction=(source, 9))
    blobs = snapshot(azure_account, unique_name)
    assert len(blobs) == 4
    assert injector.calls["upload_blob"] == 2            # the two "small" partitions
    assert injector.calls["commit_block_list"] == 2      # the two "big" partitions
    assert injector.calls["stage_block"] >= 4
    for name, data in blobs.items():
        stream, partition = name.split("/")[:2]
        expected = [i for i in range(40 if stream == "small" else 400) if i % 2 == int(partition)]
        assert [r["id"] for r in read_avro(data, gzipped=True)] == expected
    snap = metrics.snapshot()["aggregate"]
    assert snap["blobs_committed"] == 4
    assert snap["bytes_sent"] >= sum(len(d) for d in blobs.values())  # uncompressed >= gzip bytes here

    replay = make_producer(unique_name, maxFlushThresholdSize="4096", **{"compression.type": "gzip"})
    replay.begin(source, (source, 9))
    send_batch(replay, unique_name, 40, source=source, streams=("small",))
    send_batch(replay, unique_name, 400, source=source, streams=("big",))
    replay.flush(source, transaction=(source, 9))
    assert snapshot(azure_account, unique_name) == blobs
