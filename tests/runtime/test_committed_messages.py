"""Samza's samza.delete.committed.messages in the driver (:mod:`sparza.runtime.driver.retention`), without Spark:
real task checkpoints in a local blob store and a real Delta intermediate stream; the oracle is what each
partition held at each offset when it was written."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.engine.checkpoint import TaskCheckpoint, checkpoint_store_from_config
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig
from sparza.runtime.driver.retention import CommittedMessages
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemConsumer, DeltaSystemProducer

STREAM = SystemStream("d", "mid")


def _job(root: Path, partitions: int, **extra: str) -> JobConfig:
    """A job reading ``d.mid`` as an application's plan sets up its intermediate streams (both flags)."""
    config = Config({
        "job.name": "cm", "job.id": "1", "job.logged.store.base.dir": str(root / "state"),
        "task.class": "examples.keyed_count.task.KeyedCountTask", "task.inputs": "d.mid",
        "systems.d.samza.factory": "delta", "systems.d.delta.root": str(root / "streams"),
        "systems.d.streams.mid.samza.intermediate": "true",
        "systems.d.streams.mid.samza.delete.committed.messages": "true",
        "blob.store.manager.factory": "local", "blob.store.local.root": str(root / "blobs"),
        **extra,
    })
    DeltaSystemAdmin("d", config).create_stream(StreamSpec("mid", partitions))
    return JobConfig.from_config(config)


def _fill(job: JobConfig, rng: random.Random, partitions: int) -> dict[int, list[tuple[str, bytes]]]:
    producer = DeltaSystemProducer("d", job.config)
    producer.register("t")
    n = 0
    for _ in range(rng.randrange(5, 12)):
        for _ in range(rng.randrange(1, 12)):
            producer.send("t", OutgoingMessageEnvelope(STREAM, f"m{n}".encode(), partition=rng.randrange(partitions)))
            n += 1
        producer.flush("t")
    consumer = DeltaSystemConsumer("d", job.config)
    return {p: [(e.offset, e.message) for e in consumer.read(SystemStreamPartition("d", "mid", p), None,
                                                             include_control=False)]
            for p in range(partitions)}


def _commit(job: JobConfig, task: str, batch: int, offsets: dict[str, str]) -> None:
    store = checkpoint_store_from_config(job.config, job.job_key)
    known = store.read(task)
    store.write(TaskCheckpoint(task, batch, 1, offsets), known.etag if known else None)


def _read(job: JobConfig, partition: int, start: str) -> list[tuple[str, bytes]]:
    consumer = DeltaSystemConsumer("d", job.config)
    return [(e.offset, e.message) for e in consumer.read(SystemStreamPartition("d", "mid", partition), start,
                                                         include_control=False)]


@pytest.mark.parametrize("seed", range(3))
def test_the_driver_deletes_what_every_task_committed_past(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    partitions = rng.randrange(1, 4)
    job = _job(tmp_path, partitions)
    written = _fill(job, rng, partitions)
    latest = max((int(o.split(":")[0]) for rows in written.values() for o, _ in rows), default=0)
    now = [0.0]
    deleter = CommittedMessages(job, InputSystems(job).admins, clock=lambda: now[0])
    assert deleter.streams == {STREAM} and deleter.active
    assert not deleter.due()              # the first deletion comes one interval after the start

    # Nothing committed: nothing goes. A task with only an intent (batch 0) has committed nothing either.
    assert deleter.delete() == 0
    _commit(job, "Partition 0", 0, {f"d.mid#{p}": f"{latest + 1}:0" for p in range(partitions)})
    assert deleter.delete() == 0
    assert all(_read(job, p, "0:0") == written[p] for p in range(partitions))

    # Each task commits somewhere in its partition (task N owns partition N); the oldest version any still
    # needs is the stream's horizon.
    committed = {p: rng.choice([o for o, _ in written[p]] + [f"{latest + 1}:0"]) for p in range(partitions)}
    for p, offset in committed.items():
        _commit(job, f"Partition {p}", 3, {f"d.mid#{p}": offset})
    assert not deleter.due()              # the interval since the last deletion has not passed
    now[0] += deleter.interval_s
    assert deleter.due()
    assert deleter.delete() == partitions
    horizon = min(int(o.split(":")[0]) for o in committed.values())
    admin = DeltaSystemAdmin("d", job.config)
    for p in range(partitions):
        assert _read(job, p, committed[p]) == [(o, m) for o, m in written[p]
                                               if admin.offset_comparator(o, committed[p]) >= 0]
        oldest = admin.get_system_stream_metadata({"mid"})["mid"].partitions[p].oldest
        kept = [o for o, _ in written[p] if int(o.split(":")[0]) >= horizon]
        assert oldest == (kept[0] if kept else None)

    assert not deleter.due()


def test_streams_that_do_not_ask_keep_everything(tmp_path: Path) -> None:
    job = _job(tmp_path, 2, **{"systems.d.streams.mid.samza.delete.committed.messages": "false"})
    deleter = CommittedMessages(job, InputSystems(job).admins, clock=lambda: 1e9)
    assert deleter.streams == set() and not deleter.active and not deleter.due()
    # A hand-made intermediate stream (two jobs may read it) keeps its messages unless its config asks.
    config = Config({k: v for k, v in job.config.items() if "delete.committed" not in k})
    assert CommittedMessages(JobConfig.from_config(config), InputSystems(job).admins).streams == set()


def test_an_application_plan_asks_for_its_intermediate_streams_only(tmp_path: Path) -> None:
    from examples.wikipedia.config import demo_config

    from sparza.api import plan_application

    counts = {SystemStream("delta", "edits"): 2, SystemStream("delta", "profiles"): 1}
    plan = plan_application(demo_config(tmp_path, "r1", "UseDevelopmentStorage=true"), counts)
    first, last = plan.stages[0].config, plan.stages[-1].config
    intermediate = SystemStream.parse(last.get_str("task.inputs").split(",")[0])
    assert last.get_bool(f"systems.{intermediate.system}.streams.{intermediate.stream}.samza.intermediate")
    assert last.get_bool(f"systems.{intermediate.system}.streams.{intermediate.stream}"
                         ".samza.delete.committed.messages")
    edits = SystemStream.parse(first.get_str("task.inputs").split(",")[0])
    assert not first.get_bool(f"systems.{edits.system}.streams.{edits.stream}.samza.delete.committed.messages",
                              False)
    # the user's own value wins
    kept = plan_application(demo_config(tmp_path, "r1", "UseDevelopmentStorage=true").with_overrides(
        {f"systems.{intermediate.system}.streams.{intermediate.stream}.samza.delete.committed.messages": "false"}),
        counts)
    assert not kept.stages[-1].config.get_bool(
        f"systems.{intermediate.system}.streams.{intermediate.stream}.samza.delete.committed.messages")
