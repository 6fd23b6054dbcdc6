"""Adjunct data stores: bootstrap rate, lookup rate, and disk used by a broadcast store per host.

1. *Bootstrap rate*: records of a CDC stream (one Delta partition, 100-byte JSON values) applied
   into a partitioned adjunct store by ``TaskAdjunctManager`` (read from Delta, extract, dedup by
   offset, put into RocksDB, then commit: flush, checkpoint, snapshot upload to a local blob store),
   and the apply step alone on envelopes already in memory; against bulk-loading the same key/value
   bytes into RocksDB directly with ``put_all`` in chunks (the ceiling).
2. *Lookup rate*: random ``get`` calls through the task's read-only view against ``get`` on the
   RocksDB store directly.
3. *Broadcast disk use*: a broadcast store read by 4 tasks on one host (one host-local copy) against
   a copy per task (the same snapshot restored into 4 task directories).

    .venv/bin/python bench/adjunct.py --scale small|full
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

from sparza.blobstore import LocalBlobStoreManager
from sparza.config import Config
from sparza.state.adjunct import TaskAdjunctManager, directory_size_bytes
from sparza.state.backup import StateBackup
from sparza.state.kv import RocksDbStore
from sparza.streams import SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemConsumer, DeltaSystemProducer

SCALES = {
    "small": {"records": 20_000, "lookups": 20_000, "broadcast": 20_000},
    "full": {"records": 1_000_000, "lookups": 500_000, "broadcast": 300_000},
}
VALUE_SIZE = 100
TASKS = [f"Partition {i}" for i in range(4)]


def _value(i: int) -> bytes:
    body = json.dumps({"id": i, "name": f"customer-{i}", "pad": ""}).encode()
    return body[:-2] + b"x" * max(0, VALUE_SIZE - len(body)) + b'"}'


def _write_stream(config: Config, stream: str, partitions: int, n: int) -> None:
    DeltaSystemAdmin("d", config).create_stream(StreamSpec(stream, partitions))
    producer = DeltaSystemProducer("d", config)
    producer.register("bench")
    producer.start()
    for start in range(0, n, 100_000):
        import pyarrow as pa

        count = min(100_000, n - start)
        keys = [f"c{i:09d}".encode() for i in range(start, start + count)]
        values = [_value(i) for i in range(start, start + count)]
        table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                          "timestamp": pa.array([0] * count, pa.int64())})
        for p in range(partitions):
            rows = table if partitions == 1 else table.slice(0, 0)
            if partitions > 1:
                import pyarrow.compute as pc

                mask = pc.equal(pc.bit_wise_and(pa.array(range(start, start + count)), partitions - 1), p)
                rows = table.filter(mask)
            producer.send_batch("bench", stream, p, rows)
        producer.flush("bench")
    producer.stop()


def _config(root: Path, **extra: str) -> Config:
    return Config({"job.name": "bench", "job.id": "1", "systems.d.samza.factory": "delta",
                   "systems.d.delta.root": str(root / "streams"), **extra})


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}" if seconds > 0 else "n/a"


def bench_bootstrap(root: Path, n: int, blob_store: LocalBlobStoreManager) -> tuple[list[list[object]], Config, dict]:
    """Bootstrap ``n`` records; returns the table rows, the config and the checkpoint entry."""
    config = _config(root, **{"task.inputs": "d.orders,d.customers", "stores.customers.adstore.input": "d.customers",
                              "stores.customers.key.serde": "string", "stores.customers.msg.serde": "json",
                              "stores.customers.backup.factories": "blobstore",
                              "systems.d.streams.customers.samza.bootstrap": "true"})
    _write_stream(config, "customers", 1, n)
    DeltaSystemAdmin("d", config).create_stream(StreamSpec("orders", 1))
    ssp = SystemStreamPartition("d", "customers", 0)
    consumer = DeltaSystemConsumer("d", config)

    # Adjunct manager, end to end: read from Delta, apply, then commit with snapshot upload.
    manager = TaskAdjunctManager("Partition 0", config, root / "host-a", blob_store, "bench", "1")
    manager.restore(None)
    t0 = time.perf_counter()
    for env in consumer.read(ssp, None):
        manager.on_envelope(env)
    t_read_apply = time.perf_counter() - t0
    t1 = time.perf_counter()
    entry = manager.commit(1)
    t_commit = time.perf_counter() - t1
    assert manager.bootstrap_complete()
    manager.close()

    # Apply only, envelopes already in memory (the cost inside the task's batch loop).
    envelopes = list(consumer.read(ssp, None))
    other = TaskAdjunctManager("Partition 1", config, root / "host-b", blob_store, "bench", "1")
    other.restore(None)
    t0 = time.perf_counter()
    for env in envelopes:
        other.on_envelope(env)
    t_apply = time.perf_counter() - t0
    other.close()

    # Ceiling: the same key/value bytes straight into RocksDB, 10k-entry put_all batches.
    pairs = [(e.key, e.message) for e in envelopes]
    del envelopes
    direct = RocksDbStore(root / "direct" / "store")
    t0 = time.perf_counter()
    for i in range(0, len(pairs), 10_000):
        direct.put_all(pairs[i:i + 10_000])
    direct.flush()
    t_direct = time.perf_counter() - t0
    direct.close()
    total = t_read_apply + t_commit
    rows: list[list[object]] = [
        ["adjunct manager: Delta read + apply + commit (flush, checkpoint, snapshot upload)", n, f"{total:.2f}",
         _rate(n, total)],
        ["adjunct manager: Delta read + apply", n, f"{t_read_apply:.2f}", _rate(n, t_read_apply)],
        ["adjunct manager: apply only (envelopes in memory)", n, f"{t_apply:.2f}", _rate(n, t_apply)],
        ["**baseline**: RocksDB put_all of the same bytes (ceiling)", n, f"{t_direct:.2f}", _rate(n, t_direct)],
    ]
    return rows, config, entry


def bench_lookups(root: Path, n: int, lookups: int, config: Config, entry: dict,
                  blob_store: LocalBlobStoreManager) -> list[list[object]]:
    """Random gets through a task's read-only view against the RocksDB store directly."""
    from sparza.serde import JsonSerde, StringSerde

    manager = TaskAdjunctManager("Partition 0", config, root / "host-a", blob_store, "bench", "1")
    manager.restore({"stores": entry["stores"]})
    view = manager.get_store("customers")
    rng = random.Random(7)
    keys = [f"c{rng.randrange(n):09d}" for _ in range(lookups)]
    path = root / "host-a" / "customers" / "Partition_0"
    direct = RocksDbStore(path, StringSerde(), JsonSerde(), read_only=True)
    for k in keys[:2000]:  # warm both the same way (block cache, first-call costs)
        view.get(k)
        direct.get(k)
    # Interleaved in chunks, so background work (RocksDB compaction after the bulk load) weighs on
    # both paths alike.
    t_view = t_direct = 0.0
    hits = direct_hits = 0
    for i in range(0, len(keys), 10_000):
        chunk = keys[i:i + 10_000]
        t0 = time.perf_counter()
        hits += sum(1 for k in chunk if view.get(k) is not None)
        t1 = time.perf_counter()
        direct_hits += sum(1 for k in chunk if direct.get(k) is not None)
        t_direct += time.perf_counter() - t1
        t_view += t1 - t0
    direct.close()
    manager.close()
    assert hits == direct_hits == lookups
    return [["task view `get` (read-only adjunct view)", lookups, f"{t_view:.2f}", _rate(lookups, t_view)],
            ["**baseline**: RocksDbStore `get` direct", lookups, f"{t_direct:.2f}", _rate(lookups, t_direct)]]


def bench_broadcast_disk(root: Path, n: int, blob_store: LocalBlobStoreManager) -> list[list[object]]:
    """Disk used on one host by a broadcast store read by 4 tasks, against one copy per task."""
    config = _config(root, **{"task.inputs": "d.events", "task.broadcast.inputs": "d.rates#[0-1]",
                              "stores.rates.adstore.input": "d.rates",
                              "stores.rates.key.serde": "string", "stores.rates.msg.serde": "json"})
    _write_stream(config, "rates", 2, n)
    DeltaSystemAdmin("d", config).create_stream(StreamSpec("events", 4))
    consumer = DeltaSystemConsumer("d", config)
    builder = TaskAdjunctManager("Partition 0", config, root / "builder-host", blob_store, "bench", "1")
    builder.restore(None)
    for p in (0, 1):
        for env in consumer.read(SystemStreamPartition("d", "rates", p), None):
            builder.on_envelope(env)
    builder.commit(1)
    builder.close()

    host = root / "shared-host"
    readers = []
    opened = []
    for task in TASKS:
        reader = TaskAdjunctManager(task, config, host, blob_store, "bench", "1")
        reader.restore(None)
        reader.begin_batch(2)
        t0 = time.perf_counter()
        assert reader.get_store("rates").get("c000000001") is not None
        opened.append(time.perf_counter() - t0)
        readers.append(reader)
    shared = directory_size_bytes(host / "_container")
    snapshot = readers[0].manager("rates").publication.snapshot  # type: ignore[attr-defined]
    for reader in readers:
        reader.close()

    per_task_root = root / "per-task-host"
    backup = StateBackup(blob_store, "bench", "1", "Partition 0", progress=False)
    t0 = time.perf_counter()
    for task in TASKS:
        backup.restore(snapshot, per_task_root / task.replace(" ", "_"))
    t_copies = time.perf_counter() - t0
    backup.close()
    per_task = directory_size_bytes(per_task_root)
    mib = 1 << 20
    return [["broadcast store, 4 tasks, one host-local copy", n, f"{shared / mib:.1f}",
             f"first task {opened[0] * 1000:.0f} ms (download), others {max(opened[1:]) * 1000:.0f} ms max"],
            ["**baseline**: one copy per task (4 restores)", n, f"{per_task / mib:.1f}",
             f"{t_copies * 1000:.0f} ms for 4 restores"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    args = parser.parse_args()
    sizes = SCALES[args.scale]
    root = Path(tempfile.mkdtemp(prefix="sparza-bench-adjunct-"))
    try:
        blob_store = LocalBlobStoreManager(root / "blobstore", fsync=False)
        boot, config, entry = bench_bootstrap(root, sizes["records"], blob_store)
        look = bench_lookups(root, sizes["records"], sizes["lookups"], config, entry, blob_store)
        disk = bench_broadcast_disk(root, sizes["broadcast"], blob_store)
        blob_store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    body = "\n\n".join([
        f"Values of {VALUE_SIZE} bytes (JSON), keys `c000000042`; local blob store on the same disk.",
        "**Bootstrap rate** (records per second into the store)\n\n"
        + _report.table(["path", "records", "seconds", "records/s"], boot),
        "**Lookup rate** from a task (random keys, all present)\n\n"
        + _report.table(["path", "lookups", "seconds", "lookups/s"], look),
        "**Broadcast store disk use** on one host with 4 tasks\n\n"
        + _report.table(["layout", "records", "MiB on disk", "open time"], disk),
    ])
    _report.record("adjunct", "Adjunct data stores (SEP-002)", f"python bench/adjunct.py --scale {args.scale}", body)


if __name__ == "__main__":
    main()
