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


def test_a_running_containers_tasks_answer_reads_of_their_committed_and_in_flight_state(work_dir: Path):
    config = Config(job_values(work_dir, **{"task.max.batch.messages": "40", "task.commit.ms": "0"}))
    create_streams(config, 3)
    append_messages(config, 600, 7, commit_size=600)
    host = InProcessHost(slots=2)
    job = InProcessJob(config, once=True)
    host.join(job)
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
