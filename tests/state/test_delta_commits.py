"""Commits that carry their writes in the snapshot id (sparza.state.backup.delta): random puts and deletes, crashes at
every commit step and new hosts, checked against a plain dict; then gc, which must keep exactly what the task
checkpoints refer to. On the local blob store and on Azurite, with real RocksDB stores."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from sparza.blobstore import blob_store_manager_from_config, collect_garbage
from sparza.clock import system_clock_ms
from sparza.engine import executor, instance
from sparza.engine.commit import CommitStep
from sparza.state.backup import (
    DELTA_TAG,
    StateBackup,
    apply_changes,
    base_of,
    changes_of,
    snapshot_id,
)
from sparza.state.backup.delta import decode_changes, encode_changes
from sparza.state.kv import InMemoryStore, RocksDbStore
from sparza.testing import TestMessage, TestRunner
from sparza.testing.faults import InjectedFault

TASKS = 2


class KvTask:
    """Applies ``{"k": key, "v": int | None}``: a put, or a delete when ``v`` is None."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("kv")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        body = envelope.message
        if body["v"] is None:
            self.store.delete(body["k"])
        else:
            self.store.put(body["k"], body["v"])


def test_changes_round_trip_and_apply_to_rocksdb_and_memory_dirs(tmp_path: Path) -> None:
    changes = {b"a": b"1", b"b": None, bytes(range(256)): b"\x00" * 300}
    assert decode_changes(encode_changes(changes)) == changes
    sid = snapshot_id("job-1/t/kv/snapshot-index.abc", changes)
    assert base_of(sid) == "job-1/t/kv/snapshot-index.abc" and changes_of(sid) == changes
    assert snapshot_id("x", {}) == "x"

    db = RocksDbStore(tmp_path / "db")
    db.put_all([(b"b", b"old"), (b"c", b"3")])
    db.checkpoint(tmp_path / "cp")
    db.close()
    apply_changes(tmp_path / "cp", changes)
    assert not (tmp_path / "cp" / "LOCK").exists()
    reopened = RocksDbStore(tmp_path / "cp", read_only=True)
    assert dict(reopened.all()) == {b"a": b"1", b"c": b"3", bytes(range(256)): b"\x00" * 300}
    reopened.close()

    mem = InMemoryStore()
    mem.put_all([(b"b", b"old"), (b"c", b"3")])
    mem.checkpoint(tmp_path / "mem")
    apply_changes(tmp_path / "mem", changes)
    loaded = InMemoryStore()
    loaded.load(tmp_path / "mem")
    assert dict(loaded.all()) == {b"a": b"1", b"c": b"3", bytes(range(256)): b"\x00" * 300}


def test_a_store_records_its_writes_up_to_a_limit(tmp_path: Path) -> None:
    db = RocksDbStore(tmp_path / "db")
    db.track_changes(100)
    db.put(b"a", b"1")
    db.put_all([(b"b", b"2"), (b"a", None)])
    db.delete_all([b"c"])
    assert db.take_changes() == {b"a": None, b"b": b"2", b"c": None}
    assert db.take_changes() == {}
    db.put(b"big", b"x" * 200)
    assert db.take_changes() is None  # past the limit: the commit must back up files
    db.put(b"d", b"4")
    assert db.take_changes() == {b"d": b"4"}
    db.close()


@pytest.fixture
def resident(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks stay in their process between batches, as in a container (TestRunner runs the micro-batch path)."""
    original = instance.get_instance
    monkeypatch.setattr(executor, "get_instance",
                        lambda engine, split, *, resident=False: original(engine, split, resident=True))


def _runner(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> TestRunner:
    config = {"stores.kv.factory": "rocksdb", "stores.kv.key.serde": "string", "stores.kv.msg.serde": "json",
              "stores.kv.backup.factories": "blobstore", "stores.kv.backup.delta.max.bytes": "600",
              "systems.mem.streams.events.samza.msg.serde": "json",
              "systems.mem.streams.events.samza.key.serde": "string", "task.max.batch.messages": "1000"}
    if backend == "azure":
        connection = request.getfixturevalue("azure_connection_string")
        container = f"delta{random.getrandbits(40):x}"

        class AzureRunner(TestRunner):
            def _final_values(self) -> dict[str, str]:
                values = super()._final_values()
                values.update({"blob.store.manager.factory": "azure", "blob.store.azure.container": container,
                               "azure.storage.connect": connection})
                return values

        runner: TestRunner = AzureRunner.of(KvTask, config, work_dir=tmp_path / "work")
    else:
        runner = TestRunner.of(KvTask, config, work_dir=tmp_path / "work")
    return runner.add_input("mem.events", partitions=TASKS)


def _from_blob_store(runner: TestRunner, where: Path) -> dict[str, dict[str, int]]:
    """Every task's committed store as a new host restores it from the blob store (its checkpoint's snapshot id)."""
    config = runner.config
    manager = blob_store_manager_from_config(config)
    out = {}
    try:
        for task, cp in runner.checkpoints().items():
            backup = StateBackup(manager, str(config.get_str("job.name")), "1", task, progress=False)
            target = where / task.replace(" ", "_")
            shutil.rmtree(target, ignore_errors=True)
            try:
                backup.restore(cp.stores["kv"], target, reupload_deleted=False)
            finally:
                backup.close()
            db = RocksDbStore(target, read_only=True)
            try:
                out[task] = {k.decode(): json.loads(v) for k, v in db.all()}
            finally:
                db.close()
    finally:
        manager.close()
    return out


def _referenced(backup: StateBackup, sid: str) -> set[str]:
    index = backup.read_index(sid)
    return {base_of(sid)} | {b.blob_id for b in index.dir_index.present_blobs()}


@pytest.mark.parametrize("backend", ["local", pytest.param("azure", marks=pytest.mark.azurite)])
@pytest.mark.parametrize("seed", [1, 2])
def test_random_writes_crashes_and_new_hosts_match_a_dict_and_gc_keeps_exactly_what_is_referenced(
        tmp_path: Path, backend: str, seed: int, resident: None, request: pytest.FixtureRequest) -> None:
    rng = random.Random(seed)
    oracle: list[dict[str, int]] = [{} for _ in range(TASKS)]
    steps = list(CommitStep)
    runner = _runner(tmp_path, backend, request)
    kinds: set[str] = set()
    crashes = 0
    try:
        for _batch in range(24):
            messages: dict[int, list[TestMessage]] = {}
            for p in range(TASKS):
                n = rng.choice([0, 1, 3, 8, 40])  # 40 writes pass the 600-byte limit: a file snapshot
                keys = [f"k{rng.randrange(60)}" for _ in range(n)]
                messages[p] = [TestMessage({"k": k, "v": None if rng.random() < 0.25 else rng.randrange(1000)},
                                           key=k, partition=p) for k in keys]
            runner.add_input("mem.events", messages)
            if rng.random() < 0.3:
                runner.fail_at(rng.choice(steps), task=f"Partition {rng.randrange(TASKS)}")
                try:
                    runner.run_batch()
                except InjectedFault:
                    crashes += 1
                    if rng.random() < 0.5:
                        shutil.rmtree(runner.state_dir, ignore_errors=True)  # and a new host
                    runner.restart()
                runner.clear_faults()
            runner.run_batch()
            for p in range(TASKS):
                for m in messages[p]:
                    if m.value["v"] is None:
                        oracle[p].pop(m.value["k"], None)
                    else:
                        oracle[p][m.value["k"]] = m.value["v"]
            expected = {f"Partition {p}": oracle[p] for p in range(TASKS)}
            got = _from_blob_store(runner, tmp_path / "restored")  # a task that committed nothing has no checkpoint
            assert {task: got.get(task, {}) for task in expected} == expected
            for cp in runner.checkpoints().values():
                kinds.add("delta" if DELTA_TAG in cp.stores["kv"] else "files")
        assert kinds == {"delta", "files"} and crashes > 0
        checkpoints = runner.checkpoints()
        config = runner.config
    finally:
        runner.close() if backend == "local" else None
    manager = blob_store_manager_from_config(config)
    try:
        collect_garbage(manager, now_ms=system_clock_ms() + 60 * 86_400_000, deleted_retention_ms=0)
        job_name = str(config.get_str("job.name"))
        prefix = f"{job_name}-1/"
        left = {info.blob_id for info in manager.list_blobs(prefix)}
        referenced: set[str] = set()
        for task, cp in checkpoints.items():
            backup = StateBackup(manager, job_name, "1", task, progress=False)
            try:
                referenced |= _referenced(backup, cp.stores["kv"])
                restored = tmp_path / "new-host" / task.replace(" ", "_")
                backup.restore(cp.stores["kv"], restored, reupload_deleted=False)
            finally:
                backup.close()
            db = RocksDbStore(restored, read_only=True)
            try:
                entries = {k.decode(): json.loads(v) for k, v in db.all()}
            finally:
                db.close()
            assert entries == oracle[int(task.rsplit(" ", 1)[1])]
        assert left == referenced, (sorted(left - referenced), sorted(referenced - left))
    finally:
        manager.close()
        if backend != "local":
            runner.close()
