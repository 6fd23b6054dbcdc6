"""``BatchStreamTask``: tasks that get each run of one SSP's messages as Arrow columns, with the guarantees of
``StreamTask`` (through TestRunner, the runtime's own code without Spark, and through the Spark source's
executor path on real Delta streams)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from examples.keyed_count.batch_task import KeyedCountBatchTask, running_counts
from examples.keyed_count.config import job_values
from examples.keyed_count.load import append_messages, create_streams
from examples.keyed_count.task import KeyedCountTask
from tests.testing.jobs import BatchShapes
from tests.testing.test_testrunner import KEYED_COUNT, _events, _outputs

from sparza.config import Config
from sparza.engine.commit import CommitStep
from sparza.runtime import JobFailedError
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems.delta import DeltaSystemConsumer, DeltaSystemProducer
from sparza.testing import TestMessage, TestRunner, watermark
from sparza.testing.faults import InjectedFault


def _count(task: type, events: list[TestMessage], step: CommitStep | None = None, keep_plan: bool = True) -> TestRunner:
    runner = TestRunner.of(task, KEYED_COUNT)
    runner.add_input("delta.events", events, partitions=2).add_output("delta.counts", partitions=2)
    if step is not None:
        runner.fail_at(step, task="Partition 0", batch=2)
        with pytest.raises(InjectedFault, match="Partition 0"):
            runner.run()
        runner.add_input("delta.events", _events(4))  # more input while the job is down
        runner.restart(keep_plan=keep_plan)
    else:
        runner.run()
        runner.add_input("delta.events", _events(4))
    runner.run()
    return runner


def test_running_counts_follow_each_keys_occurrences() -> None:
    import numpy as np

    counts, totals = running_counts(np.array([0, 1, 0, 2, 1, 0]), np.array([5, 0, 1]))
    assert counts.tolist() == [6, 1, 7, 2, 2, 8] and totals.tolist() == [8, 2, 2]


def test_batch_keyed_count_writes_what_the_per_message_task_writes() -> None:
    with _count(KeyedCountTask, _events(24, keys=5)) as per_message, _count(KeyedCountBatchTask, _events(24, keys=5)) \
            as batched:
        assert _outputs(batched) == _outputs(per_message)
        assert batched.store("counts") == per_message.store("counts")
        assert len(batched.outputs("delta.counts")) == 28


@pytest.mark.parametrize("keep_plan", [True, False], ids=["spark-checkpoint-kept", "spark-checkpoint-lost"])
@pytest.mark.parametrize("step", list(CommitStep), ids=[s.value for s in CommitStep])
def test_a_batch_task_failing_after_any_commit_step_restarts_to_the_outputs_of_a_run_without_it(
        step: CommitStep, keep_plan: bool) -> None:
    with _count(KeyedCountBatchTask, _events(24)) as clean, \
            _count(KeyedCountBatchTask, _events(24), step, keep_plan) as faulted:
        assert _outputs(faulted) == _outputs(clean)
        assert faulted.store("counts") == clean.store("counts")
        assert len(faulted.outputs("delta.counts")) == 28


SHAPES = {"systems.mem.streams.out.samza.msg.serde": "json", "systems.mem.streams.out.samza.key.serde": "string"}


def test_control_messages_split_a_run_and_reach_the_task_in_order() -> None:
    events = [TestMessage(f"v{i}".encode(), key=b"k", partition=0, timestamp=1000 + i) for i in range(3)]
    events += [watermark(5000, partition=0)]
    events += [TestMessage(f"w{i}".encode(), key=b"k", partition=0, timestamp=6000 + i) for i in range(2)]
    with TestRunner.of(BatchShapes, {**SHAPES, "task.max.batch.messages": "100"}) as runner:
        runner.add_input("mem.in", events).add_output("mem.out")
        runner.run()
        shapes = runner.values("mem.out")
    batches = [s for s in shapes if "rows" in s]
    assert [b["rows"] for b in batches] == [3, 2]  # the watermark sits between them
    assert batches[0]["ssp"] == "mem.in#0" and batches[0]["first"] != batches[1]["first"]


def test_an_exception_fails_the_batch_naming_its_offsets_or_is_counted_when_ignored() -> None:
    events = [TestMessage(f"v{i}".encode(), key=b"k", partition=0) for i in range(4)]
    with TestRunner.of(BatchShapes, {**SHAPES, "app.test.fail.value": "v2"}) as runner:
        runner.add_input("mem.in", events).add_output("mem.out")
        with pytest.raises(JobFailedError, match=r"Partition 0.*mem\.in#0.* to .*KeyError"):
            runner.run()
    with TestRunner.of(BatchShapes, {**SHAPES, "app.test.fail.value": "v2",
                                     "task.ignored.exceptions": "KeyError"}) as runner:
        runner.add_input("mem.in", events).add_output("mem.out")
        report = runner.run_batch()
        (result,) = report.results[runner.jobs[0]]
        assert result.ignored == 4 and result.processed == 0


def test_an_input_serde_is_refused_naming_the_key() -> None:
    with TestRunner.of(BatchShapes, {**SHAPES, "systems.mem.samza.msg.serde": "json"}) as runner:
        runner.add_input("mem.in", [TestMessage({"a": 1}, key=b"k")]).add_output("mem.out")
        with pytest.raises(JobFailedError, match=r"systems\.mem\.samza\.msg\.serde is 'json'.*process_batch"):
            runner.run()


# --- Delta: Arrow rows straight into the producer ---------------------------------------------------

def _run_in_process(config: Config, partitions: int) -> int:
    """Run the job's batches the way the Spark source runs them (plan, split, read → run_split), without Spark."""
    from sparza.engine.results import BatchStatus, result_from_row
    from sparza.runtime.driver.source import SparzaStreamReader

    values = dict(config.items())
    reader = SparzaStreamReader({"config": json.dumps(values), "task_count": str(partitions)})
    start, batches = reader.initialOffset(), 0
    while (end := reader.latestOffset(start, None)) != start:
        for split in reader.partitions(start, end):
            for row in pa.Table.from_batches(list(reader.read(split))).to_pylist():
                result = result_from_row(row)
                assert result.status is not BatchStatus.FAILED, result.error
        start, batches = end, batches + 1
    return batches


def _counts_output(config: Config, partitions: int) -> dict[int, list[tuple[bytes, bytes]]]:
    consumer = DeltaSystemConsumer("delta", config)
    return {p: [(e.key, e.message) for e in consumer.read(SystemStreamPartition("delta", "counts", p), None)]
            for p in range(partitions)}


def test_on_delta_the_batch_task_sends_arrow_rows_to_the_partitions_send_would_pick(tmp_path: Path) -> None:
    outputs = []
    for name, task in (("per-message", KeyedCountTask), ("batch", KeyedCountBatchTask)):
        config = Config(job_values(tmp_path / name, **{"task.class": f"{task.__module__}.{task.__qualname__}",
                                                        "task.max.batch.messages": "300"}))
        create_streams(config, 3)
        append_messages(config, 1500, 37, commit_size=500)
        assert _run_in_process(config, 3) >= 2
        outputs.append(_counts_output(config, 3))
    assert outputs[0] == outputs[1]
    assert sum(len(rows) for rows in outputs[1].values()) == 1500


def test_send_rows_partitions_and_refuses_like_send(tmp_path: Path) -> None:
    config = Config(job_values(tmp_path))
    create_streams(config, 4)
    producer = DeltaSystemProducer("delta", config)
    producer.register("t")
    keys = [f"k{i}".encode() for i in range(20)]
    producer.send_rows("t", "counts", pa.table({"key": keys, "value": [b"v"] * 20}))
    producer.send_rows("t", "counts", pa.table({"key": pa.array([None, b"x"], pa.binary()), "value": [b"a", b"b"],
                                                 "partition": pa.array([3, None], pa.int32()),
                                                 "timestamp": pa.array([7, None], pa.int64())}))
    for key in [*keys, b"x"]:
        producer.send("t", OutgoingMessageEnvelope(SystemStream("delta", "counts"), b"v", key=key))
    producer.flush("t")
    rows = {p: [(e.key, e.timestamp) for e in DeltaSystemConsumer("delta", config).read(
        SystemStreamPartition("delta", "counts", p), None)] for p in range(4)}
    for p, items in rows.items():
        by_rows = [k for k, _ in items[:len(items) // 2]]
        by_send = [k for k, _ in items[len(items) // 2:]]
        assert sorted(k for k in by_rows if k is not None) == sorted(by_send) or p == 3
    assert (None, 7) in rows[3]
    with pytest.raises(ValueError, match="neither a key nor a partition"):
        producer.send_rows("t", "counts", pa.table({"key": pa.array([None], pa.binary()), "value": [b"v"]}))
    with pytest.raises(ValueError, match=r"partition \d+ out of range for stream"):
        producer.send_rows("t", "counts", pa.table({"key": [b"k"], "value": [b"v"], "partition": pa.array([4],
                                                                                                          pa.int32())}))


def test_batch_messages_one_by_one(tmp_path: Path) -> None:
    from sparza.task import MessageBatch

    rows = pa.RecordBatch.from_pydict({"offset": ["1:0", "1:1"], "key": [b"k", None], "value": [b"ab", b"c"],
                                       "timestamp": [5, 6]})
    envelopes = list(MessageBatch(SystemStreamPartition("s", "x", 0), rows).envelopes())
    assert [(e.offset, e.key, e.message, e.timestamp, e.size) for e in envelopes] == [
        ("1:0", b"k", b"ab", 5, 3), ("1:1", None, b"c", 6, 1)]


