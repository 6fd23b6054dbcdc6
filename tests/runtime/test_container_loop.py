"""The container mode without Spark: where tasks go, and the engine's manager and containers driven in-process
(:class:`sparza.engine.inprocess.InProcessHost`) over real Delta streams, RocksDB stores and task checkpoints in a
temp dir. The manager, containers, task and commit code are the ones Spark hosts; only the transport differs."""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from examples.keyed_count.load import append_messages, create_streams
from tests.runtime.helpers import PROFILES_STORE, create_profiles, expected_counts, final_counts, job_values

from sparza.config import Config
from sparza.engine.assignment import place_tasks
from sparza.engine.checkpoint import checkpoint_store_from_config
from sparza.engine.container import location_of
from sparza.engine.inprocess import InProcessHost, InProcessJob
from sparza.engine.jobconfig import JobConfig
from sparza.engine.manager import LOST_WAIT_MS
from sparza.engine.messages import TaskDone, TaskResult, TaskRetrying, TaskWaiting
from sparza.engine.results import BatchStatus
from sparza.testing import eventually


class Clock:
    """Monotonic seconds that move only when told (the retry backoff and commit intervals read it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _run(host: InProcessHost, job: InProcessJob, clock: Clock, *, rounds: int = 400, step_s: float = 1.0,
         until: Any = None) -> None:
    """Rounds of one pass each (every due task runs at most one batch), the clock moving ``step_s`` after each."""
    for _ in range(rounds):
        host.step(max_passes=1)
        if job.has_left or (until is not None and until()):
            return
        clock.now += step_s
    raise AssertionError(f"the job did not finish in {rounds} rounds: {job.notices[-5:]}, {job.events[-5:]}")


def _counter(changes: dict[str, Any], group: str, name: str) -> int:
    entry = changes.get(group, {}).get(name)
    return int(entry[1]) if entry else 0


def _config(work_dir: Path, batch: int, **extra: str) -> Config:
    """The keyed-count job in ``work_dir``: batches of at most ``batch`` messages, each committed at once."""
    return Config(job_values(work_dir, **{"task.max.batch.messages": str(batch), "task.commit.ms": "0", **extra}))


def _input(config: Config, partitions: int, messages: int, keys: int, commit_size: int) -> None:
    """The job's input streams of ``partitions`` partitions, holding ``messages`` messages over ``keys`` keys."""
    create_streams(config, partitions)
    append_messages(config, messages, keys, commit_size=commit_size)


def _join(host: InProcessHost, config: Config, **job: Any) -> InProcessJob:
    """``config``'s job (``InProcessJob`` arguments in ``job``) joined to ``host``."""
    joined = InProcessJob(config, **job)
    host.join(joined)
    return joined


def _clocked(config: Config, *, slots: int = 1, once: bool = True, clock: Clock | None = None,
             **host: Any) -> tuple[Clock, InProcessHost, InProcessJob]:
    """A host of ``slots`` containers on a clock that moves only when told (``clock``, else a new one), with
    ``config``'s job joined."""
    clock = Clock() if clock is None else clock
    hosting = InProcessHost(slots=slots, clock=clock, **host)
    return clock, hosting, _join(hosting, config, once=once)


def _threaded(config: Config) -> tuple[InProcessHost, InProcessJob]:
    """A host of one container on the real clock whose commits run in threads (as on Spark), with ``config``'s job
    joined under ``once``."""
    hosting = InProcessHost(slots=1, threaded_commits=True)
    return hosting, _join(hosting, config, once=True)


def _assert_exact(config: Config, messages: int, keys: int) -> None:
    """The output holds exactly the keyed count of ``messages`` messages over ``keys`` keys, one row each."""
    counts, rows = final_counts(config)
    assert counts == expected_counts(messages, keys) and rows == messages


# --- where tasks go ------------------------------------------------------------------------------
def _oracle_moves(total: int, tasks: list[str], containers: dict[int, str], current: dict[str, int | None]) -> int:
    """How few of ``tasks`` (those running somewhere alive) must move: a task keeps its container unless that
    container has more than its share (ceil(total / containers)); those over the share move, nothing else does."""
    capacity = -(-total // len(containers))
    over = 0
    for index in containers:
        mine = sum(1 for t in tasks if current.get(t) == index)
        over += max(0, mine - capacity)
    return over


@pytest.mark.parametrize("seed", range(40))
def test_placement_keeps_tasks_where_they_run_and_their_state_and_moves_only_what_must_move(seed):
    rng = random.Random(seed)
    tasks = [f"Partition {p}" for p in range(rng.randint(1, 30))]
    hosts = [f"h{i}" for i in range(rng.randint(1, 6))]
    containers = {i: rng.choice(hosts) for i in rng.sample(range(12), rng.randint(1, 8))}
    current = {t: rng.choice([*containers, None, 99]) for t in tasks if rng.random() < 0.7}  # 99: a lost one
    last = {t: rng.choice([*hosts, "gone"]) for t in tasks if rng.random() < 0.8}
    out = place_tasks(tasks, containers, current, last)
    assert set(out) == set(tasks) and set(out.values()) <= set(containers)
    capacity = -(-len(tasks) // len(containers))
    assert max(list(out.values()).count(i) for i in containers) <= capacity
    # Tasks that run somewhere alive stay unless their container is over its share.
    alive = {t: c for t, c in current.items() if c in containers}
    moved = sum(1 for t, c in alive.items() if out[t] != c)
    assert moved == _oracle_moves(len(tasks), list(alive), containers, alive)
    # A task without a container goes where its state is when that container has room, in task order.
    shuffled = list(tasks)
    rng.shuffle(shuffled)
    assert place_tasks(shuffled, containers, current, last) == out  # one answer, whatever the order
    spread = place_tasks(tasks, containers, {}, last, affinity=False)
    loads = [list(spread.values()).count(i) for i in containers]
    assert max(loads) - min(loads) <= 1


# --- one container --------------------------------------------------------------------------------
def test_a_container_runs_each_task_on_its_own_schedule_keeps_stores_open_and_records_where(work_dir: Path):
    config = _config(work_dir, 150)
    _input(config, 3, 900, 7, 300)
    clock, host, job = _clocked(config)
    _run(host, job, clock)
    assert set(job.done.values()) == {"caught up"} and len(job.done) == 3
    committed = [r for r in job.results() if r.status is BatchStatus.COMMITTED]
    # Each task numbers its own batches from 1, one per 150 messages of its partition (the batch cap).
    for task in job.done:
        mine = [r for r in committed if r.task == task]
        size = sum(r.messages for r in mine)
        assert sorted(r.batch for r in mine) == list(range(1, -(-size // 150) + 1))
    _assert_exact(config, 900, 7)
    later = [r.metrics for r in committed if r.batch == 2]
    assert later and all(_counter(m, "stores", "reused-open") == 1 for m in later)  # the store stayed open
    location = location_of(JobConfig.from_config(config))
    assert {cp.location for cp in checkpoint_store_from_config(config, "kc-1").read_all().values()} == {location}
    # A new run continues where the checkpoints are: only the new messages are processed.
    append_messages(config, 300, 7, start=900, commit_size=300)
    job = _join(host, config, once=True)
    _run(host, job, clock)
    _assert_exact(config, 1200, 7)
    assert sum(r.messages for r in job.results()) == 300
    host.close()


def test_a_container_that_cannot_reach_storage_when_it_opens_a_job_is_offered_it_again(work_dir: Path):
    """Found in the suite (the harness restarted Azurite as the containers started): both containers failed to open
    the job's az:// input, said so, and ran nothing for 13 minutes after storage answered again. A refusal for
    storage that did not answer is offered again, the pause doubling (1, 2, 4 s ...); the job then runs exactly."""
    from sparza.errors import StorageUnavailableError

    config = _config(work_dir, 150)
    _input(config, 2, 600, 5, 300)
    opened: list[float] = []
    clock = Clock()

    def resolve(cfg: Config) -> Config:  # wraps the container's real config resolution
        opened.append(clock.now)
        if len(opened) <= 3:
            raise StorageUnavailableError("storage for the job's input is unreachable after retries (test)")
        return cfg

    _, host, job = _clocked(config, clock=clock, resolve=resolve)
    _run(host, job, clock, step_s=0.5)
    # The manager hears each refusal one round (0.5 s) after the container tried; the pause runs from then.
    assert [b - a - 0.5 for a, b in itertools.pairwise(opened)] == [1.0, 2.0, 4.0]
    refusals = [n for n in job.notices if "cannot run job" in n]
    assert len(refusals) == 3 and all("StorageUnavailableError" in n for n in refusals)
    assert [n.rsplit("again in ", 1)[1] for n in refusals] == ["1s", "2s", "4s"]
    assert any("runs job kc-1 again" in n for n in job.notices)
    _assert_exact(config, 600, 5)
    host.close()


def test_a_job_whose_config_fails_in_the_container_is_not_offered_again(work_dir: Path):
    """A refusal that is not about storage (a config the container cannot build) stays a refusal: no retry loop."""
    config = Config(job_values(work_dir))
    create_streams(config, 1)
    opened: list[float] = []
    clock = Clock()

    def resolve(cfg: Config) -> Config:
        opened.append(clock.now)
        raise ValueError("a config this container cannot build (test)")

    _, host, job = _clocked(config, clock=clock, resolve=resolve)
    for _ in range(40):
        host.step(max_passes=1)
        clock.now += 1.0
    assert len(opened) == 1
    assert [n for n in job.notices if "cannot run job" in n] == [
        "container 0 cannot run job kc-1: ValueError: a config this container cannot build (test)"]
    host.close()


class FailOnce:
    """A commit listener (``task.commit.listeners``) that fails one task's commit once, at one step, with an error
    a retry may cure; the task and step come from the config (``test.fail.task``, ``test.fail.step``)."""

    fired: dict[str, int] = {}

    def __init__(self, config: Config) -> None:
        self.task = config.get_str("test.fail.task", "Partition 0")
        self.step = config.get_str("test.fail.step", "after-flush")
        self.key = config.get_str("test.fail.key", "")
        self.kill = config.get_bool("test.fail.kill", False)
        self.after = config.get_int("test.fail.after.commits", 0)
        self.commits = 0

    def on_step(self, task: str, step: Any, batch: int) -> None:
        from sparza.engine.inprocess import ContainerKilled
        from sparza.errors import StorageUnavailableError

        if task != self.task:
            return
        if step.value == "after-checkpoint":
            self.commits += 1
        if step.value != self.step or FailOnce.fired.get(self.key) or self.commits < self.after:
            return
        FailOnce.fired[self.key] = batch
        if self.kill:
            raise ContainerKilled(f"container killed at {step.value} of {task} batch {batch}")
        raise StorageUnavailableError(f"injected failure at {step.value} of {task} batch {batch}")


def _failing(work_dir: Path, key: str, **extra: str) -> Config:
    values = {"task.commit.listeners": f"{__name__}.FailOnce", "test.fail.key": key,
              "job.container.retry.backoff.ms": "2000", **extra}
    return _config(work_dir, 100, **values)


@pytest.mark.parametrize("step", ["after-intent", "after-flush", "after-snapshot", "after-checkpoint"])
def test_a_task_whose_commit_fails_retries_alone_from_its_checkpoint_and_the_output_is_exact(work_dir: Path, step):
    config = _failing(work_dir, f"retry-{step}", **{"test.fail.step": step, "test.fail.task": "Partition 1"})
    _input(config, 3, 900, 7, 300)
    clock, host, job = _clocked(config)
    _run(host, job, clock, step_s=0.5)
    retried = [e for e in job.events if isinstance(e, TaskRetrying)]
    assert [(e.task, e.attempt, e.delay_ms) for e in retried] == [("Partition 1", 1, 2000)]
    # The status line and the trace name the step the commit failed in, and what that left in force.
    number, name = {"after-intent": (1, "intent"), "after-flush": (2, "flush"), "after-snapshot": (4, "snapshot"),
                    "after-checkpoint": (5, "checkpoint")}[step]
    assert f"(the commit failed in step {number} ({name}; last done: {step}))" in retried[0].error, retried[0].error
    trace = Path(retried[0].error.rsplit("full trace: ", 1)[1]).read_text(encoding="utf-8")
    status = "committed" if step == "after-checkpoint" else "failed"
    assert f"sparza: the commit failed in step {number} ({name}; last done: {step}), task 'Partition 1'" in trace
    assert f": {status} (" in trace.split("sparza: the commit failed in step", 1)[1].splitlines()[0]
    # While Partition 1 waited for its retry, the other tasks committed: the failure stayed with its task.
    failed_at = job.events.index(retried[0])
    after = [e.result.task for e in job.events[failed_at:] if isinstance(e, TaskResult)]
    first_retry = after.index("Partition 1")
    assert {"Partition 0", "Partition 2"} <= set(after[:first_retry])
    _assert_exact(config, 900, 7)  # a flushed batch was not written twice
    assert set(job.done.values()) == {"caught up"}
    host.close()


def test_a_task_that_fails_more_than_max_restarts_times_in_a_row_fails_the_job_naming_it(work_dir: Path):
    config = _failing(work_dir, "always", **{"test.fail.step": "after-flush", "job.container.max.restarts": "2"})
    _input(config, 2, 200, 5, 200)
    FailOnce.fired.pop("always", None)
    clock, host, job = _clocked(config)
    # A listener that fails every time: clear its memory after each failure.
    for _ in range(60):
        host.step()
        FailOnce.fired.pop("always", None)
        clock.now += 5
        if "Partition 0" in job.done:
            break
    failed = [r for r in job.results() if r.status is BatchStatus.FAILED]
    assert job.done.get("Partition 0") == "failed" and len(failed) == 1
    assert "failed 3 times in a row without a commit" in (failed[0].error or "")
    assert len([e for e in job.events if isinstance(e, TaskRetrying)]) == 2
    host.close()


# --- several containers ---------------------------------------------------------------------------
def test_a_killed_container_loses_only_its_tasks_which_move_and_replay_exactly(work_dir: Path):
    config = _failing(work_dir, "kill", **{"test.fail.step": "after-flush", "test.fail.task": "Partition 3",
                                           "test.fail.kill": "true", "test.fail.after.commits": "1",
                                           "task.max.batch.messages": "60"})
    _input(config, 4, 1200, 11, 400)
    clock, host, job = _clocked(config, slots=2)
    owners_before: dict[str, Any] = {}
    for _ in range(200):
        owners_before = host.owners("kc-1")
        host.step(max_passes=1)
        clock.now += 1
        if host.killed:
            break
    killed = host.killed[0]
    mine = sorted(t for t, c in owners_before.items() if c == killed)
    others = sorted(t for t, c in owners_before.items() if c != killed)
    assert "Partition 3" in mine and others
    survivor_results = len([r for r in job.results() if r.task in others])
    _run(host, job, clock)
    # The killed container's tasks moved to the survivor; the survivor's own tasks went on committing.
    assert any(" was lost " in n and f"container {killed}" in n for n in job.notices)
    assert all(c != killed for c in host.owners("kc-1").values())
    assert len([r for r in job.results() if r.task in others]) > survivor_results
    _assert_exact(config, 1200, 11)
    host.close()


@pytest.mark.parametrize("back", [False, True])
def test_tasks_of_a_lost_executor_go_to_the_survivors_within_the_bound_when_its_replacement_gets_no_slot(
        work_dir: Path, back: bool):
    """An executor is lost with its container and the host still counts its slot, so the replacement container the
    manager launches waits for a core that does not come (on Spark: its job stays pending until the worker is back).
    The lost container's tasks must not wait for it beyond ``job.container.lost.wait.ms`` (the start timeout, 60 s,
    held them until the worker came back: issue 39, bench/handover_latency.py); the survivors' tasks never stop, and
    when the executor is back (``back``) the replacement joins and takes tasks over. Output exact either way."""
    config = _config(work_dir, 20)
    _input(config, 6, 1800, 9, 600)
    clock, host, job = _clocked(config, slots=3)
    _run(host, job, clock, step_s=0.1, until=lambda: len({r.task for r in job.results()}) == 6)
    owners = host.owners("kc-1")
    assert len(set(owners.values())) == 3
    victim = owners["Partition 0"]
    mine = sorted(t for t, c in owners.items() if c == victim)
    others = sorted(t for t in owners if t not in mine)
    host.lose_executor(victim)
    lost_at = clock.now
    before = len([r for r in job.results() if r.task in others])
    for _ in range(100):  # 10 s on the clock, a round every 0.1 s
        if all(host.owners("kc-1").get(t) in host.containers for t in mine):
            break
        host.step(max_passes=1)
        clock.now += 0.1
    waited = clock.now - lost_at
    assert host.pending, "the replacement container should still wait for a slot"
    bound = LOST_WAIT_MS.get(config) / 1000.0  # the default: the test config does not set it
    assert waited <= bound + 0.15, f"the lost container's tasks waited {waited:.1f} s for a container that cannot start"
    assert set(host.owners("kc-1").values()) <= set(host.containers) and victim not in host.containers
    assert any(f"from container {victim} " in n and "its executor is gone" in n for n in job.notices), job.notices
    # The survivors' own tasks went on committing while the orphans waited (no other task stops).
    assert len([r for r in job.results() if r.task in others]) > before
    if back:
        replacement = host.pending[0]
        host.executor_back()
        _run(host, job, clock, step_s=0.1, until=lambda: replacement in host.owners("kc-1").values())
        assert any(f"to container {replacement} " in n and "rebalanced onto a new container" in n
                   for n in job.notices), job.notices
    _run(host, job, clock, step_s=0.1, rounds=2000)
    assert set(job.done.values()) == {"caught up"} and len(job.done) == 6
    _assert_exact(config, 1800, 9)
    host.close()


def _one_container_then_another(work_dir: Path) -> tuple[Config, Clock, InProcessHost, InProcessJob]:
    """4 tasks of a keyed count (1,600 messages) in one container until they committed 8 batches; then a second
    slot (a new executor) appears."""
    config = _config(work_dir, 20)
    _input(config, 4, 1600, 9, 400)
    clock, host, job = _clocked(config)
    _run(host, job, clock, until=lambda: len(job.results()) >= 8)
    host.add_container()
    return config, clock, host, job


def test_a_new_container_takes_over_some_tasks_one_by_one_and_no_other_task_stops(work_dir: Path):
    config, clock, host, job = _one_container_then_another(work_dir)
    before = len(job.results())

    def moved_and_running() -> bool:
        owners = host.owners("kc-1")
        moved = [t for t, c in owners.items() if c == 1]
        return len(moved) == 2 and all(any(r.task == t for r in job.results()[before:]) for t in moved)

    _run(host, job, clock, until=moved_and_running)
    moves = [n for n in job.notices if " moves from " in n]
    assert len(moves) == 2  # 4 tasks, 2 containers: two move, the other two never stop
    owners = host.owners("kc-1")
    moved = {" ".join(n.split()[1:3]) for n in moves}
    assert len({owners[t] for t in moved}) == 1 and len(set(owners.values())) == 2
    _run(host, job, clock)
    _assert_exact(config, 1600, 9)
    host.close()


def test_a_container_lost_while_its_tasks_move_away_loses_no_task(work_dir: Path):
    """The container a rebalance moves tasks away from dies before it released them: the moving tasks are orphans
    like its others, and every task gets a container (issue 40: a harness run on a cluster stalled with two tasks
    that no container ran)."""
    config, clock, host, job = _one_container_then_another(work_dir)
    for _ in range(20):  # the manager and the new container only: container 0 never hears its revoke
        host.manager.step()
        for index, container in host.containers.items():
            if index != 0:
                container.step()
        if any(" moves from container 0 " in n for n in job.notices):
            break
    assert any(" moves from container 0 " in n for n in job.notices), job.notices
    host.kill(0)
    _run(host, job, clock)
    assert set(job.done.values()) == {"caught up"} and len(job.done) == 4
    _assert_exact(config, 1600, 9)
    host.close()


def test_a_slow_commit_of_one_task_does_not_hold_up_the_others(work_dir: Path):
    """Commits run beside processing: while one task's commit waits (here for an event the test sets), the other
    tasks of the same container run and commit their batches."""
    config = _config(work_dir, 50, **{"task.commit.listeners": f"{__name__}.Gate"})
    _input(config, 3, 600, 7, 600)
    Gate.release.clear()
    host, job = _threaded(config)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        host.manager.step()
        for container in host.containers.values():
            container.step()
        others = [r for r in job.results() if r.task != "Partition 0"]
        if len(others) >= 6:
            break
        time.sleep(0.01)
    assert not [r for r in job.results() if r.task == "Partition 0"]  # still held at its commit
    assert len([r for r in job.results() if r.task != "Partition 0"]) >= 6
    Gate.release.set()
    while not job.has_left and time.monotonic() < deadline:
        host.step()
        time.sleep(0.01)
    _assert_exact(config, 600, 7)
    host.close()


class Gate:
    """Holds the first commit of ``Partition 0`` after its flush until :attr:`release` is set."""

    release = threading.Event()

    def __init__(self, config: Config) -> None:
        pass

    def on_step(self, task: str, step: Any, batch: int) -> None:
        if task == "Partition 0" and step.value == "after-flush":
            Gate.release.wait(60)


@pytest.mark.parametrize("revoked", [False, True], ids=["restored", "revoked-while-restoring"])
def test_a_slow_restore_of_a_task_handed_to_a_container_does_not_hold_up_its_other_tasks(work_dir: Path, monkeypatch,
                                                                                        revoked: bool):
    """Issue 39: a moved task restored its stores in its first batch, on the container's only processing thread, and
    the container's other tasks waited (4 tasks moved onto one container: its own 4 ran 2 batches in 3 s). Restores
    run beside the loop: while ``Partition 0``'s restore is held (the real one, wrapped to wait for an event the test
    sets), the other tasks of its container run and commit, and it processes nothing. Revoked meanwhile, it is
    released once its restore is done and another container runs it. The output is exact either way."""
    from sparza.engine.stores import TaskStores

    config = _config(work_dir, 50)
    _input(config, 3, 300, 7, 300)
    host, job = _threaded(config)
    deadline = time.monotonic() + 60
    while not job.has_left and time.monotonic() < deadline:  # the first run commits every task's stores
        host.step()
        time.sleep(0.01)
    assert set(job.done.values()) == {"caught up"} and len(job.done) == 3
    host.close()

    entered, release = threading.Event(), threading.Event()
    real = TaskStores._prepare_dir

    def held(self: TaskStores, *args: Any, **kwargs: Any) -> None:  # wraps the real restore of a store dir
        if self.task == "Partition 0" and not release.is_set():
            entered.set()
            release.wait(10)
        real(self, *args, **kwargs)

    monkeypatch.setattr(TaskStores, "_prepare_dir", held)
    append_messages(config, 600, 7, start=300, commit_size=600)
    host, job = _threaded(config)

    def others() -> list[Any]:
        return [r for r in job.results() if r.task != "Partition 0" and r.status is BatchStatus.COMMITTED]

    while time.monotonic() < deadline and len(others()) < 6:
        host.manager.step()
        for container in host.containers.values():
            container.step()
        time.sleep(0.01)
    assert entered.is_set()
    assert not [r for r in job.results() if r.task == "Partition 0"]  # it processes nothing before its stores
    assert len(others()) >= 6  # 2 tasks, 200 new messages each in batches of 50: most of their batches
    if revoked:
        host.add_container()
        host.remove_container(0)  # every task of container 0 is revoked, Partition 0 in the middle of its restore
        for _ in range(20):
            host.manager.step()
            for container in list(host.containers.values()):
                container.step()
            time.sleep(0.01)
        assert 0 in host.containers and list(host.containers[0].tasks) == [("kc-1", "Partition 0")]
    release.set()
    while not job.has_left and time.monotonic() < deadline:
        host.step()
        time.sleep(0.01)
    assert set(job.done.values()) == {"caught up"} and len(job.done) == 3
    if revoked:
        assert 0 not in host.containers  # it released Partition 0 and stopped; another container ran it
    _assert_exact(config, 900, 7)
    assert sum(r.messages for r in job.results()) == 600
    first = min((r for r in job.results() if r.task == "Partition 0"), key=lambda r: r.batch)
    assert "restore-ms" in first.metrics.get("stores", {})  # what its restore did is reported with its first batch
    host.close()


def test_a_stopped_job_stops_every_task_at_a_batch_boundary_and_the_next_run_finishes_exactly(work_dir: Path):
    config = _config(work_dir, 50)
    _input(config, 2, 600, 5, 600)
    clock, host, job = _clocked(config, once=False)
    _run(host, job, clock, until=lambda: len(job.results()) >= 3)
    host.manager.leave("kc-1")
    _run(host, job, clock)
    assert 3 <= len(job.results()) <= 8  # each task stops after the batch it runs when it hears (one pass later)
    job = _join(host, config, once=True)
    _run(host, job, clock)
    _assert_exact(config, 600, 5)
    host.close()


def test_a_drain_caps_every_task_at_the_offsets_of_its_request_at_the_start_or_sent_later(work_dir: Path):
    from sparza.engine.drain import read_drain
    from sparza.runtime.driver.drainmonitor import finish_drain, request_drain

    config = _config(work_dir, 10)
    _input(config, 3, 600, 5, 200)
    first, _ = request_drain([config])
    append_messages(config, 300, 5, start=600, commit_size=300)   # after the request: not in this drain
    clock = Clock()
    host = InProcessHost(slots=2, clock=clock)
    job = _join(host, config, drain=first.to_json())
    _run(host, job, clock)
    assert set(job.done.values()) == {"drained"} and len(job.done) == 3
    assert not any(r.ended for r in job.results())
    _assert_exact(config, 600, 5)
    assert finish_drain(config) == first and read_drain(config) is None
    # A drain sent while the job runs: the rest up to its offsets, then out.
    second, _ = request_drain([config])
    append_messages(config, 100, 5, start=900, commit_size=100)
    job = _join(host, config)
    _run(host, job, clock, until=lambda: len(job.results()) >= 1)  # a batch or two of 10 in: far from the end
    host.manager.drain("kc-1", second.to_json())
    _run(host, job, clock)
    assert set(job.done.values()) == {"drained"}
    _assert_exact(config, 900, 5)
    host.close()


def test_a_container_stops_when_its_driver_is_silent_or_gone():
    import socket

    from sparza.engine.container import Container
    from sparza.engine.messages import Hello, Ping
    from sparza.runtime.channel import ChannelClient, ChannelServer

    events: list[Any] = []
    connected: list[Any] = []
    lost: list[Any] = []
    server = ChannelServer("127.0.0.1", lambda i, link: connected.append((i, link)),
                           lambda i, e: events.append(e), lambda i, why: lost.append((i, why)))
    try:
        # A timeout well above a loaded machine's scheduling delays: a ping must be able to arrive within it.
        client = ChannelClient.connect(server.address, 7, driver_timeout_s=2.0)
        container = Container(client, index=7)
        client.attach(container)
        client.report(Hello(7, "h", 1))
        deadline = time.monotonic() + 5
        while not connected and time.monotonic() < deadline:
            time.sleep(0.01)
        index, link = connected[0]
        for _ in range(50):  # two and a half timeouts long: the pings keep it alive
            link.send(Ping())
            time.sleep(0.1)
            assert client.alive()
        runner = threading.Thread(target=container.run)
        runner.start()
        runner.join(20)  # no more pings: it stops by itself
        assert not runner.is_alive() and client.driver_lost and index == 7
        client.close()
        deadline = time.monotonic() + 5
        while not lost and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lost and lost[0][0] == 7  # the driver hears the closed connection as a lost container
        assert isinstance(events[0], Hello)
    finally:
        server.close()
    # A driver that accepts but never says anything (frozen, cut off): the container notices after the timeout.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        client = ChannelClient.connect(("127.0.0.1", port, "t"), 1, driver_timeout_s=0.3)
        conn, _ = silent.accept()
        assert client.alive()
        eventually(lambda: not client.alive(), 10, 0.05, "the container did not notice the silent driver")
        conn.close()
        client.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("broadcast", [True, False], ids=["broadcast", "partitioned"])
def test_a_bootstrap_store_whose_stream_is_empty_does_not_hold_the_job(work_dir: Path, broadcast: bool):
    """An empty bootstrap stream counts as bootstrapped: every task processes its whole input under ``once`` and
    catches up. A broadcast store's builder publishes an empty bootstrapped snapshot, which the readers wait for
    (Spark seed 279784511: an empty bootstrap stream held every task for ever)."""
    from sparza.blobstore import blob_store_manager_from_config
    from sparza.state.adjunct.publication import PublicationBoard

    inputs = ({"task.broadcast.inputs": "delta.profiles#0"} if broadcast
              else {"task.inputs": "delta.events,delta.profiles"})
    config = _config(work_dir, 100, **PROFILES_STORE, **inputs)
    create_streams(config, 3)
    create_profiles(config, partitions=1 if broadcast else 3)
    append_messages(config, 450, 7, commit_size=150)
    clock, host, job = _clocked(config, slots=2)
    _run(host, job, clock)
    assert job.done == {f"Partition {i}": "caught up" for i in range(3)}
    _assert_exact(config, 450, 7)
    if broadcast:
        board = PublicationBoard(blob_store_manager_from_config(config), "kc", "1", "Partition 0", "profiles")
        published = board.latest_before(None)
        assert published is not None and published.bootstrapped and published.applied == 0
    host.close()


@pytest.mark.timeout(180)
def test_tasks_held_for_a_broadcast_publication_that_does_not_come_say_what_they_wait_for(work_dir: Path):
    """A versioned broadcast store publishes once a version is complete; with no end-of-dataset marker every task's
    main input waits for it. The tasks are not caught up and each says once what it waits for: the store and the
    task that builds it."""
    config = _config(work_dir, 100, **{"task.broadcast.inputs": "delta.profiles#0", **PROFILES_STORE,
                                       "stores.profiles.adstore.versioned": "true"})
    create_streams(config, 2)
    create_profiles(config, 1)
    append_messages(config, 100, 5, commit_size=100)
    clock, host, job = _clocked(config)
    for _ in range(30):
        host.step()
        clock.now += 1
    assert not job.done  # not caught up
    waits = [e for e in job.events if isinstance(e, TaskWaiting)]
    assert sorted(e.task for e in waits) == ["Partition 0", "Partition 1"]   # once each
    assert all("broadcast store 'profiles'" in e.why and "task 'Partition 0' builds" in e.why for e in waits)
    read = {t: [r.messages for r in job.results() if r.task == t] for t in ("Partition 0", "Partition 1")}
    assert read == {"Partition 0": [1, 0], "Partition 1": [1]}
    host.manager.leave("kc-1")
    _run(host, job, clock)
    assert {e.why for e in job.events if isinstance(e, TaskDone)} <= {"stopped"}
    host.close()


@pytest.mark.parametrize("tasks", [3, 8])
def test_commits_of_many_tasks_beside_each_other_to_one_stream_are_exact(work_dir: Path, tasks: int):
    """Threaded commits (as on Spark): the tasks of a container flush to the same Delta stream and back up to the
    same blob store at once, while the loop processes the others; every count is exact."""
    config = _config(work_dir, 25, **{"job.container.commit.threads": "4"})
    _input(config, tasks, 80 * tasks, 13, 40 * tasks)
    host, job = _threaded(config)
    deadline = time.monotonic() + 240
    while not job.has_left and time.monotonic() < deadline:
        host.step(max_passes=1)
        time.sleep(0.002)
    assert job.has_left, job.events[-5:]
    _assert_exact(config, 80 * tasks, 13)
    assert all(r.status is BatchStatus.COMMITTED for r in job.results())
    host.close()


def test_a_session_with_dynamic_allocation_is_refused_naming_both_ways_out():
    from sparza.errors import ConfigError
    from sparza.runtime.driver.containers import check_container_session

    class Session:  # what the check reads of a SparkSession: its runtime conf
        def __init__(self, values: dict[str, str]) -> None:
            self.conf = Config(values)

    check_container_session(Session({}))
    check_container_session(Session({"spark.dynamicAllocation.enabled": "false"}))
    with pytest.raises(ConfigError) as refused:
        check_container_session(Session({"spark.dynamicAllocation.enabled": "true"}))
    assert "job.execution.mode: batches" in str(refused.value) and "dynamic allocation off" in str(refused.value)


def test_an_idle_task_hears_of_input_that_a_moved_in_task_s_start_read_first(work_dir: Path):
    """A container re-reads its job's positions when a task handed to it has a checkpoint past what it last read
    (the task's previous container committed after that read: an executor lost, a rebalance). Input that reached an
    idle task's partition just before is seen by that extra read; the task must still be asked at the next pass,
    not judged idle because the pass's own read found nothing moved since the extra one (issue 40: the tail of
    partitions left unprocessed after a lost worker, no error, lag 0)."""
    config = _config(work_dir, 500)
    _input(config, 2, 60, 7, 60)
    clock, host, job = _clocked(config, slots=2, once=False)
    _run(host, job, clock, until=lambda: sum(r.messages for r in job.results()) == 60)
    for _ in range(3):  # every task finds nothing more: idle
        host.step(max_passes=1)
        clock.now += 1
    owners = host.owners("kc-1")
    assert len(set(owners.values())) == 2, owners
    stay = owners["Partition 0"]
    gone = owners["Partition 1"]
    # Input for both partitions; only the container that goes away runs (and commits past it) before it dies.
    append_messages(config, 40, 7, start=60, commit_size=40)
    before = sum(r.messages for r in job.results())
    for _ in range(5):
        host.containers[gone].step()
    host.manager.step()  # hears its results (the other container only queues what the manager sends it)
    assert sum(r.messages for r in job.results()) > before, "the other container did not commit its input"
    host.slots = 1
    host.kill(gone)
    _run(host, job, clock, rounds=30, until=lambda: final_counts(config)[1] == 100)
    assert host.owners("kc-1") == {"Partition 0": stay, "Partition 1": stay}
    _assert_exact(config, 100, 7)
    host.close()


@pytest.mark.parametrize(("error", "said"), [
    (RuntimeError("a bug in the host"), "the container manager failed (RuntimeError: a bug in the host): a bug in"),
    (ConnectionRefusedError(111, "Connection refused"), "Spark's JVM is gone"),
])
def test_a_failure_of_the_manager_itself_fails_its_jobs_instead_of_ending_them_as_done(error: Exception,
                                                                                        said: str) -> None:
    """A bug in the manager's step must not end a job as if it had caught up (a run that exits 0 with input left);
    a JVM that ended under the driver (its gateway refuses connections) is named as such, not as a bug."""
    from sparza.engine.errors import JobFailedError
    from sparza.engine.manager import ContainerManager

    class _Launcher:
        closed = False

        def slots(self) -> int:
            return 1

        def launch(self, index: int) -> None:
            raise error

        def close(self) -> None:
            self.closed = True

    class _Member:
        key, tasks, affinity, count = "job", ["Partition 0"], False, None

        def __init__(self) -> None:
            self.failed: list[BaseException] = []
            self.has_left = threading.Event()

        def add_job(self) -> Any:
            from sparza.engine.messages import AddJob

            return AddJob(job="job", config={}, generation=0, task_count=1, start_positions={})

        def last_locations(self) -> dict[str, str]:
            return {}

        def on_event(self, event: Any) -> None:
            pass

        def on_notice(self, line: str) -> None:
            pass

        def container_lost(self, reason: str) -> bool:
            return True

        def manager_failed(self, error: BaseException) -> None:
            self.failed.append(error)

        def left(self) -> None:
            self.has_left.set()

    launcher, member = _Launcher(), _Member()
    manager = ContainerManager(launcher)
    manager.join(member)
    manager.start()
    assert member.has_left.wait(10), "the manager neither ran nor failed the job"
    assert len(member.failed) == 1 and isinstance(member.failed[0], JobFailedError)
    assert said in str(member.failed[0])
    assert launcher.closed


def test_a_task_opens_the_producers_its_checkpoint_names_before_its_first_batch(work_dir: Path,
                                                                               monkeypatch: pytest.MonkeyPatch):
    """A task handed to a container fences the systems its checkpoint's outputs (or an open intent) name, in the
    restore step and before its first batch's begin: an open Kafka transaction of a dead instance would hold every
    read_committed reader until then, and the producer's opening no longer waits for the restore."""
    from sparza.engine.checkpoint import Intent
    from sparza.systems.delta.producer import DeltaSystemProducer

    config = _config(work_dir, 100)
    _input(config, 2, 200, 7, 100)
    clock, host, job = _clocked(config)
    _run(host, job, clock)
    store = checkpoint_store_from_config(config, "kc-1")
    outputs = {t: cp.outputs for t, cp in store.read_all().items()}
    assert set(outputs.values()) == {("delta",)}, outputs
    # Partition 1 died mid-flush of its next batch: its intent is open.
    stored = store.read("Partition 1")
    assert stored is not None
    cp = stored.checkpoint
    store.write(dataclasses.replace(cp, pending=Intent(cp.batch + 1, 1, dict(cp.offsets), dict(cp.offsets),
                                                       systems=("delta",))), stored.etag)
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(DeltaSystemProducer, "fence", lambda self, source, app_id: calls.append(("fence", source)),
                        raising=False)
    real_begin = DeltaSystemProducer.begin

    def begin(self: Any, source: str, transaction: Any) -> None:
        calls.append(("begin", source))
        real_begin(self, source, transaction)

    monkeypatch.setattr(DeltaSystemProducer, "begin", begin)
    append_messages(config, 100, 7, start=200, commit_size=100)
    job = _join(host, config, once=True)
    _run(host, job, clock)
    _assert_exact(config, 300, 7)
    for task in ("Partition 0", "Partition 1"):
        mine = [kind for kind, source in calls if source == task]
        assert mine and mine[0] == "fence" and mine.count("fence") == 1 and "begin" in mine, (task, calls)
    host.close()
