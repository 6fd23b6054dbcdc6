"""Jobs and applications through Spark Connect: the session's Connect server (started from the installed
pyspark on loopback) runs them with executors that do not have the project, which reach sparza and the
examples only through ``job.py.files`` (``sparza package``). The client drives the batches
(runtime/driver/clientloop.py). Exact results against plain-Python oracles, across restarts, and a batch logged
but not committed runs again with the very same plan."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import expected_counts, final_counts

import sparza
from sparza.config import Config
from sparza.runtime import JobFailedError, JobRunner, checkpoint_store_from_config
from sparza.runtime.driver.clientloop import PlanLog
from sparza.runtime.driver.source import SparzaStreamReader
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

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


def test_a_logged_batch_without_its_commit_runs_again_with_the_same_plan(connect_spark, make_job, sparza_package,
                                                                        monkeypatch):
    # The client loop's plan log belongs to the micro-batch mode (containers keep no offset log).
    # No restart in the run: the client's death must end it, as a crash of the process would.
    config = _on_connect(make_job, sparza_package, **{"task.max.batch.messages": "10000",
                                                        "job.execution.mode": "batches",
                                                        "job.container.max.restarts": "0"})
    append_messages(config, 600, 5, commit_size=600)

    def client_dies(self, n):
        raise RuntimeError("client died before recording the commit")

    real_commit = PlanLog.write_commit
    monkeypatch.setattr(PlanLog, "write_commit", client_dies)
    first = JobRunner(config, spark=connect_spark, once=True, install_signal_handlers=False, status=lambda _: None)
    with pytest.raises(JobFailedError, match="client died"):
        first.run()
    spark_dir = Path(first.spark_checkpoint_dir)
    logged = json.loads((spark_dir / "offsets" / "0").read_text())
    assert not (spark_dir / "commits" / "0").exists()
    assert final_counts(config)[1] == 600  # the tasks had committed the batch

    monkeypatch.setattr(PlanLog, "write_commit", real_commit)
    planned: list[tuple[dict, dict]] = []
    real_partitions = SparzaStreamReader.partitions
    monkeypatch.setattr(SparzaStreamReader, "partitions",
                        lambda self, start, end: planned.append((start, end)) or real_partitions(self, start, end))
    lines: list[str] = []
    again = JobRunner(config, spark=connect_spark, once=True, install_signal_handlers=False, status=lines.append)
    outcome = again.run()
    assert planned[0] == (logged["start"], logged["end"])  # the very same plan, planned_at included
    assert (spark_dir / "commits" / "0").exists()
    assert any("2 task batch(es) skipped (already committed: a replay)" in line for line in lines), lines
    assert outcome.batches == 1
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, 5)
    assert rows == 600


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
