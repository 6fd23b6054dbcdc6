"""Live store queries (Kafka Streams' interactive queries) of a running job: through the engine in-process, and
through a processor's HTTP endpoint and ``sparza store get --live`` on the shared SparkSession."""

from __future__ import annotations

import threading
import uuid
import zlib
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages, create_streams
from tests.runtime.helpers import expected_counts, final_counts, job_values, run_sparza, write_config

from sparza.config import Config
from sparza.engine.inprocess import InProcessHost, InProcessJob
from sparza.engine.messages import QueryStore
from sparza.testing import eventually


def _joined(work_dir: Path, partitions: int, messages: int, keys: int, slots: int
            ) -> tuple[InProcessHost, InProcessJob]:
    """The keyed count (batches of 40, a commit each) over ``messages`` of ``keys`` keys on ``partitions``, joined to
    an in-process host of ``slots`` containers (``--once``)."""
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "40", "task.commit.ms": "0"}))
    create_streams(config, partitions)
    append_messages(config, messages, keys, commit_size=messages)
    host = InProcessHost(slots=slots)
    job = InProcessJob(config, once=True)
    host.join(job)
    return host, job


def test_a_running_containers_tasks_answer_reads_of_their_committed_and_in_flight_state(work_dir: Path):
    host, job = _joined(work_dir, 3, 600, 7, 2)
    answered = []
    while not job.has_left:
        host.step(max_passes=1)
        owners = host.owners("kc-1")
        for task, index in owners.items():  # reads while the tasks run: each from the task's own container
            if index is not None:
                answer = host.manager.query(QueryStore(uuid.uuid4().hex, "kc-1", task, "counts", "count"), 5.0)
                assert answer.ok, answer.error
                answered.append((task, answer.batch, answer.value))
    assert answered and all(isinstance(v, int) for _t, _b, v in answered)
    # A task's committed count never goes back as its batches commit.
    for task in {t for t, _b, _v in answered}:
        seen = [(b, v) for t, b, v in answered if t == task]
        assert seen == sorted(seen), (task, seen)
    host.close()


def test_a_committed_get_is_answered_as_of_the_latest_commit_without_opening_its_checkpoint(work_dir: Path,
                                                                                            monkeypatch):
    """A get of a resident task's RocksDB store reads a snapshot taken as the commit checkpointed the store: the
    answer is what that commit's checkpoint holds, and no checkpoint dir is opened for it (before, the first read
    after each commit opened the commit's dir read-only, ~7-15 ms on a busy executor)."""
    from sparza.engine.stores import TaskStores

    def refuse(self: TaskStores, name: str, directory: Path) -> None:
        raise AssertionError(f"a get opened the checkpoint dir {directory}")

    monkeypatch.setattr(TaskStores, "open_committed", refuse)
    host, job = _joined(work_dir, 2, 400, 5, 1)
    keys = [f"k{i}" for i in range(5)] + ["no-such-key"]
    batches: dict[str, set[int]] = {}
    while not job.has_left:
        host.step(max_passes=1)
        for task, index in host.owners("kc-1").items():
            found = host.containers[index].tasks.get(("kc-1", task)) if index is not None else None
            committed = found.instance.stores.committed_dir("counts") if found is not None else None
            if committed is None:
                continue
            batch = committed[0]
            held = dict(found.instance.stores.read_committed("counts", batch))  # that commit's checkpoint
            for key in keys:
                answer = host.manager.query(QueryStore(uuid.uuid4().hex, "kc-1", task, "counts", "get", key=key), 5.0)
                assert answer.ok, answer.error
                assert (answer.batch, answer.value) == (batch, held.get(key)), (task, key)
            batches.setdefault(task, set()).add(batch)
    host.close()
    assert len(batches) == 2 and all(len(b) >= 2 for b in batches.values()), batches  # read across commits


def test_a_get_finds_its_task_and_committed_view_once_and_a_get_needing_a_dir_is_answered_in_the_pool():
    """StoreQueries without a container: a get through the committed view (or of live state, or of a task not here)
    is answered in the caller's thread after one look-up of the task and one of its view; a get with no view (a
    commit's dir to open) and a count go to the pool, which finds the task again there."""
    from sparza.engine.queries import StoreQueries

    class View:
        def get(self, key: str) -> int:
            return {"k1": 7}.get(key, 0)

    class Handle:
        def peek(self, key: str) -> int:
            return 8

    class Dir(View):
        def all(self) -> list[tuple[str, int]]:
            return [("k1", 7), ("k2", 1)]

        def close(self) -> None:
            pass

    class Stores:
        handles = {"counts": Handle()}
        views = 0

        def __init__(self, with_view: bool) -> None:
            self.with_view = with_view

        def committed_view(self, name: str) -> tuple[int, View] | None:
            self.views += 1
            return (4, View()) if self.with_view else None

        def committed_dir(self, name: str) -> tuple[int, Path]:
            return 3, Path("/nowhere")

        def open_committed(self, name: str, directory: Path) -> Dir:
            return Dir()

    tasks = {"Partition 0": Stores(True), "Partition 1": Stores(False)}
    found: list[tuple[str, str]] = []
    answers: dict[str, tuple[bool, object, int | None, str | None, str]] = {}

    def find(job: str, task: str) -> Stores | None:
        found.append((task, threading.current_thread().name))
        return tasks.get(task)

    def report(answer) -> None:
        answers[answer.id] = (answer.ok, answer.value, answer.batch, answer.error, threading.current_thread().name)

    queries = StoreQueries(find, report)
    caller = threading.current_thread().name
    try:
        queries.submit(QueryStore("view", "kc-1", "Partition 0", "counts", "get", key="k1"))
        assert found == [("Partition 0", caller)] and tasks["Partition 0"].views == 1
        assert answers.pop("view") == (True, 7, 4, None, caller)
        for task in ("Partition 0", "Partition 1"):
            queries.submit(QueryStore("live", "kc-1", task, "counts", "get", key="k1", live=True))
            assert answers.pop("live") == (True, 8, None, None, caller)
        queries.submit(QueryStore("gone", "kc-1", "Partition 9", "counts", "get", key="k1"))
        queries.submit(QueryStore("none", "kc-1", "Partition 0", "other", "get", key="k1"))
        gone, none = answers.pop("gone"), answers.pop("none")
        assert gone[0] is False and "does not run in this container now" in str(gone[3]) and gone[4] == caller
        assert none[0] is False and "has no store 'other'" in str(none[3]) and none[4] == caller
        assert tasks["Partition 0"].views == 1  # none for the live get or the missing store
        found.clear()
        queries.submit(QueryStore("dir", "kc-1", "Partition 1", "counts", "get", key="k1"))
        queries.submit(QueryStore("count", "kc-1", "Partition 1", "counts", "count"))
        eventually(lambda: {"dir", "count"} <= set(answers), 10, 0.01, "the pool did not answer")
    finally:
        queries.close()
    assert answers["dir"][:4] == (True, 7, 3, None) and answers["count"][:4] == (True, 2, 3, None)
    assert answers["dir"][4] != caller and answers["count"][4] != caller
    assert [t for t, _thread in found] == ["Partition 1"] * 3  # the dir get: here, then in the pool; the count: pool
    assert tasks["Partition 1"].views == 2  # the dir get's, here and in the pool; none for the count


def test_the_endpoint_keeps_a_clients_connection_across_reads_and_the_client_opens_a_closed_one_again(
        work_dir: Path):
    import socket
    import time

    from sparza.engine.messages import StoreAnswer
    from sparza.runtime.driver.livequery import LiveJob, LiveQueryServer
    from sparza.storeview.live import LiveStores

    class Manager:  # the containers' side: every task holds every key at 7, as of batch 3
        def query(self, query: QueryStore, timeout_s: float) -> StoreAnswer:
            return StoreAnswer(query.id, True, 7 if query.key != "no-such-key" else None, 3)

    server = LiveQueryServer(Manager())  # type: ignore[arg-type]
    server.add(LiveJob("kc-1", ["Partition 0", "Partition 1"], lambda store, key: "Partition 1"))
    stores = LiveStores(Config(job_values(work_dir)), url=server.url)
    try:
        assert stores.get("counts", "k1") == {"Partition 1": 7}
        kept = stores._local.conn.sock.getsockname()
        began = time.monotonic()
        for _ in range(50):
            assert stores.get("counts", "k1") == {"Partition 1": 7}
        # One connection for them all; and quick: with Nagle's algorithm on the kept connection, each answer's
        # body waited for the ACK of its headers (~40 ms delayed ACK per read).
        assert stores._local.conn.sock.getsockname() == kept
        assert time.monotonic() - began < 1.5
        assert stores.get("counts", "no-such-key") == {}
        assert stores.count("counts") == {"Partition 0": 7, "Partition 1": 7}
        stores._local.conn.sock.shutdown(socket.SHUT_RDWR)  # as the endpoint closing an idle connection
        assert stores.get("counts", "k1") == {"Partition 1": 7}
        assert stores._local.conn.sock.getsockname() != kept
    finally:
        stores.close()
        server.close()


@pytest.mark.timeout(400)
def test_sparza_store_get_live_asks_the_running_processor_which_routes_the_key_to_its_task(spark, work_dir: Path):
    from sparza.runtime import JobRunner
    from sparza.storeview.live import LiveQueryError, LiveStores

    config = Config(job_values(work_dir, **{"task.max.batch.messages": "100"}))
    create_streams(config, 4)
    with pytest.raises(LiveQueryError, match="no processor of job kc-1 serves live queries"):
        LiveStores(config).get("counts", "k1")
    append_messages(config, 800, 9, commit_size=400)
    lines: list[str] = []
    runner = JobRunner(config, spark=spark, install_signal_handlers=False, status=lines.append)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: final_counts(config)[1] >= 800, 300, 0.5, "the job did not write its 800 counts")
        counts, rows = final_counts(config)
        assert counts == expected_counts(800, 9) and rows == 800
        stores = LiveStores(config)
        # Outputs become visible at step 2 of a commit, the store's committed state at step 5: wait for the last
        # commits to land before reading the committed state.
        eventually(lambda: all(stores.get("counts", key) == {f"Partition {zlib.crc32(key.encode()) % 4}": n}
                               for key, n in counts.items()), 120, 0.5, "the last commits did not land")
        for key, n in counts.items():
            found = stores.get("counts", key)
            owner = f"Partition {zlib.crc32(key.encode()) % 4}"  # the example's input is keyed like its store
            assert found == {owner: n}, (key, found)
            assert stores.get("counts", key, live=True) == {owner: n}
        assert stores.get("counts", "no-such-key") == {}
        per_task = stores.count("counts")
        assert sum(per_task.values()) == len(counts) and set(per_task) == {f"Partition {i}" for i in range(4)}
        path = write_config(config, work_dir / "job.yaml")
        some = sorted(counts)[0]
        shown = run_sparza("store", "get", "counts", "--config", str(path), "--key", some, "--live")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.strip() == f"Partition {zlib.crc32(some.encode()) % 4}\t{counts[some]}"
        missing = run_sparza("store", "get", "counts", "--config", str(path), "--key", "no-such-key", "--live")
        assert missing.returncode == 1
        assert any("live store queries at http://127.0.0.1:" in line for line in lines), lines
    finally:
        runner.request_stop("test done")
        thread.join(180)
    with pytest.raises(LiveQueryError):  # stopped: the document is gone with it
        LiveStores(config).get("counts", "k1")
