"""The container mode without Spark: the task assignment every container computes, and a container's run loop
driven in-process over real Delta streams, RocksDB stores and task checkpoints in a temp dir."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from examples.keyed_count.load import append_messages, create_streams
from tests.runtime.helpers import PROFILES_STORE, create_profiles, expected_counts, final_counts, job_values

from sparza.config import Config
from sparza.engine.checkpoint import checkpoint_store_from_config
from sparza.engine.container import Container, assign_tasks, location_of
from sparza.engine.epoch import EpochJob, EpochPlan
from sparza.engine.executor import TaskAttemptError
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig
from sparza.engine.results import BatchResult, BatchStatus


def _oracle_moves(tasks: list[tuple[str, str]], containers: list[dict[str, str]],
                  previous: dict[tuple[str, str], str]) -> int:
    """How few tasks must move: those whose location has no container, plus those a location cannot hold
    (each container takes at most ceil(tasks / containers))."""
    capacity = -(-len(tasks) // len(containers))
    room: dict[tuple[str, str], int] = {}
    for c in containers:
        for job, loc in c.items():
            room[(job, loc)] = room.get((job, loc), 0) + capacity
    wanted: dict[tuple[str, str], int] = {}
    for item in tasks:
        loc = previous.get(item)
        if loc is not None:
            wanted[(item[0], loc)] = wanted.get((item[0], loc), 0) + 1
    stay = sum(min(n, room.get(place, 0)) for place, n in wanted.items())
    placed = sum(wanted.values())
    return placed - stay


@pytest.mark.parametrize("seed", range(40))
def test_every_container_computes_one_balanced_assignment_that_moves_only_what_must_move(seed):
    rng = random.Random(seed)
    jobs = [f"job{j}" for j in range(rng.randint(1, 3))]
    tasks = [(job, f"Partition {p}") for job in jobs for p in range(rng.randint(1, 12))]
    hosts = [f"h{i}" for i in range(rng.randint(1, 6))]
    count = rng.randint(1, 8)
    containers = [{job: f"{rng.choice(hosts)}:{job}" for job in jobs} for _ in range(count)]
    places = {job: [f"{h}:{job}" for h in [*hosts, "gone1", "gone2"]] for job in jobs}
    previous = {t: rng.choice(places[t[0]]) for t in tasks if rng.random() < 0.8}
    shuffled = list(tasks)
    rng.shuffle(shuffled)
    out = assign_tasks(tasks, containers, previous)
    # The same answer whatever order a container lists the tasks in: containers agree without talking.
    assert assign_tasks(shuffled, containers, dict(reversed(list(previous.items())))) == out
    assert set(out) == set(tasks)
    capacity = -(-len(tasks) // count)
    loads = [list(out.values()).count(i) for i in range(count)]
    assert max(loads) <= capacity
    moved = sum(1 for t in tasks if t in previous and containers[out[t]][t[0]] != previous[t])
    assert moved == _oracle_moves(tasks, containers, previous)
    # Without affinity every task is spread evenly whatever its history.
    spread = assign_tasks(tasks, containers, previous, affinity=False)
    loads = [list(spread.values()).count(i) for i in range(count)]
    assert max(loads) - min(loads) <= 1


class Reporter:
    """What a container tells the driver, kept for the test; ``end_after`` results ask the epoch to end;
    ``drain`` (job → request) is what the driver sends once ``drain_after`` results came."""

    def __init__(self, end_after: int | None = None, *, drain: dict[str, Any] | None = None,
                 drain_after: int = 0) -> None:
        self.results: list[BatchResult] = []
        self.finished: dict[str, str] = {}
        self.waits: list[tuple[str, str]] = []
        self.end_after = end_after
        self.drain = drain or {}
        self.drain_after = drain_after

    def result(self, job: str, result: BatchResult) -> None:
        self.results.append(result)

    def done(self, job: str, task: str, why: str) -> None:
        self.finished[task] = why

    def waiting(self, job: str, task: str, why: str) -> None:
        self.waits.append((task, why))

    def wait_end(self, wait_s: float) -> bool:
        return self.end_after is not None and len(self.results) >= self.end_after

    def drains(self) -> dict[str, Any]:
        return self.drain if len(self.results) >= self.drain_after else {}


def _epoch(config: Config, *, once: bool, epoch: int = 1, duration_ms: int = 60_000,
           drain: dict[str, Any] | None = None) -> tuple[EpochPlan, list[str]]:
    job = JobConfig.from_config(config)
    inputs = InputSystems(job)
    names = [t.name for t in inputs.task_models()]
    start = {str(ssp): pos.upcoming for ssp, pos in inputs.positions().items()}
    locations = {t: cp.location for t, cp in checkpoint_store_from_config(config, job.job_key).read_all().items()
                 if cp.location}
    plan = EpochPlan(epoch=epoch, jobs=[EpochJob(config=dict(config.items()), tasks=names, task_count=len(names),
                                                 generation=0, start_positions=start,
                                                 targets=dict(start) if once else None, locations=locations,
                                                 drain=drain)],
                     duration_ms=duration_ms)
    return plan, names


def _one_container(config: Config, reporter: Any, **kwargs: Any) -> Container:
    plan, names = _epoch(config, **kwargs)
    key = plan.jobs[0].key
    where = {key: location_of(JobConfig.from_config(config))}
    return Container(plan, 0, {(key, t): 0 for t in names}, reporter, location=where)


def test_a_container_runs_each_task_on_its_own_schedule_keeps_stores_open_and_records_where(work_dir: Path):
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "150", "task.commit.ms": "0"}))
    create_streams(config, 3)
    append_messages(config, 900, 7, commit_size=300)
    reporter = Reporter()
    _one_container(config, reporter, once=True).run()
    assert set(reporter.finished.values()) == {"caught up"}
    committed = [r for r in reporter.results if r.status is BatchStatus.COMMITTED]
    # Each task numbers its own batches from 1, one per 150 messages of its partition (the batch cap).
    for task in reporter.finished:
        mine = [r for r in committed if r.task == task]
        size = sum(r.messages for r in mine)
        assert sorted(r.batch for r in mine) == list(range(1, -(-size // 150) + 1))
    counts, rows = final_counts(config)
    assert counts == expected_counts(900, 7) and rows == 900
    stores = [r.metrics for r in committed if r.batch == 2]
    assert all(_counter(m, "stores", "reused-open") == 1 for m in stores)  # the store stayed open
    location = location_of(JobConfig.from_config(config))
    assert {cp.location for cp in checkpoint_store_from_config(config, "kc-1").read_all().values()} == {location}
    # The next epoch continues where the checkpoints are: only the new messages are processed.
    append_messages(config, 300, 7, start=900, commit_size=300)
    reporter = Reporter()
    _one_container(config, reporter, once=True, epoch=2).run()
    counts, rows = final_counts(config)
    assert counts == expected_counts(1200, 7) and rows == 1200


def _counter(changes: dict[str, Any], group: str, name: str) -> int:
    entry = changes.get(group, {}).get(name)
    return int(entry[1]) if entry else 0


def test_a_container_that_fails_after_flushing_is_replaced_and_the_next_epoch_replays_exactly(work_dir: Path):
    marker = work_dir / "failed-once"
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "100", "task.commit.ms": "0",
                                            "task.testing.fail.once.file": str(marker),
                                            "task.testing.fail.once.at": "after-flush"}))
    create_streams(config, 2)
    append_messages(config, 500, 5, commit_size=250)
    with pytest.raises(TaskAttemptError, match="injected one-time failure"):
        _one_container(config, Reporter(), once=True).run()  # Spark fails the epoch: the driver starts another
    failed_task = marker.read_text().strip()
    intent = checkpoint_store_from_config(config, "kc-1").read(failed_task).checkpoint.open_intent()
    assert intent is not None  # flushed and not committed
    reporter = Reporter()
    _one_container(config, reporter, once=True, epoch=2).run()
    assert set(reporter.finished.values()) == {"caught up"}
    counts, rows = final_counts(config)
    assert counts == expected_counts(500, 5) and rows == 500  # the flushed batch was not written twice


def test_the_drivers_end_request_stops_every_task_at_a_batch_boundary(work_dir: Path):
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "50", "task.commit.ms": "0"}))
    create_streams(config, 2)
    append_messages(config, 600, 5, commit_size=600)
    reporter = Reporter(end_after=3)
    _one_container(config, reporter, once=False).run()
    assert set(reporter.finished.values()) == {"stopped"}
    assert 3 <= len(reporter.results) <= 4  # the request is heard between batches
    # What was committed is exact, and a later epoch finishes the rest.
    reporter = Reporter()
    _one_container(config, reporter, once=True, epoch=2).run()
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, 5) and rows == 600


def test_a_drain_caps_every_task_at_the_offsets_of_its_request_from_the_plan_or_sent_mid_epoch(work_dir: Path):
    from sparza.engine.drain import read_drain
    from sparza.runtime.driver.drainmonitor import finish_drain, request_drain

    config = Config(job_values(work_dir, **{"task.max.batch.messages": "40", "task.commit.ms": "0"}))
    create_streams(config, 3)
    append_messages(config, 600, 5, commit_size=200)
    first, _ = request_drain([config])
    append_messages(config, 300, 5, start=600, commit_size=300)   # after the request: not in this drain
    reporter = Reporter()
    _one_container(config, reporter, once=False, drain=first.to_json()).run()   # the epoch plan carries it
    assert set(reporter.finished.values()) == {"drained"} and len(reporter.finished) == 3
    last = {r.task: r for r in reporter.results}   # each task's last batch drained it; none ended
    assert all(r.drained for r in last.values()) and not any(r.ended for r in reporter.results)
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, 5) and rows == 600
    assert finish_drain(config) == first and read_drain(config) is None   # every task completed it
    # A drain the driver sends while the epoch runs (after 2 batches): the rest up to its offsets, then out.
    second, _ = request_drain([config])
    append_messages(config, 100, 5, start=900, commit_size=100)
    reporter = Reporter(drain={"kc-1": second.to_json()}, drain_after=2)
    _one_container(config, reporter, once=False, epoch=2).run()
    assert set(reporter.finished.values()) == {"drained"}
    counts, rows = final_counts(config)
    assert counts == expected_counts(900, 5) and rows == 900


def test_a_session_with_dynamic_allocation_is_refused_naming_both_ways_out():
    from sparza.errors import ConfigError
    from sparza.runtime.driver.epochs import check_container_session

    class Session:  # what the check reads of a SparkSession: its runtime conf
        def __init__(self, values: dict[str, str]) -> None:
            self.conf = Config(values)

    check_container_session(Session({}))
    check_container_session(Session({"spark.dynamicAllocation.enabled": "false"}))
    with pytest.raises(ConfigError) as refused:
        check_container_session(Session({"spark.dynamicAllocation.enabled": "true"}))
    assert "job.execution.mode: batches" in str(refused.value) and "dynamic allocation off" in str(refused.value)


def test_a_container_ends_its_epoch_when_its_driver_is_silent_or_gone():
    import socket
    import time as clock

    from sparza.runtime.channel import ContainerChannel, ContainerChannelClient

    events: list[dict[str, Any]] = []
    channel = ContainerChannel("127.0.0.1", events.append, ping_s=0.05)
    try:
        client = ContainerChannelClient.connect(channel.address, 1, 0, driver_timeout_s=0.5)
        assert client is not None
        client.hello({"kc-1": "here"}, ["Partition 0"], [], alive=["here"])
        until = clock.monotonic() + 1.5
        while clock.monotonic() < until:  # three timeouts long: the pings keep it going
            assert not client.poll_end(0.05)
        channel.end_epoch(1)
        assert client.poll_end(1.0) and not client.driver_lost  # the driver's own end request
    finally:
        channel.close()
    assert [e["type"] for e in events][:1] == ["hello"]
    # A driver that is still connected but says nothing (frozen, cut off): the container ends after the timeout.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        client = ContainerChannelClient.connect(("127.0.0.1", port, "t"), 1, 0, driver_timeout_s=0.3)
        assert client is not None
        conn, _ = silent.accept()
        started = clock.monotonic()
        while not client.poll_end(0.05):
            assert clock.monotonic() - started < 5, "the silent driver was never noticed"
        assert client.driver_lost
        conn.close()


def test_a_failure_injected_after_some_commits_hits_a_container_mid_epoch_and_the_next_epoch_is_exact(work_dir: Path):
    """``task.testing.fail.once.after.commits`` (the harness's container-retry fault): the failing task committed
    that many batches in this container first, and the epoch after the failure finishes the job exactly."""
    marker = work_dir / "failed-once"
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "50", "task.commit.ms": "0",
                                            "task.testing.fail.once.file": str(marker),
                                            "task.testing.fail.once.at": "after-checkpoint",
                                            "task.testing.fail.once.after.commits": "2"}))
    create_streams(config, 2)
    append_messages(config, 400, 5, commit_size=400)
    reporter = Reporter()
    with pytest.raises(TaskAttemptError, match="injected one-time failure"):
        _one_container(config, reporter, once=True).run()
    failed_task = marker.read_text().strip()
    before = [r for r in reporter.results if r.task == failed_task and r.status is BatchStatus.COMMITTED]
    assert len(before) == 2  # two commits went by; the third failed after its checkpoint
    reporter = Reporter()
    _one_container(config, reporter, once=True, epoch=2).run()
    assert set(reporter.finished.values()) == {"caught up"}
    counts, rows = final_counts(config)
    assert counts == expected_counts(400, 5) and rows == 400


@pytest.mark.timeout(180)
@pytest.mark.parametrize("broadcast", [True, False], ids=["broadcast", "partitioned"])
def test_a_bootstrap_store_whose_stream_is_empty_does_not_hold_the_job(work_dir: Path, broadcast: bool):
    """An empty bootstrap stream counts as bootstrapped: every task processes its whole input under ``--once`` and
    catches up. A broadcast store's builder publishes an empty bootstrapped snapshot, which the readers wait for.

    Found by the Spark soak (seed 279784511, no profiles drawn): no task ever committed a batch, the builder
    included (it had nothing to read and its main input was held for its own publication), so every epoch ended
    with nothing done and ``--once`` never ended. A short epoch bounds the test where the defect would hang it."""
    from sparza.blobstore import blob_store_manager_from_config
    from sparza.state.adjunct.publication import PublicationBoard

    inputs = ({"task.broadcast.inputs": "delta.profiles#0"} if broadcast
              else {"task.inputs": "delta.events,delta.profiles"})
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "100", "task.commit.ms": "0",
                                            **PROFILES_STORE, **inputs}))
    create_streams(config, 3)
    create_profiles(config, partitions=1 if broadcast else 3)
    append_messages(config, 450, 7, commit_size=150)
    reporter = Reporter()
    _one_container(config, reporter, once=True, duration_ms=20_000).run()
    assert reporter.finished == {f"Partition {i}": "caught up" for i in range(3)}
    counts, rows = final_counts(config)
    assert counts == expected_counts(450, 7) and rows == 450
    if broadcast:
        board = PublicationBoard(blob_store_manager_from_config(config), "kc", "1", "Partition 0", "profiles")
        published = board.latest_before(None)
        assert published is not None and published.bootstrapped and published.applied == 0


@pytest.mark.timeout(180)
def test_tasks_held_for_a_broadcast_publication_that_does_not_come_say_what_they_wait_for(work_dir: Path):
    """A versioned broadcast store publishes once a version is complete; with no end-of-dataset marker every task's
    main input waits for it. The tasks are not caught up (``--once`` must not end as if they were) and each says
    once what it waits for: the store and the task that builds it (the driver's status line shows it)."""
    config = Config(job_values(work_dir, **{
        "task.max.batch.messages": "100", "task.commit.ms": "0", "task.broadcast.inputs": "delta.profiles#0",
        **PROFILES_STORE, "stores.profiles.adstore.versioned": "true"}))
    create_streams(config, 2)
    create_profiles(config, 1)
    append_messages(config, 100, 5, commit_size=100)
    reporter = Reporter()
    _one_container(config, reporter, once=True, duration_ms=3_000).run()
    assert reporter.finished == {"Partition 0": "stopped", "Partition 1": "stopped"}   # not caught up
    assert sorted(task for task, _ in reporter.waits) == ["Partition 0", "Partition 1"]   # once each
    assert all("broadcast store 'profiles'" in why and "task 'Partition 0' builds" in why for _, why in reporter.waits)
    # Each task read the broadcast partition (one profile) and no main input; the builder then got one batch that
    # read nothing, to publish in: no publication came of it, so no more batches.
    read = {t: [r.messages for r in reporter.results if r.task == t] for t in reporter.finished}
    assert read == {"Partition 0": [1, 0], "Partition 1": [1]}
