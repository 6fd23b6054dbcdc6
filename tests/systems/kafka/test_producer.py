"""The kafka producer's exactly-once batch contract against a real broker.

begin -> send -> flush(transaction) commits one Kafka transaction that also records the batch's
version; a replay of a committed version writes nothing; abandon aborts; a zombie is fenced.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sparza.config import Config
from sparza.devservers.kafka import KafkaBroker
from sparza.metrics import MetricsRegistry
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import SystemProducer, Transaction
from sparza.systems.kafka import KafkaSystemAdmin, KafkaSystemConsumer, KafkaSystemProducer, partition_for
from sparza.systems.kafka.admin import KafkaError, KafkaUnavailableError
from sparza.systems.kafka.producer import transactional_id

TASK = "Partition 0"


def _read(config: Config, topic: str, partition: int = 0, end: str | None = None
          ) -> list[tuple[str, bytes | None, bytes | None]]:
    """Records of one partition up to ``end`` (default: its reported ``read_committed`` end)."""
    if end is None:
        end = KafkaSystemAdmin("k", config).get_system_stream_metadata({topic})[topic].partitions[partition].upcoming
    return [(e.offset, e.key, e.message)
            for e in KafkaSystemConsumer("k", config).read(SystemStreamPartition("k", topic, partition), "0", end)]


def _batch(producer: KafkaSystemProducer, topic: str, txn: Transaction, values: list[bytes]) -> None:
    producer.begin(TASK, txn)
    for v in values:
        producer.send(TASK, OutgoingMessageEnvelope(SystemStream("k", topic), v, key=b"k", partition=0))
    producer.flush(TASK, transaction=txn)


def test_is_a_system_producer(kafka_config: Config) -> None:
    assert isinstance(KafkaSystemProducer("k", kafka_config), SystemProducer)


def test_flush_commits_and_a_replayed_version_writes_nothing(kafka_config: Config, topic: Callable[..., str],
                                                             unique_name: str) -> None:
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    producer = KafkaSystemProducer("k", kafka_config)
    producer.register(TASK)
    _batch(producer, name, Transaction(app, 1), [b"a", b"b"])
    assert producer.committed_version(app) == 1
    _batch(producer, name, Transaction(app, 2), [b"c"])
    # A replay of batch 2 (say, a Spark task retry after the flush) in a new process: nothing new.
    again = KafkaSystemProducer("k", kafka_config)
    again.register(TASK)
    _batch(again, name, Transaction(app, 2), [b"c"])
    _batch(again, name, Transaction(app, 1), [b"a", b"b"])
    values = [v for _, _, v in _read(kafka_config, name)]
    assert values == [b"a", b"b", b"c"]
    assert again.committed_version(app) == 2
    producer.stop()
    again.stop()


def test_abandon_aborts_and_the_version_stays_uncommitted(kafka_config: Config, topic: Callable[..., str],
                                                          unique_name: str) -> None:
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    producer = KafkaSystemProducer("k", kafka_config)
    producer.register(TASK)
    producer.begin(TASK, Transaction(app, 1))
    producer.send(TASK, OutgoingMessageEnvelope(SystemStream("k", name), b"lost", partition=0))
    assert producer.pending(TASK) == 1
    producer.abandon(TASK)
    assert producer.pending(TASK) == 0
    assert producer.committed_version(app) is None
    _batch(producer, name, Transaction(app, 1), [b"kept"])   # the retry of the batch commits
    assert producer.committed_version(app) == 1
    assert [v for _, _, v in _read(kafka_config, name)] == [b"kept"]   # nothing of the abandoned send
    producer.stop()


class _CrashBeforeCommit:
    """Wraps a real librdkafka producer; ``commit_transaction`` dies as a process killed right before it
    would (the records and the version offset were sent, the transaction is left open)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def commit_transaction(self, *args: Any) -> None:
        self._real.flush(10)
        raise _Crash()


class _Crash(BaseException):
    """Not an Exception: nothing in the producer may handle it (the process is gone)."""


class _PauseBrokerAtCommit:
    """Wraps a real librdkafka producer; ``commit_transaction`` first pauses the broker's JVM (SIGSTOP): the
    commit's request waits unanswered, as with a transaction coordinator that is down or unreachable."""

    def __init__(self, real: Any, broker: KafkaBroker) -> None:
        self._real = real
        self._broker = broker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def commit_transaction(self, *args: Any) -> None:
        assert self._broker.pid is not None
        os.kill(self._broker.pid, signal.SIGSTOP)
        self._real.commit_transaction(*args)


def test_a_commit_kafka_does_not_confirm_fails_after_bounded_retries(
        kafka_config: Config, kafka_broker: KafkaBroker, topic: Callable[..., str], unique_name: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A retriable commit failure (the commit timed out) is tried again a few times with a pause, then the flush
    fails naming the transactional id and what to check, instead of retrying for ever (issue 38); the batch's retry
    once the broker answers again writes it exactly once."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    config = kafka_config.with_overrides({"systems.k.kafka.request.timeout.ms": "2s"})
    real_new = KafkaSystemProducer._new_producer
    monkeypatch.setattr(KafkaSystemProducer, "_new_producer",
                        lambda self, extra, errors: _PauseBrokerAtCommit(real_new(self, extra, errors), kafka_broker))
    producer = KafkaSystemProducer("k", config)
    producer.register(TASK)
    failed: list[BaseException] = []

    def flush() -> None:
        try:
            _batch(producer, name, Transaction(app, 1), [b"once"])
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    try:
        thread.join(120)   # bounded retries end well within this; the unbounded loop never did
        still_retrying = thread.is_alive()
    finally:
        assert kafka_broker.pid is not None
        os.kill(kafka_broker.pid, signal.SIGCONT)
    assert not still_retrying, "the commit was still being retried after 120 s"
    assert len(failed) == 1 and isinstance(failed[0], KafkaError), failed
    message = str(failed[0])
    assert repr(transactional_id(app, "k")) in message and "transaction coordinator" in message, message
    monkeypatch.undo()
    producer.abandon(TASK)
    retry = KafkaSystemProducer("k", config)
    retry.register(TASK)
    _batch(retry, name, Transaction(app, 1), [b"once"])   # the batch again, from its checkpoint
    assert retry.committed_version(app) == 1
    assert [v for _, _, v in _read(kafka_config, name)] == [b"once"]
    retry.stop()


def _crash_mid_flush(config: Config, monkeypatch: pytest.MonkeyPatch, topic: str, app: str) -> None:
    """Batch 1 of ``app``'s task (``b"in flight"`` to ``topic``) dies right before its commit: its transaction open."""
    real_new = KafkaSystemProducer._new_producer
    monkeypatch.setattr(KafkaSystemProducer, "_new_producer",
                        lambda self, extra, errors: _CrashBeforeCommit(real_new(self, extra, errors)))
    crashed = KafkaSystemProducer("k", config)
    crashed.register(TASK)
    with pytest.raises(_Crash):
        _batch(crashed, topic, Transaction(app, 1), [b"in flight"])
    monkeypatch.undo()


def test_a_crash_before_commit_is_aborted_by_the_next_instance(kafka_config: Config, topic: Callable[..., str],
                                                               unique_name: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    _crash_mid_flush(kafka_config, monkeypatch, name, app)
    # The task restarts elsewhere: init_transactions aborts the open transaction; version 1 is not
    # recorded, so the batch is written again.
    restarted = KafkaSystemProducer("k", kafka_config)
    restarted.register(TASK)
    _batch(restarted, name, Transaction(app, 1), [b"redo"])
    assert restarted.committed_version(app) == 1
    # Kafka hides "in flight" (aborted by the restart's init_transactions) from read_committed readers.
    assert b"in flight" not in [v for _, _, v in _read(kafka_config, name)]
    assert [v for _, _, v in _read(kafka_config, name)][-1] == b"redo"
    restarted.stop()


def test_a_fence_frees_the_readers_a_crashed_flush_held_and_serves_the_next_begin(
        kafka_config: Config, topic: Callable[..., str], unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance that died mid-flush leaves its transaction open: read_committed readers of the partition stop
    there, also before another task's committed records. fence() (what a container does when the task starts
    where its checkpoint holds an open intent) aborts it at once, before the task's first batch."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    _crash_mid_flush(kafka_config, monkeypatch, name, app)
    other = KafkaSystemProducer("k", kafka_config)
    other.register("Partition 1")
    other.begin("Partition 1", Transaction(f"{unique_name}-job/Partition 1", 1))
    other.send("Partition 1", OutgoingMessageEnvelope(SystemStream("k", name), b"other task", key=b"o", partition=0))
    other.flush("Partition 1", transaction=Transaction(f"{unique_name}-job/Partition 1", 1))

    def readable() -> int:
        meta = KafkaSystemAdmin("k", kafka_config).get_system_stream_metadata({name})[name]
        return int(meta.partitions[0].upcoming)

    assert readable() == 0  # held at the open transaction, though the other task's record is committed
    metrics = MetricsRegistry()
    restarted = KafkaSystemProducer("k", kafka_config, metrics)
    restarted.register(TASK)
    restarted.fence(TASK, app)
    assert b"other task" in [v for _, _, v in _read(kafka_config, name)]
    assert b"in flight" not in [v for _, _, v in _read(kafka_config, name)]
    fenced = restarted._sources[TASK].producer
    _batch(restarted, name, Transaction(app, 1), [b"redo"])
    assert restarted._sources[TASK].producer is fenced  # the fence's producer serves the batch: no second init
    assert restarted.committed_version(app) == 1
    assert [v for _, _, v in _read(kafka_config, name)].count(b"redo") == 1
    assert metrics.counter("k", "producer-fences").count == 1
    other.stop()
    restarted.stop()


def test_two_instances_of_one_batch_commit_it_once(kafka_config: Config, topic: Callable[..., str],
                                                   unique_name: str) -> None:
    """A paused processor resumes after its task moved and both flush the same batch: the newer
    instance's init_transactions fenced the older one, which re-initialises, finds what is recorded,
    and whichever commits second writes nothing. Exactly one copy of version 1 is visible."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    zombie = KafkaSystemProducer("k", kafka_config)
    zombie.register(TASK)
    zombie.begin(TASK, Transaction(app, 1))
    zombie.send(TASK, OutgoingMessageEnvelope(SystemStream("k", name), b"first", partition=0))
    moved = KafkaSystemProducer("k", kafka_config)
    moved.register(TASK)
    moved.begin(TASK, Transaction(app, 1))
    moved.send(TASK, OutgoingMessageEnvelope(SystemStream("k", name), b"second", partition=0))
    zombie.flush(TASK, transaction=Transaction(app, 1))   # fenced, re-initialised, commits version 1
    moved.flush(TASK, transaction=Transaction(app, 1))    # fenced, re-initialised, finds 1: writes nothing
    assert [v for _, _, v in _read(kafka_config, name)] == [b"first"]
    assert moved.committed_version(app) == 1
    zombie.stop()
    moved.stop()


class _AtCommit:
    """Wraps a real librdkafka producer; ``commit_transaction`` first runs what is left in ``before`` (a list
    shared by the producers of one fault, emptied as it runs: the fault strikes once), after the batch's records
    and its version offset were sent and before the commit is asked for."""

    def __init__(self, real: Any, before: list[Callable[[], None]]) -> None:
        self._real = real
        self._before = before

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def commit_transaction(self, *args: Any) -> None:
        while self._before:
            self._before.pop()()
        self._real.commit_transaction(*args)


def _wrapping(monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]) -> None:
    """Every transactional producer made from now on is wrapped by :class:`_AtCommit` with ``before``."""
    real_new = KafkaSystemProducer._new_producer
    once = [before]

    def new(self: KafkaSystemProducer, extra: dict[str, Any], errors: list[str]) -> Any:
        made = real_new(self, extra, errors)
        return _AtCommit(made, once) if "transactional.id" in extra else made

    monkeypatch.setattr(KafkaSystemProducer, "_new_producer", new)


def test_a_producer_fenced_inside_its_commit_by_a_newer_instance_of_the_task(
        kafka_config: Config, topic: Callable[..., str], unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old instance of a task (a paused processor, a Spark worker) has produced batch 2 and is about to commit
    when the newer instance (same transactional.id) starts: its init_transactions aborts the old transaction and
    fences the old producer, and it writes batches 2 and 3. The old instance's commit fails fenced; it re-reads
    the recorded version (3), so its batch 2 is not written again. Every batch once, in order."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    old = KafkaSystemProducer("k", kafka_config)
    old.register(TASK)
    _batch(old, name, Transaction(app, 1), [b"v1"])
    newer = KafkaSystemProducer("k", kafka_config)
    newer.register(TASK)

    def newer_instance_runs() -> None:
        _batch(newer, name, Transaction(app, 2), [b"v2"])
        _batch(newer, name, Transaction(app, 3), [b"v3"])

    once = [newer_instance_runs]
    monkeypatch.setattr(old, "_new_producer", lambda extra, errors: _AtCommit(
        KafkaSystemProducer._new_producer(old, extra, errors), once))
    old._drop(old._sources[TASK])          # its next batch opens a producer through the wrapper
    _batch(old, name, Transaction(app, 2), [b"v2-old"])
    assert [v for _, _, v in _read(kafka_config, name)] == [b"v1", b"v2", b"v3"]
    assert old.committed_version(app) == 3
    old.stop()
    newer.stop()


def test_transaction_timeout_expiring_while_a_task_is_stalled(kafka_config: Config, topic: Callable[..., str],
                                                              unique_name: str, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """``transaction.timeout.ms`` 1 s. A task stalled 3 s while it processes holds no transaction (sends are
    buffered until the flush): its batch commits. A task stalled 3 s inside its flush, between its records and its
    commit, has its transaction aborted by the broker: the commit fails, the producer starts again (the version
    read back says batch 2 is not recorded) and commits it. Every batch once; the aborted copy is not read."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    config = kafka_config.with_overrides({"systems.k.producer.transaction.timeout.ms": "1000"})
    producer = KafkaSystemProducer("k", config)
    producer.register(TASK)
    producer.begin(TASK, Transaction(app, 1))
    producer.send(TASK, OutgoingMessageEnvelope(SystemStream("k", name), b"v1", partition=0))
    time.sleep(3)                                    # stalled while processing: no transaction is open
    producer.flush(TASK, transaction=Transaction(app, 1))
    assert producer.committed_version(app) == 1
    producer.stop()
    stalled = KafkaSystemProducer("k", config)
    stalled.register(TASK)
    _wrapping(monkeypatch, lambda: time.sleep(3))    # stalled inside the flush: the broker aborts the transaction
    _batch(stalled, name, Transaction(app, 2), [b"v2"])
    monkeypatch.undo()
    _batch(stalled, name, Transaction(app, 3), [b"v3"])
    assert [v for _, _, v in _read(kafka_config, name)] == [b"v1", b"v2", b"v3"]
    assert stalled.committed_version(app) == 3
    stalled.stop()


def test_a_task_alternating_between_two_workers_commits_every_batch_once(
        kafka_config: Config, topic: Callable[..., str], unique_name: str) -> None:
    """Spark runs a task's batches in whichever Python worker is free, and each worker caches its own
    producer with the task's transactional.id: every switch fences the other worker's producer. Each
    batch must still commit exactly once (this failed with "fenced" before the re-initialisation)."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    workers = [KafkaSystemProducer("k", kafka_config), KafkaSystemProducer("k", kafka_config)]
    for w in workers:
        w.register(TASK)
    order = [0, 1, 0, 0, 1, 1, 0, 1]
    for version, w in enumerate(order, start=1):
        _batch(workers[w], name, Transaction(app, version), [f"v{version}-{i}".encode() for i in range(3)])
    # A replay of batch 5 in worker 0 (a Spark retry after the flush) writes nothing.
    _batch(workers[0], name, Transaction(app, 5), [b"replayed"])
    expected = [f"v{v}-{i}".encode() for v in range(1, len(order) + 1) for i in range(3)]
    assert [v for _, _, v in _read(kafka_config, name)] == expected
    assert workers[1].committed_version(app) == len(order)
    for w in workers:
        w.stop()


def test_a_resident_producer_reads_its_committed_version_once_not_at_every_batch(
        kafka_config: Config, topic: Callable[..., str], unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's producer lives as long as the task stays in its container: the version it committed itself is
    what the broker holds, so begin asks the broker once (issue 39); after a fencing it asks again."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    producer = KafkaSystemProducer("k", kafka_config)
    producer.register(TASK)
    reads: list[str] = []
    real = producer._read_version
    monkeypatch.setattr(producer, "_read_version", lambda src, txn_id: reads.append(txn_id) or real(src, txn_id))
    for version in range(1, 6):
        _batch(producer, name, Transaction(app, version), [f"v{version}".encode()])
    assert len(reads) == 1
    other = KafkaSystemProducer("k", kafka_config)  # a newer instance of the task fences this one
    other.register(TASK)
    _batch(other, name, Transaction(app, 6), [b"v6"])
    _batch(producer, name, Transaction(app, 6), [b"again"])  # fenced, version read again: a replay
    _batch(producer, name, Transaction(app, 7), [b"v7"])
    assert len(reads) == 2
    assert [v for _, _, v in _read(kafka_config, name)] == [f"v{v}".encode() for v in range(1, 8)]
    producer.stop()
    other.stop()


def test_a_transactional_call_that_never_returns_gives_the_producer_up_and_commits_once(
        kafka_config: Config, topic: Callable[..., str], unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a broker restart librdkafka may never time out a coordinator request (its issues 5456, 5511): a
    ``send_offsets_to_transaction`` blocked past its timeout and the grace gives the producer up; a new one fences
    it and commits the batch, once."""
    import sparza.systems.kafka.producer as module

    monkeypatch.setattr(module, "_HANG_GRACE_S", 1.0)
    config = Config({**kafka_config, "systems.k.kafka.request.timeout.ms": "2000"})
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    producer = KafkaSystemProducer("k", config)
    producer.register(TASK)
    _batch(producer, name, Transaction(app, 1), [b"v1"])
    release = threading.Event()
    hung = producer._sources[TASK].producer

    class Hangs:  # the real producer, whose next send_offsets_to_transaction blocks as librdkafka's did
        def __getattr__(self, attr: str) -> Any:
            return getattr(hung, attr)

        def send_offsets_to_transaction(self, *args: Any) -> None:
            release.wait(60)

    producer._sources[TASK].producer = Hangs()
    started = time.monotonic()
    try:
        _batch(producer, name, Transaction(app, 2), [b"v2"])
    finally:
        release.set()
    assert time.monotonic() - started < 30
    assert [v for _, _, v in _read(config, name)] == [b"v1", b"v2"]
    assert producer.committed_version(app) == 2
    producer.stop()


def test_a_version_read_kafka_does_not_answer_is_a_connection_error_a_retry_may_cure() -> None:
    """No broker at the address: reading the task's recorded version fails as :class:`KafkaUnavailableError`, a
    ``ConnectionError``, so the batch is retried from its checkpoint rather than the job stopped for a "system
    error" of the message the task was writing (found when a batch began right after a broker restart)."""
    import socket

    with socket.socket() as sock:   # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = Config({"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": f"127.0.0.1:{port}",
                     "systems.k.kafka.request.timeout.ms": "1500"})
    producer = KafkaSystemProducer("k", config)
    with pytest.raises(KafkaUnavailableError) as raised:
        producer.committed_version("job-1/Partition 0")
    assert isinstance(raised.value, ConnectionError)
    assert "within 2s" in str(raised.value) or "within 1s" in str(raised.value), raised.value


def test_partitioning_is_kafkas_default_and_control_messages_have_headers(kafka_config: Config,
                                                                           topic: Callable[..., str],
                                                                           unique_name: str) -> None:
    name = topic(4)
    app = f"{unique_name}-job/{TASK}"
    metrics = MetricsRegistry()
    producer = KafkaSystemProducer("k", Config({**dict(kafka_config.items()), "systems.k.samza.key.serde": "string"}),
                                   metrics)
    producer.register(TASK)
    producer.begin(TASK, Transaction(app, 1))
    stream = SystemStream("k", name)
    for key in (b"21", b"foobar", b"abc"):
        producer.send(TASK, OutgoingMessageEnvelope(stream, b"v-" + key, key=key))
    for key in ("21", "foobar", "abc"):  # the same keys again (the partition remembered), as str (string serde)
        producer.send(TASK, OutgoingMessageEnvelope(stream, b"w-" + key.encode(), key=key))
    producer.send(TASK, OutgoingMessageEnvelope(stream, b"by-pkey", key=b"x", partition_key="foobar"))
    producer.send(TASK, OutgoingMessageEnvelope(stream, b"explicit", key=b"21", partition=3))
    producer.send(TASK, OutgoingMessageEnvelope(stream, b"", partition=2, timestamp=99, type=MessageType.WATERMARK))
    producer.send(TASK, OutgoingMessageEnvelope(stream, b"epoch", partition=2, timestamp=0))   # not "now"
    producer.flush(TASK, transaction=Transaction(app, 1))
    assert metrics.counter("k", "messages-sent").count == 10  # counted at flush, once each
    # Java's Utils.murmur2: "21" -> -973932308, "foobar" -> -790332482, "abc" -> 479470107 (Kafka's UtilsTest)
    assert [partition_for(k, 4) for k in (b"21", b"foobar", b"abc")] == [
        (-973932308 & 0x7FFFFFFF) % 4, (-790332482 & 0x7FFFFFFF) % 4, (479470107 & 0x7FFFFFFF) % 4]
    where: dict[bytes, int] = {}
    for p in range(4):
        for _, _, value in _read(kafka_config, name, p):
            where[value or b""] = p
    assert where[b"v-21"] == partition_for(b"21", 4)
    assert where[b"v-foobar"] == partition_for(b"foobar", 4)
    assert where[b"v-abc"] == partition_for(b"abc", 4)
    assert [where[b"w-" + k] for k in (b"21", b"foobar", b"abc")] == [partition_for(k, 4) for k in (b"21", b"foobar",
                                                                                                   b"abc")]
    assert where[b"by-pkey"] == partition_for(b"foobar", 4)
    assert where[b"explicit"] == 3
    consumer = KafkaSystemConsumer("k", kafka_config)
    rows = [r for b in consumer.read_arrow(SystemStreamPartition("k", name, 2), "0", None) for r in b.to_pylist()]
    control = [r for r in rows if r["type"]]
    assert [(r["type"], r["producer"], r["timestamp"]) for r in control] == [(1, TASK, 99)]
    assert [r["timestamp"] for r in rows if r["value"] == b"epoch"] == [0]
    with pytest.raises(ValueError, match="out of range"):
        producer.begin(TASK, Transaction(app, 2))
        producer.send(TASK, OutgoingMessageEnvelope(stream, b"x", partition=4))
    producer.abandon(TASK)
    producer.stop()


def test_library_use_without_transaction(kafka_config: Config, topic: Callable[..., str]) -> None:
    name = topic(1)
    producer = KafkaSystemProducer("k", kafka_config)
    producer.register("loader")
    for i in range(3):
        producer.send("loader", OutgoingMessageEnvelope(SystemStream("k", name), f"m{i}".encode(), partition=0))
    producer.flush("loader")
    # The three records went in one record batch: the reported end is one past the last of them.
    assert [v for _, _, v in _read(kafka_config, name)] == [b"m0", b"m1", b"m2"]
    producer.stop()


def test_a_fencing_reported_as_fatal_takes_the_fencing_path(kafka_config: Config, topic: Callable[..., str],
                                                             unique_name: str, capfd: pytest.CaptureFixture[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A producer fenced while its flush produces fails the remaining produce calls with librdkafka's
    generic ``_FATAL`` (not a fencing code): it must still be re-created and the recorded version
    checked, as for ``_FENCED``, instead of failing the flush (a Spark retry). The fencing is expected
    within one processor, so nothing of it is logged above debug (librdkafka's own lines included)."""
    name = topic(1)
    app = f"{unique_name}-job/{TASK}"
    zombie = KafkaSystemProducer("k", kafka_config, metrics=(metrics := MetricsRegistry()))
    zombie.register(TASK)
    zombie.begin(TASK, Transaction(app, 1))
    values = [b"%d" % i for i in range(150_000)]  # the produce loop outlasts the broker's fencing answer
    for v in values:
        zombie.send(TASK, OutgoingMessageEnvelope(SystemStream("k", name), v, partition=0))
    moved = KafkaSystemProducer("k", kafka_config)
    moved.register(TASK)
    moved.begin(TASK, Transaction(app, 1))   # fences the zombie's producer; the zombie learns it mid-flush
    with caplog.at_level("INFO"):
        zombie.flush(TASK, transaction=Transaction(app, 1))
    counted = metrics.snapshot()["k"]
    assert counted["producer-reinitialised-after-fencing"] == 1
    assert counted["commits"] == 1
    assert zombie.committed_version(app) == 1
    moved.flush(TASK, transaction=Transaction(app, 1))   # nothing sent there, and version 1 is recorded
    got = _read(kafka_config, name, end=str(len(values) + 1))  # the records, then the commit marker
    assert [v for _, _, v in got] == values
    noisy = [r for r in caplog.records if r.levelno >= logging.INFO and "fenc" in r.getMessage().lower()]
    assert not noisy, [r.getMessage() for r in noisy]
    assert "fenced" not in capfd.readouterr().err.lower()
    zombie.stop()
    moved.stop()


def test_is_fencing_error_sees_through_fatal(kafka_config: Config, topic: Callable[..., str],
                                             unique_name: str) -> None:
    """The classification itself, on a real producer in librdkafka's fatal state after fencing."""
    from confluent_kafka import KafkaError as RdKafkaError
    from confluent_kafka import KafkaException, Producer

    from sparza.systems.kafka import is_fencing_error

    name = topic(1)
    servers = kafka_config.get_str("systems.k.consumer.bootstrap.servers")
    old = Producer({"bootstrap.servers": servers, "transactional.id": f"{unique_name}-tx", "log_level": 0})
    old.init_transactions(10)
    Producer({"bootstrap.servers": servers, "transactional.id": f"{unique_name}-tx"}).init_transactions(10)
    old.begin_transaction()
    old.produce(name, b"x", partition=0)
    with pytest.raises(KafkaException):
        old.flush(10)                              # the fencing itself: a fencing code
    with pytest.raises(KafkaException) as later:
        old.produce(name, b"y", partition=0)       # afterwards: the generic _FATAL
    error = later.value.args[0]
    assert error.code() == RdKafkaError._FATAL
    assert not is_fencing_error(error)            # without the producer it cannot be told
    assert is_fencing_error(error, old)
    other = RdKafkaError(RdKafkaError._MSG_TIMED_OUT, "timed out")
    assert not is_fencing_error(other, old)


def test_a_message_over_message_max_bytes_is_a_data_error_at_send(kafka_config: Config,
                                                                   topic: Callable[..., str]) -> None:
    """Refused when sent (naming the message), not by the broker when the batch commits, where every retry of
    the batch would fail the same way."""
    from sparza.errors import DataError

    name = topic(1)
    producer = KafkaSystemProducer("k", Config({**kafka_config, "systems.k.producer.message.max.bytes": "1000"}))
    producer.register(TASK)
    with pytest.raises(DataError, match="over the producer's message.max.bytes"):
        producer.send(TASK, OutgoingMessageEnvelope(SystemStream("k", name), b"x" * 2000, partition=0))
    producer.send(TASK, OutgoingMessageEnvelope(SystemStream("k", name), b"x" * 500, partition=0))
    producer.flush(TASK)
    producer.stop()


def test_remembered_key_partitions_are_forgotten_when_the_partition_count_changes() -> None:
    from sparza.serde import StringSerde
    from sparza.systems.kafka.producer import _KEYS_MEMO, _Topic

    info = _Topic("t", 4, StringSerde(), StringSerde())
    info.by_key[b"k"] = partition_for(b"k", 4)
    info.partitions = 8  # the topic grew: a key's partition under 4 partitions says nothing under 8
    assert info.by_key == {} and info.key_utf8 and _KEYS_MEMO >= 1024


def test_a_producers_transactional_calls_share_one_thread_and_a_hung_one_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sparza.systems.kafka import producer as module

    monkeypatch.setattr(module, "_HANG_GRACE_S", 0.05)
    caller = module._Caller("sparza-kafka-test")
    threads = {caller.call("one", lambda: threading.current_thread().ident, 1.0) for _ in range(20)}
    assert len(threads) == 1 and threading.current_thread().ident not in threads
    with pytest.raises(ValueError, match="refused"):
        caller.call("two", lambda: (_ for _ in ()).throw(ValueError("refused")), 1.0)
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(module._HungCallError, match="hangs did not return within"):
        caller.call("hangs", lambda: release.wait(5), 0.1)
    assert time.monotonic() - started < 2.0
    release.set()
    caller.close()


def test_json_messages_are_written_as_the_json_serde_writes_them(kafka_config: Config,
                                                                 topic: Callable[..., str]) -> None:
    """The producer encodes dict messages of a plain JSON serde itself (one call less per message): the records'
    values are the serde's own bytes (the oracle), NaN and nulls included, and what neither encoder takes is the
    serde's error."""
    from sparza.errors import SerdeError
    from sparza.serde import JsonSerde

    name = topic(1)
    messages: list[Any] = [{"key": "k", "count": 3}, {"a": None}, {"a": float("nan"), "b": [float("inf")]},
                           {1: "int key"}, {"bytes": b"\x00\xff"}, {}, [1, None], "plain text"]
    config = Config({**kafka_config, f"systems.k.streams.{name}.samza.msg.serde": "json"})
    producer = KafkaSystemProducer("k", config)
    producer.register("loader")
    for message in messages:
        producer.send("loader", OutgoingMessageEnvelope(SystemStream("k", name), message, partition=0))
    with pytest.raises(SerdeError, match="cannot encode dict as JSON"):
        producer.send("loader", OutgoingMessageEnvelope(SystemStream("k", name), {"o": object()}, partition=0))
    producer.flush("loader")
    assert [v for _, _, v in _read(kafka_config, name)] == [JsonSerde().to_bytes(m) for m in messages]
    producer.stop()
