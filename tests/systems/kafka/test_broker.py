"""The development and test broker (``sparza.devservers.kafka``): Apache Kafka in KRaft mode on loopback.

What the product relies on, checked on the broker itself: a partition's end after a multi-record producer request
is its last offset + 1, records of an aborted transaction are hidden from ``read_committed`` readers, the last
stable offset stops at an open transaction, and a stopped or killed (``kill -9``) broker comes back on the same
ports with its topics; a three-node cluster keeps serving a topic when the leader of its partition dies.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparza.devservers.kafka import KafkaBroker, KafkaCluster, find_kafka


@pytest.fixture
def broker(kafka_broker: KafkaBroker) -> KafkaBroker:
    """The session's broker."""
    return kafka_broker


def _create(servers: str, name: str, partitions: int = 1, replicas: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(name, partitions, replicas)]).values():
        future.result(30)


def _read_committed(servers: str, topic: str, partition: int = 0) -> list[bytes]:
    """Every value a read_committed reader sees in the partition, up to its last stable offset."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "test-broker", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        position = 0
        while position < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
            position = msg.offset() + 1
        return values
    finally:
        consumer.close()


def test_the_install_is_the_pinned_apache_kafka() -> None:
    install = find_kafka()
    jars = {p.name for p in install.libs.glob("*.jar")}
    assert f"kafka_2.13-{install.version}.jar" in jars
    for module in ("kafka-server", "kafka-storage", "kafka-raft", "kafka-metadata", "kafka-group-coordinator",
                   "kafka-transaction-coordinator", "kafka-clients"):
        assert f"{module}-{install.version}.jar" in jars


def test_the_end_after_a_multi_record_request_is_the_last_offset_plus_one(broker: KafkaBroker) -> None:
    _create(broker.bootstrap_servers, "broker-batches")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50})
    for size in (1, 3, 10):  # three requests of 1, 3 and 10 records
        for i in range(size):
            producer.produce("broker-batches", value=b"%d" % i, partition=0)
        assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("broker-batches", 0), timeout=10) == (0, 14)
    finally:
        consumer.close()


def test_read_committed_hides_aborted_records_and_stops_at_an_open_transaction(broker: KafkaBroker) -> None:
    servers = broker.bootstrap_servers
    _create(servers, "broker-txns")
    producer = Producer({"bootstrap.servers": servers, "transactional.id": "test-broker-txns", "linger.ms": 5})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("broker-txns", value=f"{outcome}-{i}".encode(), partition=0)
        producer.flush(10)
        (producer.commit_transaction if outcome == "commit" else producer.abort_transaction)(30)
    producer.begin_transaction()  # left open: the last stable offset stops before it
    producer.produce("broker-txns", value=b"open", partition=0)
    producer.flush(10)
    expected = [f"commit-{i}".encode() for i in range(3)] * 2
    assert _read_committed(servers, "broker-txns") == expected
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "g", "isolation.level": "read_committed"})
    try:
        # 3 committed + marker, 3 aborted + marker, 3 committed + marker: the open transaction starts at 12.
        assert consumer.get_watermark_offsets(TopicPartition("broker-txns", 0), timeout=10) == (0, 12)
    finally:
        consumer.close()
    producer.abort_transaction(30)


def test_a_broker_comes_back_with_its_topics_after_a_stop_and_after_a_kill(tmp_path: Path) -> None:
    proc = KafkaBroker(tmp_path, quick=True)
    proc.start()
    try:
        _create(proc.bootstrap_servers, "kept")
        producer = Producer({"bootstrap.servers": proc.bootstrap_servers, "acks": "all"})
        for i in range(20):
            producer.produce("kept", value=b"%d" % i, partition=0)
        assert producer.flush(10) == 0
        port = proc.port
        for stop in (proc.stop, proc.kill):
            stop()
            assert not proc.is_running()
            proc.start()
            assert proc.port == port
            assert _read_committed(proc.bootstrap_servers, "kept") == [b"%d" % i for i in range(20)]
    finally:
        proc.stop()


def test_a_cluster_keeps_a_topic_when_its_leader_dies(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, quick=True)
    cluster.start()
    try:
        servers = cluster.bootstrap_servers
        _create(servers, "replicated", replicas=3)
        producer = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True})
        for i in range(10):
            producer.produce("replicated", value=b"%d" % i, partition=0)
        assert producer.flush(10) == 0
        admin = AdminClient({"bootstrap.servers": servers})
        leader = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0].leader
        cluster.node(leader).kill()
        deadline = time.monotonic() + 60
        new_leader = leader
        while new_leader in (leader, -1) and time.monotonic() < deadline:
            time.sleep(0.5)
            new_leader = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0].leader
        assert new_leader not in (leader, -1), "no new leader within 60 s"
        for i in range(10, 20):
            producer.produce("replicated", value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0
        assert _read_committed(servers, "replicated") == [b"%d" % i for i in range(20)]
        cluster.start_node(leader)
        assert len(cluster.live()) == 3
    finally:
        cluster.stop()
