"""An ``app.class`` application on Spark: each stage its own query, intermediate Delta streams with
control messages, the bounded pipeline ending by itself with exact output."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from sparza.config import Config
from sparza.runtime.driver.application import run_application
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

pytestmark = pytest.mark.spark


def test_two_stage_application_ends_with_exact_output(spark, work_dir):
    config = Config({
        "job.name": "shop",
        "app.class": "sparza.api.examples.RepartitionCount",
        "app.example.partitions": "3",
        "job.logged.store.base.dir": str(work_dir / "state"),
        "task.commit.ms": "0",
        "systems.delta.samza.factory": "delta",
        "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work_dir / "streams"),
        "systems.delta.streams.events.bounded": "true",
        "blob.store.local.root": str(work_dir / "blobstore"),
    })
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("events", 2))
    admin.create_stream(StreamSpec("out", 2))
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    events = [(f"k{i % 7}", i if i % 10 else -i) for i in range(1, 121)]
    for i, (key, n) in enumerate(events):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"),
                                                      json.dumps({"key": key, "n": n}).encode(), key=key.encode(),
                                                      partition=i % 2, timestamp=1000 + i))
    producer.flush("test")
    outcome = run_application(config, spark=spark, install_signal_handlers=False)
    assert outcome.reason == "all inputs ended"
    from deltalake import DeltaTable

    table = DeltaTable(str(work_dir / "streams" / "out")).to_pyarrow_table(columns=["value", "type"])
    rows = [json.loads(v) for v, t in zip(table.column("value").to_pylist(), table.column("type").to_pylist(),
                                          strict=True) if t == 0]
    assert Counter(r["key"] for r in rows) == Counter(k for k, n in events if n >= 0)
    assert all(r["seen"] == "stage2" for r in rows)
