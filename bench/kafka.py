"""Kafka throughput: the keyed count through ``sparza run`` vs confluent-kafka's own loops, one broker.

Same data for all: N 100-byte messages over K keys in P partitions of a Kafka topic on a local
Apache Kafka broker (one KRaft node, started by this script on free loopback ports).

- **sparza**: the example job (``examples/keyed_count``: RocksDB store, the running count of each
  message written to a Kafka topic in one transaction per task and batch) run by ``JobRunner``
  exactly as ``sparza run --once`` runs it, on local[2]; messages/s from building the query to its end.
- **consume loop**: one confluent-kafka consumer reading every partition to its end and counting
  keys in a dict (read_committed, as sparza reads): the raw consumer loop's rate on a keyed count.
- **produce loop**: one confluent-kafka producer writing N JSON running counts (key + value) and
  flushing: the raw producer rate.

The input is loaded in transactions. SparkSession startup is excluded; a 10k-message warm-up job runs first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _report import record, table  # noqa: E402

from sparza import stop_containers  # noqa: E402

SCALES = {"small": (100_000, 1_000, 4), "full": (1_000_000, 10_000, 4)}


MEASURES = ('A keyed count through `sparza run` with Kafka topics in and out (exactly once, in transactions), '
            "against confluent-kafka's own consume loop and produce loop over the same messages.")
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def job_config(root: Path, servers: str, name: str, max_batch: int) -> Any:
    from examples.keyed_count.config import job_values

    from sparza.config import Config

    return Config(job_values(root, **{
        "job.name": name, "task.max.batch.messages": max_batch, "blob.store.local.fsync": "false",
        "task.inputs": f"kafka.{name}-events", "keyed_count.output": f"kafka.{name}-counts",
        "systems.kafka.samza.factory": "kafka", "systems.kafka.consumer.bootstrap.servers": servers,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.kafka.streams.{name}-counts.samza.key.serde": "string",
        f"systems.kafka.streams.{name}-counts.samza.msg.serde": "json"}))


def load(servers: str, topic: str, messages: int, keys: int, partitions: int) -> float:
    """Create ``topic`` (and its counts topic) and fill it, 50k messages per transaction."""
    from confluent_kafka import Producer

    from sparza.config import Config
    from sparza.systems import StreamSpec
    from sparza.systems.kafka import KafkaSystemAdmin, partition_for

    started = time.perf_counter()
    admin = KafkaSystemAdmin("kafka", Config({"systems.kafka.consumer.bootstrap.servers": servers}))
    admin.create_stream(StreamSpec(topic, partitions))
    admin.create_stream(StreamSpec(topic.replace("-events", "-counts"), partitions))
    producer = Producer({"bootstrap.servers": servers, "transactional.id": f"{topic}-loader", "linger.ms": 20,
                         "log_level": 3})
    producer.init_transactions(30)
    value = b"x" * 100
    for first in range(0, messages, 50_000):
        producer.begin_transaction()
        for i in range(first, min(first + 50_000, messages)):
            key = f"k{i % keys}".encode()
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=partition_for(key, partitions))
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.commit_transaction(60)
    return time.perf_counter() - started


def run_sparza(spark: Any, config: Any) -> tuple[float, int]:
    from sparza.runtime import JobRunner

    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    started = time.perf_counter()
    runner.run()
    elapsed = time.perf_counter() - started
    return elapsed, int(runner.metrics.snapshot()["aggregate"]["messages-processed"])


def consume_loop(servers: str, topic: str, partitions: int) -> tuple[float, int]:
    """Read every partition to its end with one consumer, counting keys."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"{topic}-raw", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True, "log_level": 3,
                         "fetch.wait.max.ms": 20})
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    counts: dict[bytes, int] = {}
    done: set[int] = set()
    n = 0
    while len(done) < partitions:
        for msg in consumer.consume(num_messages=10_000, timeout=0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                continue
            key = msg.key()
            counts[key] = counts.get(key, 0) + 1
            n += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed, n


def produce_loop(servers: str, topic: str, messages: int, keys: int) -> tuple[float, int]:
    """Write ``messages`` JSON running counts with one idempotent producer and flush."""
    from confluent_kafka import Producer

    from sparza.config import Config
    from sparza.systems import StreamSpec
    from sparza.systems.kafka import KafkaSystemAdmin

    # The bench's broker creates no topic on first use (auto.create.topics.enable: false): without this the loop
    # waited out its flush timeout with every message undelivered.
    KafkaSystemAdmin("kafka", Config({"systems.kafka.consumer.bootstrap.servers": servers})).create_stream(
        StreamSpec(topic, 4))
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5,
                         "log_level": 3})
    started = time.perf_counter()
    for i in range(messages):
        key = f"k{i % keys}"
        value = json.dumps({"key": key, "count": i // keys + 1}).encode()
        while True:
            try:
                producer.produce(topic, value=value, key=key.encode())
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    assert left == 0, f"{left} of {messages} messages were not delivered"
    return time.perf_counter() - started, messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--messages", type=int, default=None, help="override the scale's message count")
    args = parser.parse_args()
    messages, keys, partitions = SCALES[args.scale]
    if args.messages:
        messages = args.messages
    from sparza.devservers.kafka import KAFKA_VERSION, KafkaBroker
    from sparza.runtime.driver.app import _importable_cwd
    from sparza.testing import local_spark_session

    _importable_cwd()
    root = Path(tempfile.mkdtemp(prefix="sparza-bench-kafka-"))
    broker = KafkaBroker(root / "kafka")
    broker.start()
    try:
        servers = broker.bootstrap_servers
        load_s = load(servers, "bench-events", messages, keys, partitions)
        print(f"loaded {messages} messages in {load_s:.1f} s")
        config = job_config(root / "job", servers, "bench", max_batch=max(messages // partitions // 2, 1000))
        spark = local_spark_session("local[2]", "sparza-bench-kafka")
        try:
            load(servers, "warm-events", 10_000, 100, partitions)
            run_sparza(spark, job_config(root / "warm", servers, "warm", 1000))
            sparza_s, sparza_n = run_sparza(spark, config)
            print(f"sparza: {sparza_n} in {sparza_s:.1f} s")
        finally:
            stop_containers(spark)  # before the session stops: no container task cut off
            spark.stop()
        consume_s, consume_n = consume_loop(servers, "bench-events", partitions)
        print(f"consume loop: {consume_n} in {consume_s:.1f} s")
        produce_s, produce_n = produce_loop(servers, "bench-produced", messages, keys)
        print(f"produce loop: {produce_n} in {produce_s:.1f} s")
        assert sparza_n == messages and consume_n == messages, (sparza_n, consume_n, messages)
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    rate = {name: messages / s for name, s in (("sparza", sparza_s), ("consume", consume_s),
                                                ("produce", produce_s))}
    rows = [
        ["sparza run (keyed count: Kafka in, RocksDB store, Kafka out in transactions)", f"{sparza_s:.1f}",
         f"{rate['sparza']:,.0f}", "1.00"],
        ["confluent-kafka consume loop (read_committed, dict count)", f"{consume_s:.2f}",
         f"{rate['consume']:,.0f}", f"{rate['consume'] / rate['sparza']:.2f}"],
        ["confluent-kafka produce loop (idempotent, JSON counts)", f"{produce_s:.2f}",
         f"{rate['produce']:,.0f}", f"{rate['produce'] / rate['sparza']:.2f}"],
    ]
    body = (f"{messages:,} messages of 100 bytes, {keys:,} keys, {partitions} partitions, local[2], one Apache "
            f"Kafka {KAFKA_VERSION} broker (KRaft, one node) on loopback.\n\n"
            + table(["path", "seconds", "messages/s", "rate vs sparza"], rows)
            + f"\n\nsparza vs the raw consume loop: **{100 * rate['sparza'] / rate['consume']:.1f}%** (goal ≥ 50%). "
              "sparza consumes and produces every message (one output per input), the loops do one each.\n"
              "Time from building the query to its end; SparkSession startup excluded; a 10k-message warm-up "
              "job ran first.\n")
    cmd = f"python bench/kafka.py --scale {args.scale}" + (f" --messages {args.messages}" if args.messages else "")
    record("kafka", "Kafka: keyed count through sparza run vs confluent-kafka's consume and produce loops", cmd,
           body, measures=MEASURES)


if __name__ == "__main__":
    main()
