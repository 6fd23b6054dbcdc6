"""Benchmark: incremental backup and restore of a RocksDB store through the blob store (SEP-003).

Measured in one run, on Azurite (the Azure backend) and on the local backend:

1. full backup of a fresh store, then an incremental backup after changing 1% of the keys:
   bytes uploaded by the incremental one vs. the full one (goal: at most 5%);
2. restore on a new host (parallel download + fsync + CRC32 check of every file) vs.
   (a) the Azure SDK downloading the same blobs in parallel with the same thread count, nothing
       verified (the ceiling; goal: at least 80% of its speed), and
   (b) replaying the same key/values one by one into a fresh RocksDB, as a changelog restore does
       (goal: at least 10x slower than the blob restore).

Usage: ``python bench/state_backup.py --scale small|full`` (full: a store of at least 1 GiB).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

from sparza.blobstore import BlobStoreManager, LocalBlobStoreManager
from sparza.blobstore.azure import AzureBlobStoreManager
from sparza.devservers.storage import AzuriteProcess
from sparza.state.backup import StateBackup, StoreBackupManager
from sparza.state.kv import RocksDbStore

SCALES = {
    "small": {"keys": 40_000, "value": 1024},
    "full": {"keys": 1_100_000, "value": 1024},  # ~1.1 GiB of SST files (values are incompressible)
}
OPTIONS = {"compression": "none", "write.buffer.size.bytes": "64MB", "target.file.size.bytes": "64MB"}
THREADS = 4
MIB = 1 << 20


MEASURES = ('Full and incremental backup of a 1.1 GB RocksDB store to Azurite and to a local directory, and its '
            'restore on a new host, against a plain parallel download of the same blobs and a changelog-style '
            'replay of every put.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def key(i: int) -> bytes:
    return b"key-%012d" % i


def load(path: Path, keys: int, value_size: int) -> RocksDbStore:
    store = RocksDbStore(path, options=OPTIONS)
    batch = 10_000
    for start in range(0, keys, batch):
        n = min(batch, keys - start)
        blob = os.urandom(n * value_size)
        store.put_all([(key(start + i), blob[i * value_size:(i + 1) * value_size]) for i in range(n)])
    wait_for_compactions(store)
    return store


def wait_for_compactions(store: RocksDbStore) -> None:
    """Let background compactions finish, so the next checkpoint reflects only our changes."""
    store.flush()
    db = store._db
    while (db.property_int_value("rocksdb.compaction-pending") or 0) or \
            (db.property_int_value("rocksdb.num-running-compactions") or 0):
        time.sleep(0.2)


def sst_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.sst"))


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def run_backend(name: str, blob_store: BlobStoreManager, work: Path, keys: int, value_size: int,
                source: RocksDbStore, source_dir: Path, rows: list[list[object]], notes: list[str],
                ceiling: callable) -> dict[str, float]:
    backup = StateBackup(blob_store, "bench", "1", "Partition 0", threads=THREADS)
    mgr = StoreBackupManager(backup, "state", source_dir)
    m = backup.backup_metrics

    # 1. full backup, then incremental after changing 1% of the keys.
    before = m.bytes_uploaded.count
    full_id, full_s = timed(lambda: mgr.commit(source, "1", None))
    full_bytes = m.bytes_uploaded.count - before
    mgr.cleanup(full_id, "1")
    rng = random.Random(7)
    changed = rng.sample(range(keys), keys // 100)
    source.put_all([(key(i), os.urandom(value_size)) for i in changed])
    wait_for_compactions(source)
    before = m.bytes_uploaded.count
    inc_id, inc_s = timed(lambda: mgr.commit(source, "2", full_id))
    inc_bytes = m.bytes_uploaded.count - before
    mgr.cleanup(inc_id, "2")
    ratio = inc_bytes / full_bytes
    rows.append([name, "full backup (upload)", f"{full_bytes / MIB:,.0f} MiB", f"{full_s:.1f} s",
                 f"{full_bytes / MIB / full_s:,.0f} MiB/s", ""])
    rows.append([name, f"incremental backup after changing 1% of keys ({len(changed):,})",
                 f"{inc_bytes / MIB:,.1f} MiB", f"{inc_s:.1f} s", "",
                 f"{ratio:.1%} of full (goal <= 5%)"])

    # 2. restore on a new host, between two runs of the ceiling (the best ceiling run counts).
    restore_backup = StateBackup(blob_store, "bench", "1", "Partition 0", threads=THREADS, progress=False)
    index = restore_backup.read_index(inc_id)
    blob_ids = [b.blob_id for b in index.dir_index.present_blobs()]
    ceiling_runs = []
    ceiling_bytes = 0

    def run_ceiling() -> None:
        nonlocal ceiling_bytes
        ceiling_dir = work / f"{name}-ceiling"
        ceiling_dir.mkdir()
        _, seconds = timed(lambda: ceiling(blob_ids, ceiling_dir))
        ceiling_runs.append(seconds)
        ceiling_bytes = sum(p.stat().st_size for p in ceiling_dir.iterdir())
        shutil.rmtree(ceiling_dir)

    run_ceiling()
    new_host = StoreBackupManager(restore_backup, "state", work / f"{name}-host2" / "state" / "Partition_0")
    result, restore_s = timed(lambda: new_host.restore(inc_id))
    restored = result.bytes
    run_ceiling()
    ceiling_s = min(ceiling_runs)
    rows.append([name, "restore on a new host (download, fsync, CRC32 check, open-ready dir)",
                 f"{restored / MIB:,.0f} MiB", f"{restore_s:.1f} s", f"{restored / MIB / restore_s:,.0f} MiB/s",
                 f"{ceiling_s / restore_s:.0%} of the ceiling's speed (goal >= 80%)"])
    rows.append([name, f"ceiling: plain parallel download of the same blobs ({THREADS} threads, best of 2)",
                 f"{ceiling_bytes / MIB:,.0f} MiB", f"{ceiling_s:.1f} s",
                 f"{ceiling_bytes / MIB / ceiling_s:,.0f} MiB/s", "baseline"])
    # The restored store opens and holds the data.
    check = RocksDbStore(new_host.store_dir, read_only=True)
    probe = changed[0]
    assert check.get(key(probe)) == source.get(key(probe)), "restored store differs"
    check.close()
    backup.close()
    restore_backup.close()
    shutil.rmtree(work / f"{name}-host2")
    return {"restore_s": restore_s, "ratio": ratio}


def replay_changelog(source: RocksDbStore, target_dir: Path) -> tuple[int, float]:
    """Changelog-style restore: every key/value put one at a time into a fresh store."""
    items = list(source._iter_raw(None, None))  # the "changelog" in memory: only the puts are timed
    target = RocksDbStore(target_dir, options=OPTIONS)
    start = time.perf_counter()
    put = target._db.put
    for k, v in items:
        put(k, v)
    target.flush()
    elapsed = time.perf_counter() - start
    target.close()
    return len(items), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--work-dir", default=None, help="where to put the stores (default: a temp dir)")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    work = Path(tempfile.mkdtemp(prefix="sparza-bench-state-", dir=args.work_dir))
    azurite = AzuriteProcess(work / "azurite")
    rows: list[list[object]] = []
    notes: list[str] = []
    try:
        t0 = time.perf_counter()
        source_dir = work / "host1" / "state" / "Partition_0"
        source, load_s = timed(lambda: load(source_dir, scale["keys"], scale["value"]))
        size = sst_bytes(source_dir)
        print(f"loaded {scale['keys']:,} keys, {size / MIB:,.0f} MiB of SST files in {load_s:.1f} s", flush=True)

        azurite.start()
        azure = AzureBlobStoreManager("bench-state", {"azure.storage.connect": azurite.connection_string},
                                      max_concurrency=4)

        def azure_ceiling(blob_ids: list[str], dest: Path) -> None:
            with ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(lambda i_b: azure.download_to_file(i_b[1], dest / f"f{i_b[0]}"),
                              enumerate(blob_ids)))

        az = run_backend("azure (Azurite)", azure, work, scale["keys"], scale["value"], source, source_dir, rows,
                         notes, azure_ceiling)
        print("azure done", flush=True)
        azure.close()
        azurite.stop()
        shutil.rmtree(work / "azurite", ignore_errors=True)

        # Local backend: a fresh copy of the history, from the same store.
        for p in source_dir.parent.glob("Partition_0-*"):
            shutil.rmtree(p)
        local = LocalBlobStoreManager(work / "local-blobs")

        def local_ceiling(blob_ids: list[str], dest: Path) -> None:
            with ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(lambda i_b: shutil.copyfile(local.root / i_b[1], dest / f"f{i_b[0]}"),
                              enumerate(blob_ids)))

        lo = run_backend("local dir", local, work, scale["keys"], scale["value"], source, source_dir, rows,
                         notes, local_ceiling)
        print("local done", flush=True)

        entries, replay_s = replay_changelog(source, work / "replay")
        rows.append(["-", f"changelog-style replay: {entries:,} puts one by one into a fresh RocksDB",
                     f"{size / MIB:,.0f} MiB", f"{replay_s:.1f} s", f"{entries / replay_s:,.0f} puts/s",
                     f"blob restore is {replay_s / az['restore_s']:.1f}x (Azurite) / "
                     f"{replay_s / lo['restore_s']:.1f}x (local) faster (goal >= 10x)"])
        source.close()
        total = time.perf_counter() - t0
        body = (f"Store: {scale['keys']:,} keys x {scale['value']} B random values, {size / MIB:,.0f} MiB of SST "
                f"files (compression off), {THREADS} transfer threads, Azurite on the same 2-core host.\n\n"
                + _report.table(["backend", "what", "bytes", "time", "rate", "vs baseline"], rows)
                + f"\n\nThe changelog baseline times only the puts (the key/values are already in memory), so it "
                  f"is a lower bound for a real changelog restore, which also reads them from a topic. "
                  f"Whole run: {total:.0f} s.\n")
        _report.record("state_backup", f"State backup and restore (SEP-003), scale {args.scale}",
                       f".venv/bin/python bench/state_backup.py --scale {args.scale}", body,
                       measures=MEASURES)
    finally:
        azurite.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
