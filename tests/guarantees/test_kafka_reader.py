"""The oracle's Kafka reader against the real (Tansu) broker: what Kafka's ``read_committed`` shows, and
nothing of an aborted transaction, although Tansu's own ``read_committed`` answer does show those.

Why: the guarantees harness once failed ``count`` seed 1396 with kill9 (Kafka output) on 5 repeated
records: the kill landed inside a task's Kafka flush, after its records reached the broker and before
the commit; the restart's ``init_transactions`` aborted that transaction and wrote the batch again, as
it should, but Tansu shows aborted records to ``read_committed`` readers, so the check counted the batch
twice. The reader now drops records of aborted transactions by the log's own abort markers, as a Kafka
broker and librdkafka would, and still counts every committed copy.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparza.testing.kafkalog import transaction_offsets
from sparza.testing.oracle import read_kafka_records

pytestmark = pytest.mark.guarantees


@pytest.fixture
def new_topic(kafka_bootstrap: str, unique_name: str) -> Callable[[str, int], str]:
    def make(suffix: str, partitions: int = 1) -> str:
        name = f"{unique_name}-{suffix}"
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})   # kept alive until the topic exists
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        return name

    return make


def _value(i: int, tag: str = "c") -> bytes:
    return json.dumps({"id": i, "key": f"k{i % 3}", "val": i, "aux": 0, "tag": tag}).encode()


def _transactional(bootstrap: str, txn_id: str, **conf: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **conf})
    producer.init_transactions(30)
    return producer


def test_records_of_a_transaction_killed_before_its_commit_are_not_read(kafka_bootstrap: str,
                                                                        new_topic: Callable[[str, int], str]) -> None:
    topic = new_topic("killed", 2)
    first = _transactional(kafka_bootstrap, f"{topic}-task0")
    first.begin_transaction()
    for i in range(3):
        first.produce(topic, _value(i), partition=i % 2)
    first.commit_transaction(30)
    # The batch in flight when the process died: its records reached the broker, its commit never did.
    zombie = _transactional(kafka_bootstrap, f"{topic}-task1", **{"compression.type": "lz4"})
    zombie.begin_transaction()
    for i in range(10, 15):
        zombie.produce(topic, _value(i), partition=i % 2)
    assert zombie.flush(30) == 0
    # The restart: init_transactions aborts the open transaction, and the batch is written again.
    restart = _transactional(kafka_bootstrap, f"{topic}-task1")
    restart.begin_transaction()
    for i in range(10, 15):
        restart.produce(topic, _value(i), partition=i % 2)
    restart.commit_transaction(30)
    # Records of another, non-transactional producer are read as they are.
    plain = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    plain.produce(topic, _value(20), partition=0)
    plain.flush(30)

    read = read_kafka_records(kafka_bootstrap, topic)

    expected = Counter(tuple(json.loads(_value(i)).values()) for i in [0, 1, 2, 10, 11, 12, 13, 14, 20])
    assert read.records == expected
    assert (read.aborted, read.control) == (5, 0)


def test_every_committed_copy_is_still_read(kafka_bootstrap: str, new_topic: Callable[[str, int], str]) -> None:
    """A batch committed twice (what the check must catch) shows twice; an abort of another producer in
    between takes nothing of it."""
    topic = new_topic("twice", 1)
    one = _transactional(kafka_bootstrap, f"{topic}-a")
    other = _transactional(kafka_bootstrap, f"{topic}-b")
    for producer in (one, other):
        producer.begin_transaction()
    for i in range(4):
        one.produce(topic, _value(i), partition=0)
        other.produce(topic, _value(100 + i), partition=0)
    assert one.flush(30) == 0 and other.flush(30) == 0
    other.abort_transaction(30)
    one.commit_transaction(30)
    one.begin_transaction()
    for i in range(4):
        one.produce(topic, _value(i), partition=0)
    one.commit_transaction(30)

    read = read_kafka_records(kafka_bootstrap, topic)

    assert read.records == Counter({tuple(json.loads(_value(i)).values()): 2 for i in range(4)})
    assert read.aborted == 4


def test_the_log_reader_tells_aborted_committed_and_open_transactions_apart(
        kafka_bootstrap: str, new_topic: Callable[[str, int], str]) -> None:
    """A transaction with no marker yet is neither committed nor aborted: its offsets are ``open`` (a Kafka
    read_committed reader stops before them: Tansu's last stable offset is then 0, so the oracle reads
    nothing of such a partition)."""
    topic = new_topic("open", 1)
    committed = _transactional(kafka_bootstrap, f"{topic}-a")
    committed.begin_transaction()
    committed.produce(topic, _value(1), partition=0)
    committed.commit_transaction(30)              # offset 0, its marker 1
    aborted = _transactional(kafka_bootstrap, f"{topic}-b")
    aborted.begin_transaction()
    aborted.produce(topic, _value(2), partition=0)
    assert aborted.flush(30) == 0                 # offset 2
    aborted.abort_transaction(30)                 # its marker 3
    hanging = _transactional(kafka_bootstrap, f"{topic}-c")
    hanging.begin_transaction()
    for i in (4, 5):
        hanging.produce(topic, _value(i), partition=0)
        assert hanging.flush(30) == 0             # offsets 4 and 5, one record per batch
    host, port = kafka_bootstrap.rsplit(":", 1)

    offsets = transaction_offsets(host, int(port), topic, 0, 6)

    assert (offsets.aborted, offsets.open) == ({2}, {4, 5})
    hanging.abort_transaction(30)
