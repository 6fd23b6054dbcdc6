"""Kafka faults users meet, through ``sparza run`` on the real broker (Apache Kafka, KRaft).

Each test runs the keyed count (``examples/keyed_count``) from a Kafka topic to a Kafka topic and compares the
output with an independent oracle: the output topic read ``read_committed`` with confluent-kafka directly
(:func:`committed_pairs`) must hold every running count ``(key, n)`` of the input exactly once, as a plain Python
loop over what was produced computes them (:func:`expected_pairs`). A lost record shows as a missing pair, a
record written twice as a pair counted twice.

The faults: the only broker stopped and restarted mid-run (exact), and killed and restarted (nothing twice, and
any loss Kafka's own: a commit marker it dropped, see that test); a partition leader killed in a three-broker cluster; a
consumer group rebalancing around sparza's own assignment (its monitoring group joined by a subscribing consumer);
records deleted by ``retention.ms`` before the job read them (the job stops naming the gap, or with
``consumer.auto.offset.reset: earliest`` skips it and says so); the tail of multi-record producer batches (issue
40: all of it counted, lag 0 only when nothing waits); ``kill -9`` of the host mid-run and ``--once`` on a new
host (issue 35's held-out scenario). The producer-level faults (fenced by a newer instance,
``transaction.timeout.ms`` expiring) are in ``test_producer.py``, a topic deleted and re-created in
``test_lost_topic.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from sparza.config import Config
from sparza.devservers.kafka import KafkaBroker, KafkaCluster
from sparza.runtime import checkpoint_store_from_config
from sparza.systems import StreamSpec
from sparza.systems.kafka import KafkaSystemAdmin
from sparza.testing import eventually
from sparza.testing.harness.spark import kill_tree

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.runtime.helpers import job_values, sparza_cmd, sparza_env, write_config  # noqa: E402
from tests.systems.kafka.test_runtime_e2e import _run  # noqa: E402

pytestmark = pytest.mark.slow


# --- the job, its input and the oracle ------------------------------------------------------------
def keyed_count(work: Path, servers: str, name: str, partitions: int = 2, **overrides: Any) -> Config:
    """The keyed count reading ``<name>-events`` and writing ``<name>-counts`` (topics created here)."""
    events, counts = f"{name}-events", f"{name}-counts"
    config = Config(job_values(work, **{
        "job.name": name,
        "task.inputs": f"kafka.{events}",
        "keyed_count.output": f"kafka.{counts}",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.consumer.bootstrap.servers": servers,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.kafka.streams.{counts}.samza.key.serde": "string",
        f"systems.kafka.streams.{counts}.samza.msg.serde": "json",
        **overrides}))
    admin = KafkaSystemAdmin("kafka", config)
    for topic in (events, counts):
        admin.create_stream(StreamSpec(topic, partitions))
    admin.close()
    return config


def topics(config: Config) -> tuple[str, str]:
    """The job's input and output topics."""
    return config["task.inputs"].split(".", 1)[1], config["keyed_count.output"].split(".", 1)[1]


def produce(servers: str, topic: str, keys: Sequence[str], partitions: int, *, per_request: int = 1,
            first: int = 0, timestamp_ms: int | None = None) -> None:
    """Message ``i`` (value ``m<i>``, key ``keys[i]``) with a plain idempotent producer, ``per_request`` messages
    per produce request (flushed together; 1: one record per request). A key always goes to the same partition
    (CRC-32 of the key), so one task counts all of its messages."""
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0 if per_request == 1 else 100,
                         "batch.num.messages": max(per_request, 1), "enable.idempotence": True, "log_level": 3})
    for i, key in enumerate(keys, start=first):
        producer.produce(topic, value=f"m{i}".encode(), key=key.encode(), partition=partition_of(key, partitions),
                         timestamp=timestamp_ms or 0)
        if (i - first + 1) % per_request == 0:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0


def partition_of(key: str, partitions: int) -> int:
    """The input partition of ``key``."""
    return zlib.crc32(key.encode()) % partitions


def expected_pairs(keys: Sequence[str]) -> Counter[tuple[str, int]]:
    """Every running count ``(key, n)`` the keyed count must write for input keys ``keys``, once each."""
    seen: Counter[str] = Counter()
    out: Counter[tuple[str, int]] = Counter()
    for key in keys:
        seen[key] += 1
        out[(key, seen[key])] += 1
    return out


@contextlib.contextmanager
def _reading(servers: str, topic: str, group: str, isolation: str) -> Iterator[tuple[Consumer, list[int]]]:
    """A confluent-kafka consumer of ``topic`` (``isolation.level`` ``isolation``) assigned every partition from its
    start, and those partitions; closed after."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": isolation, "log_level": 3})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        yield consumer, partitions
    finally:
        consumer.close()


def _pair(msg: Any) -> tuple[str, int]:
    """The ``(key, count)`` of an output record."""
    body = json.loads(msg.value())
    return body["key"], int(body["count"])


def committed_pairs(servers: str, topic: str, timeout_s: float = 60) -> Counter[tuple[str, int]]:
    """The ``(key, count)`` of every committed output record: the topic read ``read_committed`` with confluent-kafka
    from the start of each partition to its last stable offset."""
    out: Counter[tuple[str, int]] = Counter()
    with _reading(servers, topic, f"oracle-{topic}", "read_committed") as (consumer, partitions):
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        pending = {p for p in partitions if ends[p] > 0}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                # Transaction markers take offsets: a partition is done when its position passed its end.
                for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                    if tp.offset >= ends[tp.partition]:
                        pending.discard(tp.partition)
                continue
            assert msg.error() is None, msg.error()
            out[_pair(msg)] += 1
            if msg.offset() + 1 >= ends[msg.partition()]:
                pending.discard(msg.partition())
        assert not pending, f"partitions {sorted(pending)} of {topic} not read to their end within {timeout_s}s"
    return out


def uncommitted_places(servers: str, topic: str, pairs: Counter[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """Where ``pairs`` stand in ``topic`` read ``read_uncommitted`` (``partition@offset``): for a failure's message,
    to tell output never written from output written in a transaction that did not commit."""
    found: dict[tuple[str, int], str] = {}
    with _reading(servers, topic, f"diagnosis-{topic}", "read_uncommitted") as (consumer, _partitions):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                break
            if msg.error() is None and (pair := _pair(msg)) in pairs:
                found.setdefault(pair, f"{msg.partition()}@{msg.offset()}")
    return found


def output_diff(servers: str, config: Config, keys: Sequence[str]
                ) -> tuple[Counter[tuple[str, int]], Counter[tuple[str, int]]]:
    """``(missing, extra)``: the running counts of ``keys`` the committed output lacks, and those it holds more often
    than due (written twice, or not due at all)."""
    got, want = committed_pairs(servers, topics(config)[1]), expected_pairs(keys)
    return want - got, got - want


def assert_exact(servers: str, config: Config, keys: Sequence[str]) -> None:
    """The output holds every running count of ``keys`` exactly once (lost and repeated pairs listed; for lost
    ones, whether they are in the topic uncommitted, and the checkpoints' offsets)."""
    missing, extra = output_diff(servers, config, keys)
    if missing or extra:
        places = uncommitted_places(servers, topics(config)[1], missing)
        raise AssertionError(
            f"{sum(missing.values())} pairs missing (e.g. {list(missing)[:5]}), {sum(extra.values())} extra (e.g. "
            f"{list(extra)[:5]}); of the missing, {len(places)} are in the output read uncommitted (e.g. "
            f"{list(places.items())[:5]}); checkpoints at {committed_offsets(config)}")


def committed_offsets(config: Config) -> dict[str, int]:
    """Each input partition's next offset in the task checkpoints (``kafka.<topic>#<p>`` -> offset)."""
    store = checkpoint_store_from_config(config, f"{config['job.name']}-1")
    out: dict[str, int] = {}
    for cp in store.read_all().values():
        out.update({ssp: int(offset) for ssp, offset in cp.offsets.items()})
    return out


def input_ends(config: Config, servers: str) -> dict[str, int]:
    """Each input partition's ``read_committed`` end (``kafka.<topic>#<p>`` -> offset)."""
    admin = KafkaSystemAdmin("kafka", config)
    events = topics(config)[0]
    meta = admin.get_system_stream_metadata({events})[events]
    admin.close()
    return {f"kafka.{events}#{p}": int(pm.upcoming) for p, pm in meta.partitions.items()}


@pytest.fixture
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker of the test's own (the test kills it)."""
    with KafkaBroker(tmp_path_factory.mktemp("own-kafka"), quick=True) as broker:
        yield broker


class Running:
    """``sparza run`` (unbounded) as a subprocess: wait for its commits, stop it with SIGTERM (it commits and
    exits 0), or kill it."""

    def __init__(self, config: Config, path: Path, *args: str) -> None:
        self.config = config
        self.proc = subprocess.Popen(sparza_cmd("run", "--config", str(path), "--master", "local[2]", *args),
                                     cwd=REPO, env=sparza_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.output: list[str] = []
        self._reader = threading.Thread(target=lambda: self.output.extend(iter(self.proc.stdout.readline, "")),
                                        daemon=True)  # type: ignore[union-attr]
        self._reader.start()

    def text(self) -> str:
        """What it printed so far."""
        return "".join(self.output)

    def wait_for(self, reached: Any, timeout: float, what: str) -> None:
        """Until ``reached()``; fails at once if the run exited."""
        def check() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"sparza run exited {self.proc.returncode} before {what}:\n{self.text()[-4000:]}")
            return bool(reached())

        eventually(check, timeout, 0.5, lambda: f"{what}: not within {timeout}s\n{self.text()[-4000:]}")

    def wait_for_batches(self, at_least: int, timeout: float = 400) -> None:
        """Until every task committed ``at_least`` batches."""
        store = checkpoint_store_from_config(self.config, f"{self.config['job.name']}-1")

        def reached() -> bool:
            batches = [cp.batch for cp in store.read_all().values()]
            return bool(batches) and min(batches) >= at_least

        self.wait_for(reached, timeout, f"every task's batch {at_least}")

    def wait_caught_up(self, servers: str, timeout: float = 300) -> None:
        """Until the task checkpoints reached every input partition's end."""
        self.wait_for(lambda: committed_offsets(self.config) == input_ends(self.config, servers), timeout,
                      "the checkpoints at the input's end")

    def stop(self) -> str:
        """SIGTERM (finish the batch, commit, exit 0); its output."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=180)
        finally:
            self.close()
        assert code == 0, f"sparza run exited {code} on SIGTERM:\n{self.text()[-4000:]}"
        return self.text()

    def close(self) -> None:
        """Kill what is left (a failed test)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
        self._reader.join(10)


def _keys(n: int, distinct: int) -> list[str]:
    return [f"k{(i * 7) % distinct}" for i in range(n)]


# --- the faults ---------------------------------------------------------------------------------
def test_kill_9_mid_run_then_once_on_a_new_host(kafka_bootstrap: str, work_dir: Path, unique_name: str) -> None:
    """Issue 35's held-out scenario, as a new user tried it: a keyed count on a 4-partition topic filled by a plain
    producer (one record per request), the host killed (``kill -9`` of the driver, its JVM and Python workers)
    mid-run, then ``sparza run --once`` on a new host (an empty local state dir: stores come back from the blob
    store). Exact, and no read times out (it failed three runs of three on the old test broker's short ends)."""
    # Small batches: the kill must come mid-run. At 60 messages a batch the job could commit all 1,600 records
    # before its second batch line was read (seen once in a full suite after restores moved beside the loop).
    config = keyed_count(work_dir, kafka_bootstrap, unique_name, partitions=4, **{"task.max.batch.messages": "10"})
    keys = _keys(1600, 17)
    produce(kafka_bootstrap, topics(config)[0], keys, 4, per_request=1)
    path = write_config(config, work_dir / "job.yaml")
    run = Running(config, path)
    try:
        run.wait_for_batches(2)
        kill_tree(run.proc.pid)   # the whole host: driver, JVM and the Python workers (their own process group)
        run.proc.wait(timeout=60)
    finally:
        run.close()
    partial = sum(committed_pairs(kafka_bootstrap, topics(config)[1]).values())
    assert 0 < partial < len(keys), partial   # killed mid-run: some output committed, not all
    env = {**sparza_env(), "SPARZA_CONF_task__max__batch__messages": "100000",
           "SPARZA_CONF_job__logged__store__base__dir": str(work_dir / "new-host-state")}
    result = _run(path, "--master", "local[2]", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "within" not in result.stderr, result.stderr[-3000:]   # no read or request timed out
    # One processor: producers fencing each other as tasks move between Spark's Python workers is routine,
    # not a line in the output (librdkafka's FENCED lines and the re-creation are at debug level).
    assert "fenced" not in result.stderr.lower(), result.stderr[-3000:]
    assert_exact(kafka_bootstrap, config, keys)


def _broker_restart_mid_run(broker: KafkaBroker, work_dir: Path, name: str, restart: Any
                            ) -> tuple[Config, list[str], str]:
    """The keyed count on ``broker``: 1,000 records in, the run's first commits, ``restart()`` of the broker 5 s
    apart, 500 more records, until the checkpoints reach the input's end; SIGTERM. The config, keys and output."""
    servers = broker.bootstrap_servers
    config = keyed_count(work_dir, servers, name, **{"task.max.batch.messages": "100"})
    keys = _keys(1500, 11)
    produce(servers, topics(config)[0], keys[:1000], 2, per_request=50)
    run = Running(config, write_config(config, work_dir / "job.yaml"))
    try:
        run.wait_for_batches(2)
        restart()
        produce(servers, topics(config)[0], keys[1000:], 2, per_request=50, first=1000)
        run.wait_caught_up(servers)
        out = run.stop()
    finally:
        run.close()
    return config, keys, out


def test_a_broker_stopped_and_restarted_mid_run(own_broker: KafkaBroker, work_dir: Path, unique_name: str) -> None:
    """The only broker stopped (SIGTERM: its controlled shutdown, as a rolling restart does) after the run's first
    commits and started again on its log dir 5 s later: the running job waits for it (its reads, its transactions)
    and goes on; no record lost or written twice."""
    def restart() -> None:
        own_broker.stop(timeout_s=60)   # its controlled shutdown, within a minute (then SIGKILL)
        time.sleep(5)
        own_broker.start()

    config, keys, _ = _broker_restart_mid_run(own_broker, work_dir, unique_name, restart)
    assert_exact(own_broker.bootstrap_servers, config, keys)


def test_a_broker_killed_and_restarted_mid_run(own_broker: KafkaBroker, work_dir: Path, unique_name: str) -> None:
    """``kill -9`` of the only broker after the run's first commits, started again 5 s later. Kafka itself does not
    keep every transaction here: with a single replica shut down uncleanly, a commit it acknowledged may come back
    without its marker on an output partition, and the next producer's abort then covers it (seen in one of seven
    runs here and once in CI: the log shows the batch's records, no marker, the abort; Kafka documents the same
    loss of markers for an unclean leader election, KAFKA-20716). So: nothing written twice; the job goes on to the
    input's end; and any pair missing is one sparza wrote, in the topic uncommitted (a pair not there at all would
    be sparza's loss).
    The replicated case is exact: ``test_a_leader_killed_in_a_three_broker_cluster``."""
    def restart() -> None:
        own_broker.kill()
        time.sleep(5)
        own_broker.start()

    config, keys, out = _broker_restart_mid_run(own_broker, work_dir, unique_name, restart)
    servers = own_broker.bootstrap_servers
    missing, extra = output_diff(servers, config, keys)
    assert not extra, f"{sum(extra.values())} pairs written twice (e.g. {list(extra)[:5]})"
    places = uncommitted_places(servers, topics(config)[1], missing)
    assert set(missing) <= set(places), (f"{len(set(missing) - set(places))} pairs never written at all (e.g. "
                                         f"{sorted(set(missing) - set(places))[:5]}); checkpoints at "
                                         f"{committed_offsets(config)}\n{out[-3000:]}")


def test_an_admin_reads_the_true_ends_right_after_a_broker_restart(own_broker: KafkaBroker, unique_name: str) -> None:
    """One admin (as a running job keeps it) asked for a partition's start and end before a ``kill -9`` of the only
    broker and right after it is back: the same ends as a fresh consumer reads them (the oracle), not an error.
    librdkafka's admin client keeps its old leader epochs, and its ListOffsets answered FENCED_LEADER_EPOCH to
    every request until its metadata was read again."""
    servers = own_broker.bootstrap_servers
    config = Config({"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": servers})
    admin = KafkaSystemAdmin("k", config)
    name = f"{unique_name}-ends"
    admin.create_stream(StreamSpec(name, 2))
    produce(servers, name, [f"k{i}" for i in range(30)], 2, per_request=10)
    parts = [(name, 0), (name, 1)]

    def oracle() -> dict[tuple[str, int], tuple[int, int]]:
        consumer = Consumer({"bootstrap.servers": servers, "group.id": f"{unique_name}-oracle",
                             "isolation.level": "read_committed"})
        try:
            return {(t, p): tuple(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30))  # type: ignore[misc]
                    for t, p in parts}
        finally:
            consumer.close()

    before = admin.watermarks(parts)
    assert before == oracle()
    assert sum(end for _, end in before.values()) == 30
    own_broker.kill()
    own_broker.start()
    assert admin.watermarks(parts) == oracle() == before


def test_an_offset_answered_invalid_is_asked_again_not_taken_for_an_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ListOffsets request in flight when the broker's connection drops is answered without an error but with
    OFFSET_INVALID (-1001) for every partition (seen around a broker restart): never a partition's end (a task
    judged its checkpoint past it, "now ends at -1001"); the admin asks again, or fails naming the timeout."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from sparza.systems.kafka import KafkaError

    class Client:
        def __init__(self, answers: list[int]) -> None:
            self.answers, self.asked, self.metadata_reads = answers, 0, 0

        def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
            offset = self.answers[min(self.asked, len(self.answers) - 1)]
            self.asked += 1
            out: dict[Any, Future[Any]] = {}
            for tp in request:
                future: Future[Any] = Future()
                future.set_result(SimpleNamespace(offset=offset))
                out[tp] = future
            return out

        def list_topics(self, **_: Any) -> None:
            self.metadata_reads += 1

    config = Config({"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": "127.0.0.1:1",
                     "systems.k.kafka.request.timeout.ms": "1500"})
    admin = KafkaSystemAdmin("k", config)
    admin._client = client = Client([-1001, -1001, 7])
    assert admin.watermarks([("t", 0)]) == {("t", 0): (7, 7)}
    assert client.asked == 4 and client.metadata_reads == 2   # earliest asked 3 times, then latest once
    admin._client = Client([-1001])
    with pytest.raises(KafkaError, match=r"within 2s .*answered offset -1001"):
        admin.watermarks([("t", 0)])


def test_a_leader_killed_in_a_three_broker_cluster(tmp_path_factory: pytest.TempPathFactory, work_dir: Path,
                                                   unique_name: str) -> None:
    """Three brokers, topics with three replicas (``min.insync.replicas`` 2): ``kill -9`` mid-run of the broker
    that leads most of the input's partitions (and, with it, whatever else it led: output partitions, group and
    transaction coordinators). New leaders are elected; the running job goes on and writes every count once."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("cluster"), quick=True)
    cluster.start()
    try:
        servers = cluster.bootstrap_servers
        config = keyed_count(work_dir, servers, unique_name, **{
            "task.max.batch.messages": "100", "systems.kafka.default.stream.replication.factor": "3"})
        admin = AdminClient({"bootstrap.servers": servers})
        keys = _keys(1500, 13)
        produce(servers, topics(config)[0], keys[:1000], 2, per_request=25)
        run = Running(config, write_config(config, work_dir / "job.yaml"))
        try:
            run.wait_for_batches(2)
            leaders = [p.leader for p in admin.list_topics(topics(config)[0], timeout=10)
                       .topics[topics(config)[0]].partitions.values()]
            victim = Counter(leaders).most_common(1)[0][0]
            cluster.node(victim).kill()
            def new_leaders() -> bool:
                try:
                    meta = admin.list_topics(topics(config)[0], timeout=10)
                except KafkaException:  # the cluster answers no metadata while it elects: ask again
                    return False
                return all(p.leader not in (victim, -1) for p in meta.topics[topics(config)[0]].partitions.values())

            eventually(new_leaders, 60, 0.5, f"no new leaders after broker {victim} died")
            produce(servers, topics(config)[0], keys[1000:], 2, per_request=25, first=1000)
            run.wait_caught_up(servers)
            run.stop()
        finally:
            run.close()
        assert_exact(servers, config, keys)
    finally:
        cluster.stop()


def test_a_consumer_group_rebalancing_around_sparzas_own_assignment(kafka_bootstrap: str, work_dir: Path,
                                                                    unique_name: str) -> None:
    """sparza assigns partitions itself and commits each read's start to its monitoring group for lag tools. A
    consumer that subscribes to that group (another deployment, a tool) joins and leaves it over and over while
    the job runs: the group rebalances around sparza, whose commits it may refuse. The job must neither fail nor
    lose or repeat a record, and the group's offsets stay monitoring only."""
    config = keyed_count(work_dir, kafka_bootstrap, unique_name, **{"task.max.batch.messages": "150"})
    events = topics(config)[0]
    keys = _keys(1800, 9)
    produce(kafka_bootstrap, events, keys[:900], 2, per_request=30)
    stop = threading.Event()
    joins: list[int] = []

    def churn() -> None:
        while not stop.is_set():
            member = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{unique_name}-1",
                               "session.timeout.ms": 6000, "auto.offset.reset": "earliest",
                               "enable.auto.commit": False, "log_level": 0})
            member.subscribe([events], on_assign=lambda c, parts: joins.append(len(parts)))
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and not stop.is_set():
                member.poll(0.2)
            member.close()   # leaves the group: another rebalance

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    run = Running(config, write_config(config, work_dir / "job.yaml"))
    try:
        run.wait_for_batches(2)
        produce(kafka_bootstrap, events, keys[900:], 2, per_request=30, first=900)
        run.wait_caught_up(kafka_bootstrap)
        out = run.stop()
    finally:
        stop.set()
        churner.join(30)
        run.close()
    assert len(joins) >= 3, f"the other member joined the group {len(joins)} times"
    assert "Traceback" not in out, out[-3000:]
    assert_exact(kafka_bootstrap, config, keys)


def _set_retention(servers: str, topic: str, retention_ms: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _log_start(servers: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "retention-probe", "log_level": 0})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0])
    finally:
        consumer.close()


def test_records_past_retention_stop_the_job_naming_the_gap_unless_told_to_skip_it(
        kafka_bootstrap: str, work_dir: Path, unique_name: str) -> None:
    """The job ran, was stopped, and records it had not read yet aged out of the topic (``retention.ms``). The next
    run stops and names the partition and the deleted offsets instead of silently starting after them; with
    ``consumer.auto.offset.reset: earliest`` it reads on from the oldest record left, saying what it skipped, and
    counts every record that is still there exactly once."""
    config = keyed_count(work_dir, kafka_bootstrap, unique_name, partitions=1)
    events = topics(config)[0]
    path = write_config(config, work_dir / "job.yaml")
    first, aged, late = _keys(60, 5), _keys(40, 5), _keys(30, 5)
    produce(kafka_bootstrap, events, first, 1, per_request=20)
    ran = _run(path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    produce(kafka_bootstrap, events, aged, 1, per_request=20, first=60)
    _set_retention(kafka_bootstrap, events, 1000)            # everything a second old goes at the next check
    eventually(lambda: _log_start(kafka_bootstrap, events, 0) == 100, 60, 0.5, "retention deleted nothing")
    _set_retention(kafka_bootstrap, events, 7 * 86_400_000)
    produce(kafka_bootstrap, events, late, 1, per_request=10, first=100)

    stopped = _run(path)
    assert stopped.returncode != 0, "a run over records deleted by retention exited 0"
    assert re.search(rf"kafka\.{re.escape(events)}#0.*\[60, 100\)", stopped.stderr), stopped.stderr[-3000:]
    assert "auto.offset.reset" in stopped.stderr, stopped.stderr[-3000:]

    skipping = Config({**dict(config.items()), "systems.kafka.consumer.auto.offset.reset": "earliest"})
    skipped = _run(write_config(skipping, work_dir / "skip.yaml"))
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    said = skipped.stderr + skipped.stdout
    assert re.search(r"skipped.*\[60, 100\)", said), said[-3000:]
    assert_exact(kafka_bootstrap, config, first + late)


def _lag(path: Path) -> dict[str, int]:
    """``sparza checkpoints show``'s lag per input partition."""
    from typer.testing import CliRunner

    from sparza.cli import app

    shown = CliRunner().invoke(app, ["checkpoints", "show", "--config", str(path)])
    assert shown.exit_code == 0, shown.output
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"(kafka\.\S+#\d+)\D[^\n]*?\(lag (\d+)\)", shown.output)}


def test_the_tail_of_multi_record_batches_is_counted_and_lag_is_zero_only_when_it_is(
        kafka_bootstrap: str, work_dir: Path, unique_name: str) -> None:
    """Issue 40: 30 committed input messages at the tail of their partitions were never counted while the driver
    reported lag 0 (suspected: an end offset reported one record batch short, as the old test broker did). Two
    producers fill the input in requests of many records, the last ones included; ``--once`` counts all of it and
    reports lag 0. Then one more request of 7 records: lag 7 on that partition (not 0) until the next run."""
    config = keyed_count(work_dir, kafka_bootstrap, unique_name, partitions=3, **{"task.max.batch.messages": "120"})
    events = topics(config)[0]
    path = write_config(config, work_dir / "job.yaml")
    keys = _keys(900, 13)
    produce(kafka_bootstrap, events, keys[:450], 3, per_request=45)
    produce(kafka_bootstrap, events, keys[450:], 3, per_request=90, first=450)
    ran = _run(path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert_exact(kafka_bootstrap, config, keys)
    assert _lag(path) == {f"kafka.{events}#{p}": 0 for p in range(3)}
    more = ["k3"] * 7
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 100, "log_level": 3})
    for i, key in enumerate(more):
        producer.produce(events, value=f"tail{i}".encode(), key=key.encode(), partition=partition_of(key, 3))
    assert producer.flush(30) == 0
    assert _lag(path) == {f"kafka.{events}#{p}": 7 if p == partition_of("k3", 3) else 0 for p in range(3)}
    again = _run(path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _lag(path) == {f"kafka.{events}#{p}": 0 for p in range(3)}
    assert_exact(kafka_bootstrap, config, keys + more)
