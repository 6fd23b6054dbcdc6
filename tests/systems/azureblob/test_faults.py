"""Timeouts and outages: a fault-injecting wrapper around the real client, and an Azurite of the test's
own that is paused, or stopped mid-flush and restarted. A failed flush commits nothing half-way and a
transactional replay leaves every message exactly once."""

from __future__ import annotations

import itertools
import threading
from collections import Counter

import pytest
from azureblob_helpers import SCHEMA, FaultInjector, download, list_blobs, read_avro

from sparza.devservers.storage import AzuriteProcess
from sparza.metrics import MetricsRegistry
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.azureblob import AzureBlobConnectionError, AzureBlobError, FlushTimeoutError


def send_batch(producer, container, ids, streams=("a",), source="task"):
    for i in ids:
        for stream in streams:
            producer.send(source, OutgoingMessageEnvelope(SystemStream(container, stream),
                                                          AvroRecord(SCHEMA, {"id": i, "body": stream}),
                                                          partition_key="0", timestamp=1_700_000_000_000 + i))


def all_ids(account, container):
    out = Counter()
    for blob in list_blobs(account, container):
        for record in read_avro(download(account, container, blob.name)):
            out[(record["body"], record["id"])] += 1
    return out


def test_flush_timeout_on_stuck_uploads_commits_nothing_and_replay_succeeds(make_producer, azure_account,
                                                                            unique_name):
    injector = FaultInjector(azure_account.blob_service_client())
    release = threading.Event()
    injector.hooks["stage_block"] = lambda blob, n: release.wait(30)
    metrics = MetricsRegistry()
    # 512-byte blocks: the 200 records (~1.2 KiB) fill two blocks before the flush, so phase 1 waits on them
    producer = make_producer(unique_name, metrics=metrics, service_client=injector, flushTimeoutMs="300",
                             maxFlushThresholdSize="512")
    send_batch(producer, unique_name, range(200))
    with pytest.raises(FlushTimeoutError, match="flushTimeoutMs"):
        producer.flush("task")
    assert list_blobs(azure_account, unique_name) == []
    assert metrics.snapshot()["task"]["send_errors"] == 1
    release.set()
    injector.hooks.clear()
    send_batch(producer, unique_name, range(200))  # the caller replays the batch
    producer.flush("task")
    assert all_ids(azure_account, unique_name) == Counter({("a", i): 1 for i in range(200)})


@pytest.mark.parametrize(("threshold", "operation", "key"), [("10485760", "upload_blob", "flushTimeoutMs"),
                                                              ("16", "commit_block_list", "closeTimeoutMs")])
def test_timeout_on_stuck_commit(make_producer, azure_account, unique_name, threshold, operation, key):
    """Phase 2 is bounded: a block-list commit by closeTimeoutMs, a small blob's single Put Blob (an
    upload) by flushTimeoutMs."""
    injector = FaultInjector(azure_account.blob_service_client())
    release = threading.Event()
    injector.hooks[operation] = lambda blob, n: release.wait(30)
    producer = make_producer(unique_name, service_client=injector, closeTimeoutMs="300", flushTimeoutMs="400",
                             maxFlushThresholdSize=threshold)
    send_batch(producer, unique_name, range(5))
    with pytest.raises(FlushTimeoutError, match=key):
        producer.flush("task", transaction=("job/task", 1))
    assert injector.calls[operation] >= 1
    release.set()


def test_failed_upload_raises_and_commits_no_blob_of_the_flush(make_producer, azure_account, unique_name):
    from azure.core.exceptions import ServiceRequestError

    injector = FaultInjector(azure_account.blob_service_client())

    def fail_third(blob, n):
        if n == 3:
            raise ServiceRequestError("injected connection reset")

    injector.hooks["stage_block"] = fail_third
    metrics = MetricsRegistry()
    # 128-byte blocks: each stream's ~600 bytes are staged as blocks (not put whole at commit)
    producer = make_producer(unique_name, metrics=metrics, service_client=injector, maxFlushThresholdSize="128")
    send_batch(producer, unique_name, range(100), streams=("a", "b", "c"))
    with pytest.raises(AzureBlobConnectionError, match="stage block"):
        producer.flush("task")
    assert list_blobs(azure_account, unique_name) == []
    snap = metrics.snapshot()
    assert snap["task"]["azure_connection_errors"] == 1
    assert snap[unique_name]["azure_connection_errors"] == 1
    assert snap["aggregate"]["send_errors"] == 1


@pytest.mark.parametrize("transaction", [None, ("job/task", 3)])
def test_paused_azurite_times_out_the_flush(make_producer, tmp_path, unique_name, transaction):
    """Without a transaction the small blob is staged in phase 1, so the timed-out flush leaves nothing
    that could land later; in one it is a single Put Blob that lands once Azurite resumes, and the
    replay rewrites that same blob: every message once either way."""
    own = AzuriteProcess(tmp_path / "azurite")
    own.start()
    try:
        client = own.account.blob_service_client(retry_total=0, timeout_s=2)
        producer = make_producer(unique_name, account=own.account, service_client=client, flushTimeoutMs="1500")
        send_batch(producer, unique_name, range(10))
        own.pause()
        try:
            with pytest.raises(FlushTimeoutError):
                producer.flush("task", transaction=transaction)
        finally:
            own.resume()
        send_batch(producer, unique_name, range(10))
        producer.flush("task", transaction=transaction)
        assert all_ids(own.account, unique_name) == Counter({("a", i): 1 for i in range(10)})
    finally:
        own.resume()
        own.stop()


def test_azurite_stopped_mid_flush_then_restarted_replay_leaves_each_message_once(make_producer, tmp_path,
                                                                                unique_name):
    own = AzuriteProcess(tmp_path / "azurite")
    own.start()
    try:
        injector = FaultInjector(own.account.blob_service_client(retry_total=1, timeout_s=2))

        commits = itertools.count(1)

        def stop_before_second_commit(blob, n):
            if next(commits) == 2:
                injector.wait_returned(("commit_block_list", "upload_blob"), 1)  # the first (another thread's)
                own.stop()

        # the blobs (~1.8 KiB each) fill no block: each is committed by one Put Blob; hook both kinds of commit
        injector.hooks["commit_block_list"] = injector.hooks["upload_blob"] = stop_before_second_commit
        metrics = MetricsRegistry()
        first = make_producer(unique_name, account=own.account, service_client=injector, metrics=metrics,
                              maxFlushThresholdSize="4096")
        send_batch(first, unique_name, range(300), streams=("a", "b", "c"))
        with pytest.raises(AzureBlobError):
            first.flush("task", transaction=("job/task", 7))
        assert metrics.snapshot()["task"]["azure_connection_errors"] >= 1
        assert metrics.snapshot()["task"]["send_errors"] == 1

        own.start()  # same ports and data directory
        committed_before = {b.name for b in list_blobs(own.account, unique_name)}
        assert 1 <= len(committed_before) < 3  # some blobs were committed before Azurite went down
        replay = make_producer(unique_name, account=own.account, maxFlushThresholdSize="4096")
        send_batch(replay, unique_name, range(300), streams=("a", "b", "c"))
        replay.flush("task", transaction=("job/task", 7))
        names = {b.name for b in list_blobs(own.account, unique_name)}
        assert len(names) == 3
        assert committed_before <= names  # the replay overwrote what the failed flush had committed
        assert all_ids(own.account, unique_name) == Counter(
            {(s, i): 1 for s in ("a", "b", "c") for i in range(300)})
    finally:
        own.stop()
