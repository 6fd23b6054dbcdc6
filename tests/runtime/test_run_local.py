"""`JobRunner` on the shared local[2] SparkSession with real Delta streams, RocksDB and a local blob store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import counts_per_key, expected_counts, final_counts, metrics_after_once

from sparza.config import Config
from sparza.runtime import JobFailedError, JobRunner, checkpoint_store_from_config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.delta import DeltaSystemProducer
from sparza.testing.faults import fault_keys

pytestmark = pytest.mark.spark


def _run(spark, config: Config, **kwargs) -> JobRunner:
    runner = JobRunner(config, spark=spark, once=kwargs.pop("once", True), install_signal_handlers=False,
                       status=lambda line: None, **kwargs)
    runner.run()
    return runner


def _metric(runner: JobRunner, name: str) -> int:
    return sum(int(metrics.get(name, 0)) for group, metrics in runner.metrics.snapshot().items()
               if isinstance(metrics.get(name, 0), int))


def test_keyed_count_is_exact_across_runs_and_checkpoints_record_offsets(spark, make_job):
    config = make_job()
    append_messages(config, 1000, 7, commit_size=250)
    runner = _run(spark, config)
    assert runner.metrics.snapshot()["aggregate"]["messages-processed"] == 1000
    assert runner.metrics.snapshot()["aggregate"]["batches"] >= 2  # capped at 300 per SSP
    counts, rows = final_counts(config)
    assert counts == expected_counts(1000, 7)
    assert rows == 1000
    checkpoints = checkpoint_store_from_config(config, "kc-1").read_all()
    assert sorted(checkpoints) == ["Partition 0", "Partition 1"]
    assert all(cp.stores["counts"] and not cp.stores["counts"].startswith("local:") for cp in checkpoints.values())
    # A second run continues from the task checkpoints (new data only, state restored).
    append_messages(config, 400, 7, start=1000, commit_size=400)
    _run(spark, config)
    counts, rows = final_counts(config)
    assert counts == expected_counts(1400, 7)
    assert rows == 1400


def _forget_last_spark_commit(runner: JobRunner) -> None:
    """Delete Spark's commit of its last batch: Spark replays that batch from its offset log on restart."""
    spark_dir = Path(runner.spark_checkpoint_dir)
    commits = sorted((spark_dir / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    for crc in (spark_dir / "commits").glob(f".{commits[-1].name}.crc"):
        crc.unlink()


def test_a_batch_spark_replays_from_its_offset_log_is_planned_from_the_task_checkpoints(spark, make_job):
    # The micro-batch mode (containers keep no Spark offset log). Spark's log is only its bookkeeping: a batch it
    # replays is planned from the task checkpoints, so nothing is read twice and what arrived since is read in it.
    config = make_job(**{"task.max.batch.messages": "10000", "job.execution.mode": "batches"})
    append_messages(config, 600, 5, commit_size=600)
    runner = _run(spark, config)
    _forget_last_spark_commit(runner)
    replay = _run(spark, config)  # nothing new: the replayed batch has no task to run
    assert replay.last_results == [] and _metric(replay, "tasks-skipped") == 0
    assert (Path(replay.spark_checkpoint_dir) / "commits").is_dir()
    _forget_last_spark_commit(replay)
    append_messages(config, 400, 5, start=600, commit_size=400)
    again = _run(spark, config)
    # Run as logged, the replay would be skipped by both tasks and a second batch would read the new messages.
    assert _metric(again, "tasks-skipped") == 0
    assert again.metrics.snapshot()["aggregate"]["batches"] == 1
    assert again.metrics.snapshot()["aggregate"]["messages-processed"] == 400
    assert counts_per_key(config) == {k: list(range(1, n + 1)) for k, n in expected_counts(1000, 5).items()}


def test_lost_spark_checkpoint_after_a_half_committed_batch_repeats_exactly_that_batch(spark, make_job, work_dir):
    # One task fails after its producers flushed and before its checkpoint (no Spark retry on the shared
    # local session), then the Spark checkpoint dir is lost and more input arrives. The re-planned batch
    # must be the flushed range again (same output version), not a new range under an old or new version.
    # The micro-batch mode: the container mode keeps no Spark offset log, and restarts a failed container at
    # once (test_process.py::test_injected_spark_task_failure_is_retried_exactly).
    marker = work_dir / "failed-once"
    config = make_job(**{**fault_keys(marker), "task.max.batch.messages": "10000",
                         "job.execution.mode": "batches", "job.container.max.restarts": "0"})
    append_messages(config, 600, 5, commit_size=600)
    failing = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    with pytest.raises(JobFailedError):
        failing.run()
    failed_task = marker.read_text().strip()
    stored = checkpoint_store_from_config(config, "kc-1").read_all()
    intent = stored[failed_task].open_intent()
    assert intent is not None and intent.batch == 1  # recorded before the flush that reached the output
    shutil.rmtree(failing.spark_checkpoint_dir)
    append_messages(config, 400, 5, start=600, commit_size=400)
    _run(spark, config)
    counts, rows = final_counts(config)
    assert counts == expected_counts(1000, 5)
    assert rows == 1000  # no output repeated, none skipped
    after = checkpoint_store_from_config(config, "kc-1").read_all()
    assert all(cp.open_intent() is None for cp in after.values())


def test_deleted_local_state_is_restored_from_the_blob_store(spark, make_job, work_dir):
    config = make_job(**{"task.max.batch.messages": "10000"})
    append_messages(config, 500, 6, commit_size=500)
    _run(spark, config)
    shutil.rmtree(work_dir / "state")  # a new host: no local stores, no Spark checkpoint
    append_messages(config, 300, 6, start=500, commit_size=300)
    runner = _run(spark, config)
    assert _metric(runner, "restored-from-blob-store") == 2  # one store per task
    counts, rows = final_counts(config)
    assert counts == expected_counts(800, 6)
    assert rows == 800


def test_memory_store_keeps_its_state_across_batches_runs_and_hosts(spark, make_job, work_dir):
    config = make_job(**{"stores.counts.factory": "memory"})  # backed up to the blob store like RocksDB
    append_messages(config, 1000, 7, commit_size=250)
    runner = _run(spark, config)
    assert runner.metrics.snapshot()["aggregate"]["batches"] >= 2  # capped at 300 per SSP
    counts, rows = final_counts(config)
    assert counts == expected_counts(1000, 7)
    assert rows == 1000
    shutil.rmtree(work_dir / "state")  # a new host: the snapshot comes back from the blob store
    # ... and new processes: Spark's Python workers keep each task's committed memory store (reused while the
    # checkpoint names its snapshot), per job config, so a config they have not seen stands for new workers.
    config = config.with_overrides({"task.error.trace.dir": str(work_dir / "traces-new-host")})
    append_messages(config, 400, 7, start=1000, commit_size=400)
    runner = _run(spark, config)
    assert _metric(runner, "restored-from-blob-store") == 2
    counts, rows = final_counts(config)
    assert counts == expected_counts(1400, 7)
    assert rows == 1400


def test_window_runs_every_task_window_ms_of_plan_time(spark, make_job):
    # A window far in the future: never called, so nothing is sent.
    config = make_job(**{"task.class": "tests.runtime.jobs.WindowingTask", "task.window.ms": "3600000"})
    append_messages(config, 600, 4, commit_size=200)
    _run(spark, config)
    assert final_counts(config) == ({}, 0)
    # 1 ms: the timer starts with the first batch; every later batch is at least 1 ms of plan time after
    # the previous window, so each ends with one.
    config = make_job(**{"task.class": "tests.runtime.jobs.WindowingTask", "task.window.ms": "1",
                         "task.max.batch.messages": "100", "job.id": "2"})
    runner = _run(spark, config)
    batches = runner.metrics.snapshot()["aggregate"]["batches"]
    assert batches >= 3
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, 4)  # the last window saw every message
    assert rows > len(counts)  # and earlier windows ran too
    checkpoints = checkpoint_store_from_config(config, "kc-2").read_all()
    # Every task that ran a batch started its timer (a task whose partition is empty runs none under --once).
    assert all(cp.window_at_ms > 0 for cp in checkpoints.values() if cp.committed)
    assert any(cp.committed for cp in checkpoints.values())


def test_prometheus_endpoint_serves_the_job_metrics_while_it_runs(spark, make_job):
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = make_job(**{"metrics.reporter.prometheus.port": str(port)})
    append_messages(config, 500, 5, commit_size=250)
    text = metrics_after_once(config, spark, port)
    line = next(x for x in text.splitlines()
                if x.startswith('sparza_messages_processed_total{group="aggregate",sparza_job="kc-1",task=""}'))
    assert float(line.split()[-1]) == 500
    with pytest.raises(OSError):  # closed with the runner
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def _send_raw(config: Config, rows: list[tuple[bytes, bytes]]) -> None:
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    for key, value in rows:
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"), value, key=key, partition=0))
    producer.flush("test")


def test_poison_message_stops_the_job_naming_ssp_and_offset(spark, make_job):
    config = make_job(**{"systems.delta.streams.events.samza.msg.serde": "json"})
    secret = b"not json: card 4111 1111 1111 1111, mail alice@example.com"  # payloads may hold personal data
    _send_raw(config, [(b"a", b'{"n": 1}'), (b"a", secret), (b"a", b'{"n": 3}')])
    with pytest.raises(JobFailedError) as err:
        _run(spark, config)
    text = str(err.value)
    assert "deserialization error in task 'Partition 0' at delta.events#0 offset 1:1" in text
    # The error shows a short, marked prefix of the payload, never the whole of it.
    assert f"[payload: {len(secret)} bytes, first 16: b'not json: card 4'...]" in text, text
    assert b"1111 1111".decode() not in text and "alice" not in text
    quiet = Config({**dict(config.items()), "task.error.payload.prefix.bytes": "0"})
    with pytest.raises(JobFailedError) as err:
        _run(spark, quiet)
    assert f"[payload: {len(secret)} bytes, not shown (task.error.payload.prefix.bytes)]" in str(err.value)
    assert "card" not in str(err.value)
    stored = checkpoint_store_from_config(config, "kc-1").read("Partition 0")
    # Nothing committed: no checkpoint, or only the claim's fencing stamp of a task that never committed.
    assert stored is None or not stored.checkpoint.committed


def test_deserialization_errors_can_be_dropped_and_counted(spark, make_job):
    config = make_job(**{"systems.delta.streams.events.samza.msg.serde": "json",
                         "task.drop.deserialization.errors": "true"})
    _send_raw(config, [(b"a", b'{"n": 1}'), (b"a", b"not json"), (b"a", b'{"n": 3}')])
    runner = _run(spark, config)
    assert runner.metrics.snapshot()["aggregate"]["messages-dropped"] == 1
    assert final_counts(config)[0] == {"a": 2}


def test_task_exception_stops_the_job_unless_ignored(spark, make_job):
    task = "tests.runtime.jobs.FailingOnKeyTask"
    config = make_job(**{"task.class": task})
    _send_raw(config, [(b"a", b"1"), (b"bad", b"2"), (b"a", b"3")])
    with pytest.raises(JobFailedError, match=r"task exception in task 'Partition 0' at delta.events#0 offset 1:1 "
                                             r"key \[payload: 3 bytes: b'bad'\]: ValueError: key 'bad' is not allowed"):
        _run(spark, config)
    ignoring = Config({**dict(config.items()), "task.ignored.exceptions": "ValueError"})
    runner = _run(spark, ignoring)
    assert runner.metrics.snapshot()["aggregate"]["exceptions-ignored"] == 1
    assert final_counts(config)[0] == {"a": 2}


def test_bounded_input_ends_the_job_and_calls_end_of_stream(spark, make_job, work_dir):
    close_dir = work_dir / "closed"
    close_dir.mkdir()
    config = make_job(**{"task.class": "tests.runtime.jobs.EndOfStreamTask",
                         "systems.delta.streams.events.bounded": "true", "test.close.dir": str(close_dir)})
    append_messages(config, 700, 4, commit_size=350)
    runner = JobRunner(config, spark=spark, once=False, install_signal_handlers=False, status=lambda line: None)
    outcome = runner.run()
    assert outcome.reason == "all inputs ended"
    counts, rows = final_counts(config)
    assert counts == expected_counts(700, 4)
    assert rows == 4  # one final row per key, written once at end-of-stream
    checkpoints = checkpoint_store_from_config(config, "kc-1").read_all()
    assert all(cp.ended for cp in checkpoints.values())
    # ClosableTask.close ran exactly once per task, after its end-of-stream was committed
    assert {p.name: p.read_text() for p in close_dir.iterdir()} == {t: "closed\n" for t in checkpoints}


def test_a_bounded_job_started_again_after_it_ended_stops_by_itself(spark, make_job):
    # Found by the guarantees harness: with every task ended nothing is planned, no batch runs, and the
    # end was only noticed after a batch, so the restarted job waited for a signal forever.
    config = make_job(**{"systems.delta.streams.events.bounded": "true"})
    append_messages(config, 200, 4, commit_size=200)
    first = JobRunner(config, spark=spark, install_signal_handlers=False, status=lambda line: None).run()
    assert first.reason == "all inputs ended"
    again = JobRunner(config, spark=spark, install_signal_handlers=False, status=lambda line: None).run()
    assert again.reason == "all inputs ended" and again.batches == 0
    counts, rows = final_counts(config)
    assert counts == expected_counts(200, 4) and rows == 200


def test_reset_offset_reads_a_main_input_again_from_the_default_at_each_start(spark, make_job):
    """Samza's ``samza.reset.offset`` on a main input: every start ignores the task checkpoints' offsets
    of that stream (Spark's own offset log too) and reads from ``samza.offset.default``; stores keep
    their state, as in Samza. The status line and a metric say what was reset."""
    config = make_job()
    append_messages(config, 500, 5, commit_size=250)
    _run(spark, config)
    append_messages(config, 200, 5, start=500, commit_size=200)
    reset = Config({**dict(config.items()), "systems.delta.streams.events.samza.reset.offset": "true"})
    lines: list[str] = []
    runner = JobRunner(reset, spark=spark, once=True, install_signal_handlers=False, status=lines.append)
    runner.run()
    assert runner.metrics.snapshot()["aggregate"]["messages-processed"] == 700  # everything again
    assert _metric(runner, "reset-offsets") == 2  # both partitions
    assert any("samza.reset.offset: 2 partition(s) of delta.events" in line for line in lines)
    first, again = expected_counts(500, 5), expected_counts(700, 5)
    counts, rows = final_counts(config)
    assert counts == {k: first[k] + again[k] for k in again}
    assert rows == 1200
    # Without the key the checkpoints decide again: only the new messages.
    append_messages(config, 100, 5, start=700, commit_size=100)
    plain = _run(spark, config)
    assert plain.metrics.snapshot()["aggregate"]["messages-processed"] == 100
    assert final_counts(config)[1] == 1300
