"""The upgrade path on a Spark standalone cluster (the fixtures of test_standalone_cluster.py): v1 of the keyed
count runs on two workers over steady input, with its blob store and checkpoints on Azurite; ``sparza savepoint
create --stop --drain`` drains it and takes a savepoint; v2 (a new job.id, another blob container, an added
store) starts on the cluster from it with ``sparza run --from-savepoint``. Between the two the input stream grows
from 4 to 8 partitions (``sparza stream grow``) and v2 says ``job.partition.expansion: group``: its 4 tasks read
partitions 4-7 as SEP-5 maps them (``p % 4``), and the loader partitions by ``crc32(key) % count``, so every key
stays in the task that holds its count. Each key's counts over v1's and v2's output are exactly 1..n for the n
messages appended with that key (an oracle counting what was appended)."""

from __future__ import annotations

import subprocess

import pytest
from examples.keyed_count.load import SteadyInput, append_messages
from tests.runtime.helpers import (
    counts_per_key,
    expected_counts,
    sparza_cmd,
    sparza_env,
    task_checkpoints,
    write_config,
)

from sparza.config import Config
from sparza.devservers.spark import executor_python
from sparza.devservers.sparkcluster import StandaloneCluster
from sparza.testing import eventually

pytestmark = pytest.mark.slow

KEYS = 19
TASKS = [f"Partition {i}" for i in range(4)]


def _batches(config: Config) -> dict[str, int]:
    try:
        shown = task_checkpoints(config)
    except Exception:  # Azurite busy, a blob replaced while read: the caller samples again
        return {}
    return {t: int(cp.batch or 0) for t, cp in shown.items()}


def test_drain_with_savepoint_then_v2_on_the_cluster_continues_exactly(
        make_job, work_dir, sparza_package, azure_connection_string, unique_name):
    python = str(executor_python(work_dir / "executor-python"))
    cluster = StandaloneCluster(work_dir / "cluster", workers=2, python=python)
    config = make_job(partitions=len(TASKS), **{
        "job.logged.store.base.dir": "${SPARZA_EXECUTOR_STATE}",
        "job.py.files": str(sparza_package),
        "job.filesystem.shared": "true",
        "job.container.epoch.ms": "4000",
        "blob.store.manager.factory": "azure",
        "blob.store.azure.container": f"{unique_name}-v1"[:63],
        "azure.storage.connect": azure_connection_string,
        "task.max.batch.messages": "200",
        "job.drain-monitor.poll.interval.ms": "1000",
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
    })
    append_messages(config, 300, KEYS, commit_size=300)
    v1 = write_config(config, work_dir / "v1.yaml")
    v2_values = {**dict(config.items()), "job.id": "2", "blob.store.azure.container": f"{unique_name}-v2"[:63],
                 "job.partition.expansion": "group",
                 "stores.seen.factory": "rocksdb", "stores.seen.key.serde": "string",
                 "stores.seen.msg.serde": "json", "stores.seen.backup.factories": "blobstore"}
    v2 = write_config(Config(v2_values), work_dir / "v2.yaml")
    env = {**sparza_env(), "PYSPARK_PYTHON": python}
    feeder = SteadyInput(config, KEYS, 30, start=300)
    log = work_dir / "v1.log"
    with cluster:
        proc: subprocess.Popen[bytes] | None = None
        try:
            with log.open("w") as out:
                proc = subprocess.Popen(sparza_cmd("run", "--config", str(v1), "--master", cluster.url), env=env,
                                        stdout=out, stderr=subprocess.STDOUT, cwd=work_dir)
            feeder.start()
            eventually(lambda: proc.poll() is not None or (len(b := _batches(config)) == len(TASKS)
                                                           and min(b.values()) >= 5), 300, 1.0,
                       lambda: "v1 did not commit 5 batches per task:\n" + log.read_text()[-3000:])
            assert proc.poll() is None, log.read_text()[-3000:]
            stop = subprocess.run(sparza_cmd("savepoint", "create", "cluster-up", "--config", str(v1), "--stop",
                                             "--drain", "--timeout", "300"), env=env, capture_output=True,
                                  text=True, timeout=400, cwd=work_dir, check=False)
            total = feeder.stop()  # some of it arrived after the drain's end offsets: v2 reads it
            assert feeder.error is None, feeder.error
            assert stop.returncode == 0, stop.stdout + stop.stderr + log.read_text()[-3000:]
            assert proc.wait(120) == 0, log.read_text()[-3000:]
            assert "drained" in log.read_text()
            grow = subprocess.run(sparza_cmd("stream", "grow", "events", "--partitions", "8", "--system", "delta",
                                             "--config", str(v1)), env=env, capture_output=True, text=True,
                                  timeout=120, cwd=work_dir, check=False)
            assert grow.returncode == 0 and "4 -> 8 partitions" in grow.stdout, grow.stdout + grow.stderr
            append_messages(config, 200, KEYS, start=total, commit_size=200)
            total += 200
            result = subprocess.run(sparza_cmd("run", "--config", str(v2), "--master", cluster.url, "--once",
                                               "--from-savepoint", "cluster-up", "--savepoint-config", str(v1)),
                                    env=env, capture_output=True, text=True, timeout=600, cwd=work_dir, check=False)
            assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
            assert "started 4 task(s) from savepoint cluster-up" in result.stderr
            assert "store seen is new" in result.stderr
            assert "input partitions grew" in result.stderr and "p % 4" in result.stderr, result.stderr[-4000:]
        finally:
            feeder.stop()
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)
    expected = expected_counts(total, KEYS)
    assert counts_per_key(config) == {key: list(range(1, n + 1)) for key, n in expected.items()}
    assert set(_batches(Config(v2_values))) == set(TASKS)
