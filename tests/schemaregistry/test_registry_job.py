"""A job with ``serde: avro`` on Kafka through the Apicurio Registry, end to end (issue 35 item 5).

The keyed count (``examples/keyed_count``) runs in this process on the engine's containers
(:class:`~sparza.engine.inprocess.InProcessHost`, the manager, container, task and commit code ``sparza run``
hosts, without Spark) over the session's Kafka broker and registry. Its input is written by an independent
encoder (``oracle.py``: its own schema registration over plain HTTP, its own Avro encoder and Confluent framing)
with a plain confluent-kafka producer; its output is read ``read_committed`` with a plain consumer and decoded
by the same independent decoder, with the writer's schema fetched by the id each record carries. Expected: every
running count ``(key, n)`` exactly once, as a plain Python loop over what was produced computes them.

Then the input's producer moves to a compatible schema (a field added with a default) and the job to a
compatible output schema: the job goes on and registers the new output version. An incompatible output schema
fails the job's start check and, past it, the task's first write, naming the subject and the version.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sparza.config import Config
from sparza.engine.inprocess import InProcessHost, InProcessJob
from sparza.schemaregistry import IncompatibleSchemaError
from sparza.systems import StreamSpec
from sparza.systems.kafka import KafkaSystemAdmin

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.runtime.helpers import job_values  # noqa: E402
from tests.schemaregistry import oracle  # noqa: E402

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "gift", "type": "boolean", "default": False}]}
COUNT_V1 = {"type": "record", "name": "Count", "namespace": "shop",
            "fields": [{"name": "key", "type": "string"}, {"name": "count", "type": "long"}]}
COUNT_V2 = {**COUNT_V1, "fields": [*COUNT_V1["fields"], {"name": "source", "type": "string", "default": "sparza"}]}
COUNT_V3 = {**COUNT_V1, "fields": [COUNT_V1["fields"][0], {"name": "count", "type": "string"}]}  # long -> string
PARTITIONS = 2


def job_config(work: Path, servers: str, url: str, name: str, out_schema: dict[str, Any]) -> Config:
    """The keyed count from ``<name>-orders`` (Avro, read as written) to ``<name>-counts`` (Avro, ``out_schema``)."""
    orders, counts = f"{name}-orders", f"{name}-counts"
    return Config(job_values(work, **{
        "job.name": name,
        "task.inputs": f"kafka.{orders}",
        "keyed_count.output": f"kafka.{counts}",
        "task.commit.ms": "0",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.consumer.bootstrap.servers": servers,
        "systems.kafka.samza.offset.default": "oldest",
        "systems.kafka.schema.registry.url": url,
        f"systems.kafka.streams.{orders}.samza.key.serde": "string",
        f"systems.kafka.streams.{orders}.samza.msg.serde": "avro",
        f"systems.kafka.streams.{counts}.samza.key.serde": "string",
        f"systems.kafka.streams.{counts}.samza.msg.serde": "avro",
        f"systems.kafka.streams.{counts}.samza.msg.schema": json.dumps(out_schema)}))


def load(servers: str, url: str, topic: str, schema: dict[str, Any], orders: list[dict[str, Any]]) -> int:
    """Write ``orders`` as another producer would: the schema registered over plain HTTP, each record the
    independent encoder's Avro in the Confluent framing, keyed by item (one item, one partition); its schema id."""
    import zlib

    schema_id = oracle.register(url, f"{topic}-value", schema)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "log_level": 3})
    for order in orders:
        producer.produce(topic, oracle.frame(schema_id, oracle.encode(schema, order)), key=order["item"].encode(),
                         partition=zlib.crc32(order["item"].encode()) % PARTITIONS)
    assert producer.flush(30) == 0
    return schema_id


def orders(first: int, n: int, items: int, **extra: Any) -> list[dict[str, Any]]:
    """Orders ``first .. first + n - 1`` over ``items`` items (non-ASCII names, ids beyond 32 bits)."""
    return [{"id": (i * 7_919) << 33, "item": f"itém-{(i * 31) % items}", **extra} for i in range(first, first + n)]


def run_once(config: Config, timeout_s: float = 120.0) -> InProcessJob:
    """``--once`` on the engine's containers in this process: until every task is done (or failed)."""
    host = InProcessHost(slots=1)
    job = InProcessJob(config, once=True)
    host.join(job)
    deadline = time.monotonic() + timeout_s
    try:
        while not job.has_left:
            assert time.monotonic() < deadline, f"the job did not finish: {job.notices[-5:]}, {job.events[-5:]}"
            if not host.step():
                time.sleep(0.02)   # nothing moved: let the commit interval and the broker's answers come
    finally:
        host.close()
    return job


def committed_output(servers: str, url: str, topic: str) -> list[tuple[int, str, dict[str, Any]]]:
    """Every record of ``topic`` a ``read_committed`` consumer gets: (schema id, key, record decoded with the
    writer's schema the registry holds under that id)."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"{topic}-oracle", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 3})
    out: list[tuple[int, str, dict[str, Any]]] = []
    schemas: dict[int, dict[str, Any]] = {}
    try:
        for partition in range(PARTITIONS):
            tp = TopicPartition(topic, partition)
            end = consumer.get_watermark_offsets(tp, timeout=30)[1]
            consumer.assign([TopicPartition(topic, partition, 0)])
            deadline = time.monotonic() + 30
            # Until the consumer's position passes the end (the last transaction marker is no message to poll).
            while consumer.position([tp])[0].offset < end:
                assert time.monotonic() < deadline, f"{topic}[{partition}]: not read to its end {end} in 30 s"
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                schema_id, payload = oracle.unframe(msg.value())
                schema = schemas.get(schema_id) or schemas.setdefault(schema_id, oracle.schema_by_id(url, schema_id))
                out.append((schema_id, msg.key().decode(), oracle.decode(schema, payload)))
    finally:
        consumer.close()
    return out


def expected_pairs(written: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    """Every running count (item, n) of ``written``, once each (the oracle)."""
    seen: Counter[str] = Counter()
    pairs: Counter[tuple[str, int]] = Counter()
    for order in written:
        seen[order["item"]] += 1
        pairs[(order["item"], seen[order["item"]])] += 1
    return pairs


def test_an_avro_job_on_kafka_through_the_registry(kafka_bootstrap: str, registry_url: str, work_dir: Path,
                                                    unique_name: str) -> None:
    servers, url, name = kafka_bootstrap, registry_url, unique_name
    orders_topic, counts_topic = f"{name}-orders", f"{name}-counts"
    admin = KafkaSystemAdmin("kafka", Config({"systems.kafka.samza.factory": "kafka",
                                              "systems.kafka.consumer.bootstrap.servers": servers}))
    for topic in (orders_topic, counts_topic):
        admin.create_stream(StreamSpec(topic, PARTITIONS))
    admin.close()

    # 1. V1 orders in, V1 counts out: registered, fetched, in the Confluent wire format, exactly once.
    first = orders(0, 300, 13)
    load(servers, url, orders_topic, ORDER_V1, first)
    job = run_once(job_config(work_dir, servers, url, name, COUNT_V1))
    assert set(job.done.values()) == {"caught up"}, (job.done, job.notices[-5:])
    out = committed_output(servers, url, counts_topic)
    out_v1, schema_v1 = oracle.version(url, f"{counts_topic}-value", 1)
    assert schema_v1 == COUNT_V1 and oracle.versions(url, f"{counts_topic}-value") == [1]
    assert {schema_id for schema_id, _, _ in out} == {out_v1}
    assert all(key == record["key"] for _, key, record in out)
    assert Counter((r["key"], r["count"]) for _, _, r in out) == expected_pairs(first)

    # 2. A compatible change on both sides: the producer writes V2 orders (a field with a default), the job writes
    # V2 counts (a field with a default, filled in). The job goes on from its checkpoints; the new output version
    # is registered, the V1 records stay readable as they were written.
    second = orders(300, 200, 13, gift=True)
    load(servers, url, orders_topic, ORDER_V2, second)
    assert oracle.versions(url, f"{orders_topic}-value") == [1, 2]
    job = run_once(job_config(work_dir, servers, url, name, COUNT_V2))
    assert set(job.done.values()) == {"caught up"}, (job.done, job.notices[-5:])
    assert oracle.versions(url, f"{counts_topic}-value") == [1, 2]
    out_v2, _ = oracle.version(url, f"{counts_topic}-value", 2)
    out = committed_output(servers, url, counts_topic)
    new = [r for schema_id, _, r in out if schema_id == out_v2]
    assert len(new) == len(second) and all(r["source"] == "sparza" for r in new)
    assert Counter(schema_id for schema_id, _, _ in out) == {out_v1: len(first), out_v2: len(second)}
    assert Counter((r["key"], r["count"]) for _, _, r in out) == expected_pairs(first + second)

    # 3. An incompatible output schema (count long -> string): the start check refuses it naming the subject and
    # the version it breaks; a job past that check (the registry's level changed since) fails at its first write,
    # the same way, and commits nothing.
    load(servers, url, orders_topic, ORDER_V2, orders(500, 20, 13))
    bad = job_config(work_dir, servers, url, name, COUNT_V3)
    from sparza.runtime.driver.preflight import check_job

    with pytest.raises(IncompatibleSchemaError) as refused:
        check_job(bad)
    subject = f"{counts_topic}-value"
    assert f"subject '{subject}'" in str(refused.value) and "version 2" in str(refused.value), refused.value
    job = run_once(bad)
    failed = [r for r in job.results() if r.error]
    assert set(job.done.values()) <= {"failed", "caught up"} and "failed" in job.done.values(), job.done
    assert failed and all(f"subject '{subject}'" in (r.error or "") and "version 2" in (r.error or "")
                          for r in failed), [r.error for r in failed]
    assert oracle.versions(url, subject) == [1, 2]
    assert len(committed_output(servers, url, counts_topic)) == len(first) + len(second)
