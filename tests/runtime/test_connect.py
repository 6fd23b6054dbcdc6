"""Jobs and applications through Spark Connect: the session's Connect server (started from the installed
pyspark on loopback) runs them with executors that do not have the project, which reach sparza and the
examples only through ``job.py.files`` (``sparza package``). The client drives the batches
(runtime/driver/clientloop.py). Exact results against plain-Python oracles, across restarts, and a batch some
tasks committed and others not is completed exactly from the task checkpoints (the client keeps no offset log)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import counts_per_key, expected_counts, final_counts

import sparza
from sparza.config import Config
from sparza.runtime import JobFailedError, JobRunner, checkpoint_store_from_config
from sparza.runtime.driver.source import SparzaStreamReader
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer
from sparza.testing.faults import fault_keys

pytestmark = [pytest.mark.connect, pytest.mark.slow]


def _on_connect(make_job, package: Path, **overrides: str) -> Config:
    # The server runs on this host: its executors see the test's temp dirs, which the opt-out declares.
    return make_job(**{"job.py.files": str(package), "job.filesystem.shared": "true", **overrides})


def test_keyed_count_through_spark_connect_is_exact_across_a_restart(connect_spark, make_job, sparza_package):
    config = _on_connect(make_job, sparza_package)
    append_messages(config, 1000, 7, commit_size=250)
    first = sparza.run(config, spark=connect_spark, once=True)
    assert (first.exit_code, first.reason) == (0, "caught up (--once)")
    assert first.batches >= 2  # capped at 300 per SSP
    counts, rows = final_counts(config)
    assert counts == expected_counts(1000, 7)
    assert rows == 1000
    append_messages(config, 400, 7, start=1000, commit_size=400)
    second = sparza.run(config, spark=connect_spark, once=True)
    assert second.exit_code == 0 and second.batches >= 1
    counts, rows = final_counts(config)
    assert counts == expected_counts(1400, 7)
    assert rows == 1400
    checkpoints = checkpoint_store_from_config(config, "kc-1").read_all()
    # Each task numbers its own batches in containers: every committed task batch is one step of one task.
    assert sum(cp.batch for cp in checkpoints.values()) == first.batches + second.batches
    assert connect_spark.range(3).count() == 3  # the caller's session: used, never stopped


def test_a_batch_interrupted_after_some_tasks_committed_is_completed_exactly_from_the_task_checkpoints(
        connect_spark, make_job, sparza_package, work_dir, monkeypatch):
    # The micro-batch mode's client loop keeps no offset log: the task checkpoints are the only record. One task
    # fails right after its producers flushed (its output visible, its intent open), the other commits; the run
    # ends (no restart in it; the fault is sticky: the server's local[2,4] retries a failed Spark task). More input
    # arrives, and the next start (without the fault) plans from the task checkpoints: the failed task replays its
    # intent's exact range (same planning time), the committed one reads on from its checkpoint.
    marker = work_dir / "failed-once"
    config = _on_connect(make_job, sparza_package, **{"task.max.batch.messages": "10000",
                                                        "job.execution.mode": "batches",
                                                        "job.container.max.restarts": "0"})
    failing = config.with_overrides({**fault_keys(marker), "task.testing.fail.once.sticky": "true"})
    append_messages(config, 600, 5, commit_size=600)
    first = JobRunner(failing, spark=connect_spark, once=True, install_signal_handlers=False, status=lambda _: None)
    with pytest.raises(JobFailedError, match="injected"):
        first.run()
    failed = marker.read_text().strip()
    stored = checkpoint_store_from_config(config, "kc-1").read_all()
    intent = stored[failed].open_intent()
    assert intent is not None
    (other,) = [name for name in stored if name != failed]
    assert stored[other].open_intent() is None and stored[other].batch == intent.batch
    assert final_counts(config)[1] == 600  # the failed task's flushed output is visible already

    append_messages(config, 400, 5, start=600, commit_size=400)
    planned: list[list] = []
    real_partitions = SparzaStreamReader.partitions
    monkeypatch.setattr(SparzaStreamReader, "partitions",
                        lambda self, start, end: planned.append(real_partitions(self, start, end)) or planned[-1])
    lines: list[str] = []
    again = JobRunner(config, spark=connect_spark, once=True, install_signal_handlers=False, status=lines.append)
    again.run()
    splits = {p.value.task: p.value for p in planned[0]}
    replayed = splits[failed]
    assert (replayed.start_offsets(), replayed.end_offsets(), replayed.planned_at) == (
        intent.starts, intent.ends, intent.planned_at_ms)  # its exact range, planned as then
    read_on = splits[other]
    assert read_on.start_offsets() == stored[other].offsets != read_on.end_offsets()  # what arrived since
    assert not any("skipped (already committed: a replay)" in line for line in lines), lines
    after = checkpoint_store_from_config(config, "kc-1").read_all()
    assert all(cp.open_intent() is None for cp in after.values())
    assert not (Path(again.spark_checkpoint_dir) / "offsets").exists()  # no log of its own
    assert counts_per_key(config) == {k: list(range(1, n + 1)) for k, n in expected_counts(1000, 5).items()}


def _send(config: Config, events: list[tuple[str, int]], first: int) -> None:
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    for i, (key, n) in enumerate(events, start=first):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"),
                                                      json.dumps({"key": key, "n": n}).encode(), key=key.encode(),
                                                      partition=i % 2, timestamp=1000 + i))
    producer.flush("test")


def test_two_stage_application_through_spark_connect_is_exact_across_a_restart(connect_spark, work_dir,
                                                                              sparza_package):
    config = Config({
        "job.name": "shop",
        "app.class": "sparza.api.examples.RepartitionCount",
        "app.example.partitions": "3",
        "job.logged.store.base.dir": str(work_dir / "state"),
        "task.commit.ms": "0",
        "task.max.batch.messages": "50",
        "systems.delta.samza.factory": "delta",
        "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work_dir / "streams"),
        "blob.store.local.root": str(work_dir / "blobstore"),
        "job.py.files": str(sparza_package),
        "job.filesystem.shared": "true",
    })
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("events", 2))
    admin.create_stream(StreamSpec("out", 2))
    events = [(f"k{i % 7}", i if i % 10 else -i) for i in range(1, 121)]
    _send(config, events[:70], 0)
    assert sparza.run(config, spark=connect_spark, once=True).exit_code == 0
    _send(config, events[70:], 70)
    assert sparza.run(config, spark=connect_spark, once=True).exit_code == 0
    from deltalake import DeltaTable

    table = DeltaTable(str(work_dir / "streams" / "out")).to_pyarrow_table(columns=["value", "type"])
    rows = [json.loads(v) for v, t in zip(table.column("value").to_pylist(), table.column("type").to_pylist(),
                                          strict=True) if t == 0]
    oracle = Counter((k, n) for k, n in events if n >= 0)  # what RepartitionCount keeps, each exactly once
    assert Counter((r["key"], r["n"]) for r in rows) == oracle
    assert all(r["seen"] == "stage2" for r in rows)
