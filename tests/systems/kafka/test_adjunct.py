"""An adjunct store bootstrapping from a compacted Kafka topic (a CDC stream) before main input flows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
ADJUNCT = REPO / "tests" / "adjunct"
# LookupTask (tests/adjunct/adjunct_tasks.py) is named by dotted path: importable here and in Spark workers.
if str(ADJUNCT) not in sys.path:
    sys.path.insert(0, str(ADJUNCT))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ADJUNCT), os.environ.get("PYTHONPATH", "")) if p)

from sparza.config import Config  # noqa: E402
from sparza.streams import OutgoingMessageEnvelope, SystemStream  # noqa: E402
from sparza.systems import StreamSpec, Transaction  # noqa: E402
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer  # noqa: E402
from sparza.systems.kafka import KafkaSystemAdmin, KafkaSystemProducer  # noqa: E402

pytestmark = pytest.mark.spark


def test_adjunct_store_bootstraps_from_a_compacted_topic(spark: Any, work_dir: Path, kafka_bootstrap: str,
                                                         unique_name: str) -> None:
    from deltalake import DeltaTable

    from sparza.runtime import JobRunner

    customers = f"{unique_name}-customers"
    config = Config({
        "job.name": unique_name, "job.id": "1",
        "job.logged.store.base.dir": str(work_dir / "state"),
        "task.class": "adjunct_tasks.LookupTask",
        "task.inputs": f"delta.orders,kafka.{customers}",
        "task.max.batch.messages": "40", "task.commit.ms": "0",
        "systems.delta.samza.factory": "delta", "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work_dir / "streams"),
        "systems.kafka.samza.factory": "kafka", "systems.kafka.consumer.bootstrap.servers": kafka_bootstrap,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.kafka.streams.{customers}.samza.bootstrap": "true",
        "stores.lookup.adstore.input": f"kafka.{customers}",
        "stores.lookup.key.serde": "string", "stores.lookup.msg.serde": "json",
        "stores.lookup.backup.factories": "blobstore",
        "blob.store.manager.factory": "local", "blob.store.local.root": str(work_dir / "blobstore"),
    })
    KafkaSystemAdmin("kafka", config).create_stream(StreamSpec(customers, 2, properties={"cleanup.policy": "compact"}))
    delta = DeltaSystemAdmin("delta", config)
    delta.create_stream(StreamSpec("orders", 2))
    delta.create_stream(StreamSpec("seen", 1))
    # 200 customers (100 per partition: 3 batches of bootstrap), written as a CDC stream in transactions;
    # c0..c9 are updated later in the topic, so the store must hold their last value.
    values = {f"c{i}": {"name": f"n{i}"} for i in range(200)}
    producer = KafkaSystemProducer("kafka", config)
    producer.register("cdc")
    for version, batch in enumerate([[(k, v) for k, v in values.items()],
                                     [(f"c{i}", {"name": f"renamed{i}"}) for i in range(10)]], start=1):
        producer.begin("cdc", Transaction(f"{customers}-cdc", version))
        for key, value in batch:
            producer.send("cdc", OutgoingMessageEnvelope(SystemStream("kafka", customers), json.dumps(value).encode(),
                                                         key=key.encode(), partition=int(key[1:]) % 2))
        producer.flush("cdc", transaction=Transaction(f"{customers}-cdc", version))
        values.update(dict(batch))
    producer.stop()
    orders = DeltaSystemProducer("delta", config)
    orders.register("t")
    for i in range(0, 200, 5):
        orders.send("t", OutgoingMessageEnvelope(SystemStream("delta", "orders"),
                                                 json.dumps({"id": i, "customer": f"c{i}"}).encode(),
                                                 key=str(i).encode(), partition=i % 2))
    orders.flush("t")
    lines: list[str] = []
    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lines.append)
    runner.run()
    table = DeltaTable(str(work_dir / "streams" / "seen")).to_pyarrow_table(columns=["value"])
    seen = {body["order"]: body for body in (json.loads(v) for v in table.column("value").to_pylist())}
    assert len(seen) == 40
    assert [o for o, body in seen.items() if body["found"] is None] == []   # even the first order saw its customer
    assert all(body["found"] == values[body["customer"]] for body in seen.values())
    assert seen[0]["found"] == {"name": "renamed0"} and seen[5]["found"] == {"name": "renamed5"}
