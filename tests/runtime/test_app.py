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


def _shop(work_dir, events, *, flush_every=None, **extra):
    """The RepartitionCount application on Delta under ``work_dir``, its input holding ``events`` (key, n) in
    one commit or one per ``flush_every`` messages."""
    config = Config({
        "job.name": "shop",
        "app.class": "sparza.api.examples.RepartitionCount",
        "job.logged.store.base.dir": str(work_dir / "state"),
        "task.commit.ms": "0",
        "systems.delta.samza.factory": "delta",
        "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work_dir / "streams"),
        "systems.delta.streams.events.bounded": "true",
        "blob.store.local.root": str(work_dir / "blobstore"),
        **extra,
    })
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("events", 2))
    admin.create_stream(StreamSpec("out", 2))
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    for i, (key, n) in enumerate(events):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"),
                                                      json.dumps({"key": key, "n": n}).encode(), key=key.encode(),
                                                      partition=i % 2, timestamp=1000 + i))
        if flush_every and i % flush_every == flush_every - 1:
            producer.flush("test")
    producer.flush("test")
    return config


def _output(work_dir):
    from deltalake import DeltaTable

    table = DeltaTable(str(work_dir / "streams" / "out")).to_pyarrow_table(columns=["value", "type"])
    return [json.loads(v) for v, t in zip(table.column("value").to_pylist(), table.column("type").to_pylist(),
                                          strict=True) if t == 0]


def test_two_stage_application_ends_with_exact_output(spark, work_dir):
    events = [(f"k{i % 7}", i if i % 10 else -i) for i in range(1, 121)]
    config = _shop(work_dir, events, **{"app.example.partitions": "3"})
    outcome = run_application(config, spark=spark, install_signal_handlers=False)
    assert outcome.reason == "all inputs ended"
    rows = _output(work_dir)
    assert Counter(r["key"] for r in rows) == Counter(k for k, n in events if n >= 0)
    assert all(r["seen"] == "stage2" for r in rows)


def test_intermediate_stream_loses_what_the_next_stage_committed(spark, work_dir):
    """Samza's samza.delete.committed.messages, which the plan sets for its intermediate streams: with the interval
    at 0 the driver of stage 2 truncates the intermediate Delta stream after its batches, so its files do not pile
    up, and the output stays exact (oracle: the input)."""
    from deltalake import DeltaTable

    from sparza.api import plan_application
    from sparza.systems.delta.log import DeltaLog
    from sparza.systems.delta.retention import read_horizon

    events = [(f"k{i % 5}", i) for i in range(1, 101)]
    config = _shop(work_dir, events, flush_every=20, **{  # several input commits: several batches per stage
        "app.example.partitions": "2", "task.max.batch.messages": "10",
        "job.delete.committed.messages.interval.ms": "0"})
    plan = plan_application(config)
    intermediate = SystemStream.parse(plan.stages[-1].config.get_str("task.inputs").split(",")[0])
    assert plan.stages[-1].config.get_bool(
        f"systems.delta.streams.{intermediate.stream}.samza.delete.committed.messages")
    outcome = run_application(config, spark=spark, install_signal_handlers=False)
    assert outcome.reason == "all inputs ended"
    assert Counter(r["key"] for r in _output(work_dir)) == Counter(k for k, _ in events)
    location = DeltaSystemAdmin("delta", plan.stages[-1].config).location(intermediate.stream)
    horizon = read_horizon(DeltaLog(location))
    latest = DeltaTable(location.uri).version()
    assert 1 < horizon <= latest + 1                     # truncated, never past what stage 2 committed
    import pyarrow as pa

    live = set(pa.table(DeltaTable(location.uri).get_add_actions(flatten=True)).column("path").to_pylist())
    on_disk = {str(p.relative_to(location.uri)) for p in (work_dir / "streams" / intermediate.stream).rglob("*.parquet")
               if "_delta_log" not in p.parts}
    assert on_disk == live                               # the removed files are gone from storage too
