"""Savepoints and upgrades through ``sparza savepoint`` and ``sparza run --from-savepoint``, on Kafka and Delta
input: stop v1 of a keyed count with a savepoint while it runs, start v2 (a new job.id, an added store, a removed
one, a new field with a default in the Avro value of its count store, another blob store) from it, and check
against counts taken from what was produced: every key's counts over v1's and v2's output are exactly 1..n
(nothing lost, nothing repeated), v2's added store starts empty for every key, the new field reads its default
for v1's keys and 2 for keys v2 first saw, the upsert table ends at the totals, and ``sparza gc`` keeps the
savepoint until it is deleted."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.ops.conftest import REPO, TASKS, Job, produce, read_counts, read_table, sparza, sparza_here, upcoming
from tests.runtime.helpers import sparza_cmd, sparza_env, task_checkpoints, write_config

from sparza.config import Config
from sparza.testing import eventually

pytestmark = pytest.mark.slow

KEYS = 29
V1 = {"type": "record", "name": "Count", "namespace": "tests.ops", "fields": [{"name": "count", "type": "long"}]}
V2 = {"type": "record", "name": "Count", "namespace": "tests.ops",
      "fields": [{"name": "count", "type": "long"}, {"name": "since", "type": "int", "default": 1}]}
LEGACY = {"stores.legacy.factory": "rocksdb", "stores.legacy.key.serde": "string", "stores.legacy.msg.serde": "json",
          "stores.legacy.backup.factories": "blobstore"}
"""A store v1 has (unused by its code) and v2 removes."""


def totals(job: Job) -> dict[str, int]:
    out: dict[str, int] = {}
    for messages in job.produced.partitions.values():
        for key, _ in messages:
            out[key] = out.get(key, 0) + 1
    return out


def caught_up(job: Job) -> bool:
    """Every task's checkpoint at its partition's end, read in this process (what ``sparza checkpoints show`` prints;
    a subprocess per sample took a second of CPU from the job it waits for)."""
    try:
        checkpoints = task_checkpoints(job.config)
    except Exception:  # a checkpoint replaced while read: the next sample has it
        return False
    ends = upcoming(job.config, job.system, job.events)
    return len(checkpoints) == TASKS and all(
        f"Partition {p}" in checkpoints
        and checkpoints[f"Partition {p}"].offsets.get(f"{job.system}.{job.events}#{p}") == end
        for p, end in ends.items())


@pytest.mark.parametrize("system", ["kafka", "delta"])
def test_stop_with_savepoint_then_upgrade_loses_and_repeats_nothing(ops_job: Callable[..., Job], system: str,
                                                                     work_dir: Path) -> None:
    v1 = ops_job(system, **{"task.commit.ms": "0", "ops_test.record.version": "1",
                            "stores.counts.msg.serde": "avro", "stores.counts.msg.schema": json.dumps(V1),
                            **LEGACY})
    produce(v1.config, system, v1.events, v1.produced, 500, KEYS, seed=3)
    log = (work_dir / "v1.log").open("w")
    proc = subprocess.Popen(sparza_cmd("run", "--config", str(v1.path)), cwd=REPO, env=sparza_env(), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        eventually(lambda: caught_up(v1) or proc.poll() is not None, 300, 0.5, "v1 did not catch up")
        assert proc.poll() is None, (work_dir / "v1.log").read_text()[-3000:]
        produce(v1.config, system, v1.events, v1.produced, 300, KEYS, seed=4, start=500)  # in flight at the stop
        stop = sparza(["savepoint", "create", "upgrade-1", "--config", str(v1.path), "--stop"])
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert proc.wait(120) == 0, (work_dir / "v1.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    at_savepoint = {k: v[-1] for k, v in read_counts(v1.config, "delta", "counts").items()}
    listed = json.loads(sparza_here(["savepoint", "list", "--config", str(v1.path), "--json"]).stdout)
    assert [(s["name"], s["tasks"], s["snapshots"]) for s in listed] == [("upgrade-1", TASKS, 2 * TASKS)]

    # v1's checkpoints go on without it (its blob store's gc, far in the future, keeps the savepoint).
    gc = sparza(["gc", "--config", str(v1.path), "--now-ms", str(2**62)])
    assert gc.returncode == 0, gc.stderr

    produce(v1.config, system, v1.events, v1.produced, 400, KEYS + 3, seed=5, start=800)  # 3 keys v2 first sees
    v2_values = {**{k: v for k, v in v1.config.items() if k not in LEGACY}, "job.id": "2",
                 "ops_test.seen.store": "seen",
                 "ops_test.record.version": "2", "stores.counts.msg.schema": json.dumps(V2),
                 "stores.seen.factory": "rocksdb", "stores.seen.key.serde": "string",
                 "stores.seen.msg.serde": "json", "stores.seen.backup.factories": "blobstore",
                 "blob.store.local.root": str(work_dir / "blobstore-v2")}
    v2_path = write_config(Config(v2_values), work_dir / "v2.yaml")
    first = v1.run("--from-savepoint", "upgrade-1", "--savepoint-config", str(v1.path), config=v2_path)
    assert "started 4 task(s) from savepoint upgrade-1" in first.stderr
    assert "store seen is new" in first.stderr
    assert "store legacy of the savepoint is not in the job: dropped" in first.stderr

    every = read_counts(v1.config, "delta", "counts")
    expected = totals(v1)
    assert {k: sorted(v) for k, v in every.items()} == {k: list(range(1, n + 1)) for k, n in expected.items()}
    assert {k: sorted(v) == v for k, v in every.items()} == {k: True for k in expected}
    assert read_table(v1.config, "count_table") == expected
    seen: dict[str, list[tuple[int, int, int]]] = {}
    for record in _records(v1.config):
        if "seen" in record:
            seen.setdefault(str(record["key"]), []).append((int(record["count"]), int(record["seen"]),
                                                            int(record["since"])))
    assert set(seen) == set(expected) and len(expected) == KEYS + 3
    for key, triples in seen.items():
        base = at_savepoint.get(key, 0)
        since = 1 if key in at_savepoint else 2  # the new field: its default on v1's values, 2 for keys v2 saw first
        assert triples == [(base + i, i, since) for i in range(1, len(triples) + 1)], key

    # Given again at a restart, --from-savepoint continues from v2's own checkpoints.
    produce(v1.config, system, v1.events, v1.produced, 100, KEYS, seed=6, start=1200)
    again = v1.run("--from-savepoint", "upgrade-1", "--savepoint-config", str(v1.path), config=v2_path)
    assert "continuing from its own checkpoints" in again.stderr
    every = read_counts(v1.config, "delta", "counts")
    assert {k: sorted(v) for k, v in every.items()} == {k: list(range(1, n + 1)) for k, n in totals(v1).items()}
    history = json.loads(sparza_here(["checkpoints", "show", "--config", str(v2_path), "--history", "--json"]).stdout)
    assert [op["kind"] for op in history] == ["savepoint-restore"]

    deleted = sparza(["savepoint", "delete", "upgrade-1", "--config", str(v1.path)])
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(sparza_here(["savepoint", "list", "--config", str(v1.path), "--json"]).stdout) == []
    purged = sparza(["gc", "--config", str(v1.path), "--now-ms", str(2**62)])
    assert "_savepoint-upgrade-1/" in purged.stdout


def _records(config: Config) -> list[dict[str, int | str]]:
    from sparza.streams import SystemStreamPartition
    from sparza.systems import get_system_factory

    admin = get_system_factory(config, "delta").get_admin("delta", config)
    meta = admin.get_system_stream_metadata({"counts"})["counts"]
    consumer = get_system_factory(config, "delta").get_consumer("delta", config)
    consumer.start()
    out = []
    for p, pm in sorted(meta.partitions.items()):
        if pm.oldest is not None:
            for env in consumer.read(SystemStreamPartition("delta", "counts", p), pm.oldest, pm.upcoming,
                                     include_control=False):
                out.append(json.loads(env.message))
    consumer.stop()
    return out
