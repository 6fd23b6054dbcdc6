"""Many threads and sources at once (after Samza's multi-thread producer tests): every message lands in
exactly one committed blob, one failing writer does not disturb the others, flushes interleave with sends."""

from __future__ import annotations

import threading
from collections import Counter

from azureblob_helpers import SCHEMA, download, list_blobs, read_avro

from sparza.metrics import MetricsRegistry
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.azureblob import SchemaChangeError


def message(container, stream, source, i, partition):
    return OutgoingMessageEnvelope(SystemStream(container, stream), AvroRecord(SCHEMA, {"id": i, "body": source}),
                                   partition_key=partition)


def committed(account, container):
    seen = Counter()
    for blob in list_blobs(account, container):
        for record in read_avro(download(account, container, blob.name)):
            seen[(record["body"], record["id"])] += 1
    return seen


def run_threads(targets):
    errors = []

    def guard(fn):
        try:
            fn()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(fn,)) for fn in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


def test_many_threads_many_sources(make_producer, azure_account, unique_name):
    metrics = MetricsRegistry()
    producer = make_producer(unique_name, metrics=metrics, maxFlushThresholdSize="2048", threadPoolCount="3",
                             blockingQueueSize="2")
    sources = [f"task-{n}" for n in range(6)]
    for source in sources:
        producer.register(source)

    def work(source):
        def run():
            for i in range(400):
                producer.send(source, message(unique_name, f"s{i % 3}", source, i, str(i % 4)))
                if i % 150 == 149:
                    producer.flush(source)
            producer.flush(source)
        return run

    assert run_threads([work(s) for s in sources]) == []
    assert committed(azure_account, unique_name) == Counter({(s, i): 1 for s in sources for i in range(400)})
    snap = metrics.snapshot()
    assert snap["aggregate"]["messages_sent"] == 2400
    assert sum(snap[s]["messages_sent"] for s in sources) == 2400
    assert snap[unique_name]["blobs_committed"] == snap["aggregate"]["blobs_committed"] == len(
        list_blobs(azure_account, unique_name))


def test_threads_share_one_writer_while_another_thread_flushes(make_producer, azure_account, unique_name):
    producer = make_producer(unique_name, maxFlushThresholdSize="1024", maxMessagesPerBlob="97")
    stop = threading.Event()

    def sender(n):
        def run():
            for i in range(300):
                producer.send("shared", message(unique_name, "one", f"sender-{n}", i, "0"))
        return run

    def flusher():
        while not stop.is_set():
            producer.flush("shared")
            stop.wait(0.01)

    flush_thread = threading.Thread(target=flusher)
    flush_thread.start()
    errors = run_threads([sender(n) for n in range(4)])
    stop.set()
    flush_thread.join(60)
    producer.flush("shared")
    assert errors == []
    assert committed(azure_account, unique_name) == Counter(
        {(f"sender-{n}", i): 1 for n in range(4) for i in range(300)})


def test_one_failing_writer_does_not_disturb_others(make_producer, azure_account, unique_name):
    producer = make_producer(unique_name)
    other = dict(SCHEMA, name="Other")

    def good():
        for i in range(200):
            producer.send("good", message(unique_name, "g", "good", i, None))
        producer.flush("good")

    def bad():
        producer.send("bad", message(unique_name, "b", "bad", 0, None))
        for i in range(1, 50):
            try:
                producer.send("bad", OutgoingMessageEnvelope(SystemStream(unique_name, "b"),
                                                             AvroRecord(other, {"id": i, "body": "bad"})))
            except SchemaChangeError:
                pass
        producer.flush("bad")

    assert run_threads([good, bad]) == []
    expected = Counter({("good", i): 1 for i in range(200)})
    expected[("bad", 0)] = 1
    assert committed(azure_account, unique_name) == expected
