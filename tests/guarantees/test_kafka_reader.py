"""The oracle's Kafka reader on the real broker: what Kafka's ``read_committed`` shows, nothing of an aborted
transaction, every committed copy of a batch written twice, nothing of a transaction still open.

Why: the guarantees harness once failed ``count`` seed 1396 with kill9 (Kafka output) on 5 repeated records: the
kill landed inside a task's Kafka flush, after its records reached the broker and before the commit; the
restart's ``init_transactions`` aborted that transaction and wrote the batch again, as it should. The reader must
count the batch once (the aborted copy is hidden) and still count two committed copies twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

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
    assert read.control == 0


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


def test_an_open_transaction_is_not_read(kafka_bootstrap: str, new_topic: Callable[[str, int], str]) -> None:
    """The reader stops at the last stable offset: the committed record before an open transaction is read, the
    open transaction's records and everything after them are not (a read_committed reader of Kafka cannot see
    them yet), and the read ends rather than waiting for the transaction."""
    topic = new_topic("open", 1)
    committed = _transactional(kafka_bootstrap, f"{topic}-a")
    committed.begin_transaction()
    committed.produce(topic, _value(1), partition=0)
    committed.commit_transaction(30)              # offset 0, its marker 1
    hanging = _transactional(kafka_bootstrap, f"{topic}-c")
    hanging.begin_transaction()
    for i in (4, 5):
        hanging.produce(topic, _value(i), partition=0)
    assert hanging.flush(30) == 0                 # offsets 2 and 3, left open
    committed.begin_transaction()
    committed.produce(topic, _value(6), partition=0)
    committed.commit_transaction(30)              # offset 4: after the open transaction

    read = read_kafka_records(kafka_bootstrap, topic)

    assert read.records == Counter([tuple(json.loads(_value(1)).values())])
    hanging.abort_transaction(30)
    assert read_kafka_records(kafka_bootstrap, topic).records == Counter(
        tuple(json.loads(_value(i)).values()) for i in (1, 6))
