"""Restores beside a container's loop (issue 39) meet every error the first batch met before, on the same path.

A task handed to a container restores its stores in the container's restore pool, not in its first batch
(:meth:`sparza.engine.instance.TaskInstance.restore_stores`). Reverted once (cf9b3fb) because that restore skipped
what the batch ran first: the SAMZA-2787 recovery of deleted snapshot blobs (a deleted snapshot failed with a
``DeletedError`` at every retry, a purged one with a ``SnapshotUnavailableError`` instead of the
``RuntimeStateError`` naming the remedy) and because it marked a dir as committed at a snapshot it had to replace
(a process killed before the first commit left a dir whose next upload diffed against deleted blobs). These run the
in-process host (the engine's manager, containers and commit code) on real stores, blobs and checkpoints; the
expected outcomes are those ``tests/runtime/test_deleted_snapshots.py`` asserts through ``sparza run``.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from examples.keyed_count.load import append_messages, create_streams
from tests.runtime.helpers import committed_snapshots, delete_snapshots, expected_counts, final_counts, job_values

from sparza.blobstore import blob_store_manager_from_config, collect_garbage
from sparza.config import Config
from sparza.engine import stores as stores_module
from sparza.engine.checkpoint import checkpoint_store_from_config
from sparza.engine.inprocess import ContainerKilled, InProcessHost, InProcessJob
from sparza.engine.instance import TaskInstance
from sparza.engine.jobconfig import JobConfig
from sparza.engine.messages import TaskRetrying
from sparza.engine.results import BatchStatus
from sparza.engine.stores import TaskStores
from sparza.metrics import MetricsRegistry
from sparza.state.backup import StateBackup
from sparza.state.backup.delta import base_of

pytestmark = pytest.mark.timeout(300)

KEYS = 7
DAY_MS = 86_400_000
TASKS = ["Partition 0", "Partition 1"]
EXTRA_STORE = {"stores.extra.factory": "rocksdb", "stores.extra.key.serde": "string",
               "stores.extra.msg.serde": "json", "stores.extra.backup.factories": "blobstore"}
"""A second backed-up store (the keyed count never writes it): a restore has a next store to stop before."""


class Clock:
    """Monotonic seconds that move only when told (retry backoffs read it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _config(work_dir: Path, **overrides: str) -> Config:
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "100", "task.commit.ms": "0",
                                            "job.container.retry.backoff.ms": "0", **overrides}))
    create_streams(config, len(TASKS))
    return config


def _run(config: Config, *, threaded: bool, rounds: int = 600) -> InProcessJob:
    """Run the job ``--once`` on a fresh one-slot in-process host until it leaves (inline restores and commits on
    a clock of its own, or in the containers' thread pools in real time)."""
    clock = Clock()
    host = InProcessHost(slots=1, clock=clock) if not threaded else InProcessHost(slots=1, threaded_commits=True)
    job = InProcessJob(config, once=True)
    host.join(job)
    try:
        for _ in range(rounds):
            host.step(max_passes=1 if not threaded else 100)
            if job.has_left:
                return job
            clock.now += 1.0
            if threaded:
                time.sleep(0.005)
        raise AssertionError(f"the job did not finish: {job.notices[-5:]}, {job.events[-5:]}")
    finally:
        host.close()


def _purge(config: Config) -> None:
    manager = blob_store_manager_from_config(config)
    try:
        collect_garbage(manager, now_ms=2**41)  # far past the deleted-blob retention: the deleted blobs are gone
    finally:
        manager.close()


def _new_host(config: Config) -> None:
    """The local state is gone and no process remembers a cleanup (the tasks run on a new host)."""
    shutil.rmtree(config["job.logged.store.base.dir"])
    stores_module._CLEANED.clear()


def _assert_whole_after_gc(config: Config, deleted: dict[str, list[str]]) -> None:
    """The checkpoints name snapshots none of whose blobs was deleted: gc past every TTL and retention purges the
    deleted blobs, and every blob of the committed snapshots still downloads with its CRC."""
    now = committed_snapshots(config)
    for task, index_id in now.items():
        assert base_of(index_id) not in deleted[task]
    manager = blob_store_manager_from_config(config)
    try:
        purged = set(collect_garbage(manager, now_ms=2**41 + 400 * DAY_MS).removed)
        for task, blobs in deleted.items():
            assert set(blobs) <= purged, f"task {task}: deleted blobs not purged"
        for task, index_id in now.items():
            verified = StateBackup(manager, "kc", "1", task).verify(index_id)
            assert verified.ok and verified.files > 0, verified.problems
    finally:
        manager.close()


def _first_run(config: Config) -> None:
    append_messages(config, 300, KEYS, commit_size=300)
    job = _run(config, threaded=False)
    assert job.done == {t: "caught up" for t in TASKS}


class _HeldRestores:
    """The restore of a store dir (``TaskStores._prepare_dir``) wrapped: each call is recorded in :attr:`calls` as
    ``(id of its TaskStores, task, store)`` and, until :attr:`release` is set, waits (at most 30 s) before the real
    restore; :attr:`entered` is set once ``holding`` calls wait."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, holding: int) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.calls: list[tuple[int, str, str]] = []
        real = TaskStores._prepare_dir

        def held(stores: TaskStores, name: str, *args: Any, **kwargs: Any) -> None:
            self.calls.append((id(stores), stores.task, name))
            if not self.release.is_set():
                if len(self.calls) >= holding:
                    self.entered.set()
                self.release.wait(30)
            real(stores, name, *args, **kwargs)

        monkeypatch.setattr(TaskStores, "_prepare_dir", held)


def _step_around_restores(host: InProcessHost) -> None:
    """One step of the manager and of every container, then a pause (not host.step(): it waits for held restores)."""
    host.manager.step()
    for container in list(host.containers.values()):
        container.step()
    time.sleep(0.01)


def _second_run_held(work_dir: Path, monkeypatch: pytest.MonkeyPatch, *, restore_threads: int,
                     holding: int) -> tuple[Config, _HeldRestores, InProcessHost, InProcessJob, float]:
    """A first run with a second backed-up store (:data:`EXTRA_STORE`), 300 more messages, then a second run on a
    threaded one-slot host with ``restore_threads`` restore threads, stepped until ``holding`` restores wait in their
    first store; returns the config, the held restores, the host, the job and the second run's deadline."""
    config = _config(work_dir, **EXTRA_STORE)
    _first_run(config)
    append_messages(config, 300, KEYS, start=300, commit_size=300)
    held = _HeldRestores(monkeypatch, holding)
    host = InProcessHost(slots=1, threaded_commits=True, restore_threads=restore_threads)
    job = InProcessJob(config, once=True)
    host.join(job)
    deadline = time.monotonic() + 60
    while not held.entered.is_set() and time.monotonic() < deadline:
        _step_around_restores(host)
    assert held.entered.is_set()
    return config, held, host, job, deadline


def _run_out(host: InProcessHost, job: InProcessJob, deadline: float) -> None:
    """Step ``host`` until ``job`` left (by ``deadline``), close it; every task caught up."""
    while not job.has_left and time.monotonic() < deadline:
        host.step()
        time.sleep(0.01)
    host.close()
    assert job.done == {t: "caught up" for t in TASKS}, job.events[-5:]


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threaded"])
def test_a_restore_meeting_deleted_snapshot_blobs_recovers_them_and_names_the_fresh_snapshot(work_dir: Path,
                                                                                              threaded: bool):
    """Before the fix the restore's cleanup met the deleted blob (DeletedError) at every retry and the task failed;
    the first batch's SAMZA-2787 recovery is now the restore's first step: a fresh snapshot, in the checkpoint."""
    config = _config(work_dir)
    _first_run(config)
    deleted = delete_snapshots(config)
    _new_host(config)
    append_messages(config, 300, KEYS, start=300, commit_size=300)

    job = _run(config, threaded=threaded)
    assert job.done == {t: "caught up" for t in TASKS}, job.events[-5:]
    assert not [r for r in job.results() if r.status is BatchStatus.FAILED]
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, KEYS) and rows == 600
    recoveries = {t: sum(int(r.metrics.get("stores", {}).get("deleted-snapshot-recoveries", (0, 0))[1])
                         for r in job.results() if r.task == t) for t in TASKS}
    assert recoveries == {t: 1 for t in TASKS}  # reported with each task's first batch, once
    _assert_whole_after_gc(config, deleted)


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threaded"])
def test_a_restore_meeting_a_purged_snapshot_fails_the_task_naming_snapshot_task_and_remedy(work_dir: Path,
                                                                                             threaded: bool):
    """Before the fix a purged snapshot failed with a bare SnapshotUnavailableError; it is the RuntimeStateError of
    the first batch again, retried as that batch's failure was, and then the task fails with it."""
    config = _config(work_dir)
    _first_run(config)
    snapshots = committed_snapshots(config)
    delete_snapshots(config)
    _purge(config)
    _new_host(config)
    append_messages(config, 300, KEYS, start=300, commit_size=300)

    job = _run(config, threaded=threaded)
    assert job.done == {t: "failed" for t in TASKS}
    for task in TASKS:
        [failed] = [r for r in job.results() if r.task == task and r.status is BatchStatus.FAILED]
        error = failed.error or ""
        assert "failed 4 times in a row" in error and "RuntimeStateError" in error, error
        assert "store 'counts'" in error and f"task '{task}'" in error and snapshots[task] in error, error
        assert "undelete" in error and "delete the task checkpoint" in error, error
    counts, rows = final_counts(config)
    assert counts == expected_counts(300, KEYS) and rows == 300  # nothing of the second run's input was written


def test_a_container_killed_after_a_restore_that_replaced_a_deleted_snapshot_leaves_no_dir_marked_at_it(
        work_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """In one process (its cleanups remembered) the restore itself meets the deleted blobs and replaces the
    snapshot; only that TaskStores knows the replacement. Before the fix it marked the dir as holding the old
    snapshot: killed before its first commit, the next container reused the dir, diffed its upload against the
    deleted blobs and failed in the cleanup with a DeletedError at every retry (the in-process harness's seed
    1833). The next container restores again instead."""
    config = _config(work_dir)
    _first_run(config)
    deleted = delete_snapshots(config)
    shutil.rmtree(config["job.logged.store.base.dir"])  # _CLEANED kept: this process cleaned those snapshots
    append_messages(config, 300, KEYS, start=300, commit_size=300)
    real = TaskInstance.process
    killed: list[str] = []

    def kill_once(self: TaskInstance, *args: Any, **kwargs: Any) -> Any:
        if not killed:  # the first batch after the restores: the container dies before anything commits
            killed.append(self.name)
            raise ContainerKilled()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TaskInstance, "process", kill_once)
    job = _run(config, threaded=False)
    assert killed and job.lost == 1
    assert job.done == {t: "caught up" for t in TASKS}, job.events[-5:]
    # No commit referred to a deleted blob: none failed in its cleanup (that the next batch then recovered from).
    assert not [e for e in job.events if isinstance(e, TaskRetrying)]
    assert not [r for r in job.results() if r.failed_step or r.status is not BatchStatus.COMMITTED]
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, KEYS) and rows == 600
    _assert_whole_after_gc(config, deleted)


def test_a_cleanup_racing_a_restore_thread_waits_for_it_and_leaves_nothing_open(work_dir: Path,
                                                                               monkeypatch: pytest.MonkeyPatch):
    """``close_committed`` from another thread (a release, a kill) while a restore thread is inside a store's
    restore: before the fix it returned at once and the restore then kept an open store nobody closed (its RocksDB
    lock held, the task already released). It now waits for the restore and closes what it opened."""
    config = _config(work_dir)
    _first_run(config)
    committed = dict(checkpoint_store_from_config(config, "kc-1").read_all()["Partition 0"].stores)
    batch = checkpoint_store_from_config(config, "kc-1").read_all()["Partition 0"].batch
    _new_host(config)
    job = JobConfig.from_config(config)
    stores = TaskStores(job, "Partition 0", MetricsRegistry())
    stores.resident = True
    entered, release = threading.Event(), threading.Event()
    real = TaskStores._prepare_dir

    def held(self: TaskStores, *args: Any, **kwargs: Any) -> None:
        entered.set()
        release.wait(30)
        real(self, *args, **kwargs)

    monkeypatch.setattr(TaskStores, "_prepare_dir", held)
    restored: list[bool] = []
    restore = threading.Thread(target=lambda: restored.append(stores.preopen(committed, batch)))
    restore.start()
    assert entered.wait(30)
    cleanup = threading.Thread(target=stores.close_committed)
    cleanup.start()
    cleanup.join(0.5)
    assert cleanup.is_alive()  # it waits for the restore thread, which is inside the store's restore
    release.set()
    restore.join(30)
    cleanup.join(30)
    assert restored == [True] and not restore.is_alive() and not cleanup.is_alive()
    assert stores._kept == {}  # what the restore opened was closed by the cleanup
    monkeypatch.setattr(TaskStores, "_prepare_dir", real)
    again = TaskStores(job, "Partition 0", MetricsRegistry())  # opens the same RocksDB dir: its lock is free
    again.open(committed, batch)
    held_counts = dict(again.handles["counts"].all())
    again.close()
    counts, _rows = final_counts(config)
    assert held_counts and held_counts == {k: counts[k] for k in held_counts}  # its keys' counts, as output


def test_a_revoke_stops_restores_before_their_next_store_and_a_queued_one_never_starts(
        work_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """One restore thread, two tasks of two stores each handed to a container, the first store's restore held; the
    container is stopped meanwhile. Before the fix the held restore went on to its second store and the queued
    task restored both of its own for a container that had let it go; now the held one stops before its next
    store, the queued one restores nothing, both are released once the restore thread returned, and the next
    container restores what it needs: exact output."""
    config, held, host, job, deadline = _second_run_held(work_dir, monkeypatch, restore_threads=1, holding=1)
    first = host.containers[0]
    mine = {id(t.instance.stores) for t in first.tasks.values()}
    assert sorted(t.state for t in first.tasks.values()) == ["restoring", "restoring"]
    host.remove_container(0)  # every task of container 0 is revoked: one restoring, one waiting for the thread
    for _ in range(20):
        _step_around_restores(host)
    assert 0 in host.containers and len(first.tasks) == 2  # released only once their restores returned
    held.release.set()
    _run_out(host, job, deadline)
    assert len([c for c in held.calls if c[0] in mine]) == 1, held.calls  # only the held store, in container 0
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, KEYS) and rows == 600


def test_a_container_closed_mid_restore_stops_its_restores_and_leaves_nothing_open(work_dir: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    """``Container.close`` (its host gone, the loop failed) while two tasks restore in its two threads: each restore
    stops before its second store, close returns once they did with every task released and nothing kept open, and
    the container that gets the tasks next finishes exactly. Before, close waited for both restores to open every
    store and released stores the restores might still have been opening."""
    # Both restores inside their first store.
    config, held, host, job, deadline = _second_run_held(work_dir, monkeypatch, restore_threads=2,
                                                         holding=len(TASKS))
    first = host.containers[0]
    stores = [t.instance.stores for t in first.tasks.values()]
    closing = threading.Thread(target=first.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()  # it waits for the restore threads
    held.release.set()
    closing.join(30)
    assert not closing.is_alive() and not first.tasks
    assert sorted(c[1:] for c in held.calls if c[0] in {id(s) for s in stores}) == [(t, "counts") for t in TASKS]
    assert all(s._kept == {} and s._open == {} for s in stores)
    host.kill(0)  # the closed container's process ends; the manager gives its tasks to a new one
    _run_out(host, job, deadline)
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, KEYS) and rows == 600
