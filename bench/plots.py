"""Plots for docs/benchmarks.md, where a picture says more than a table (PNG, matplotlib).

1. Blob producer throughput against block size (``maxFlushThresholdSize``) for each thread count
   (``threadPoolCount``), with the plain SDK upload of the same bytes as the baseline line.
2. Restore time against store size: blob-store restore (local dir and Azurite) against
   changelog-style replay (every key/value put one by one into a fresh RocksDB).
3. Failover time distribution of Azure coordination (kill -9 of the leader / of a worker).

Each plot's data is measured by this script with the benchmarks' own helpers
(``bench/azureblob.py``, ``bench/state_backup.py``, ``bench/coordination.py``), saved next to the
PNG as JSON, and the section ``plots`` of docs/benchmarks.md embeds the pictures.

Usage: ``python bench/plots.py --scale small|full [--only blob restore failover]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

SCALES: dict[str, dict[str, Any]] = {
    "small": {"blob_mib": 4, "blocks_kib": [256, 1024, 4096], "threads": [1, 2, 4],
              "restore_keys": [5_000, 20_000, 40_000], "kills": 1},
    "full": {"blob_mib": 32, "blocks_kib": [256, 1024, 4096, 10240], "threads": [1, 2, 4, 8],
             "restore_keys": [50_000, 200_000, 500_000], "kills": 10},
}
MIB = 1 << 20


MEASURES = ("The blob producer's throughput, restore against replay, and failover times over a range of sizes, "
            'drawn as plots (the data is kept next to each image as JSON).')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display on CI or servers
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, name: str, data: dict[str, Any]) -> str:
    out = _report.SECTIONS
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)
    (out / f"{name}.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return f"bench/{name}.png"


# --- 1. blob producer -------------------------------------------------------------------------
def blob_throughput(scale: dict[str, Any], work: Path) -> tuple[str, str]:
    """MiB/s of one producer stream for each block size and thread count, against Azurite."""
    import azureblob as bench_blob

    from sparza.devservers.storage import AzuriteProcess

    n = scale["blob_mib"] * 1024  # ~1 KiB records
    recs = bench_blob.records(n)
    storage = AzuriteProcess(work / "azurite-blob")
    storage.start()
    results: dict[str, dict[str, float]] = {}
    sdk: dict[str, float] = {}
    try:
        account = storage.account
        data = bench_blob.avro_file_bytes(recs)
        for threads in scale["threads"]:
            row: dict[str, float] = {}
            for kib in scale["blocks_kib"]:
                container = f"plot-t{threads}-b{kib}"
                bench_blob.THREADS = threads
                elapsed, sent = bench_blob.run_producer(account, container, recs, 1,
                                                        maxFlushThresholdSize=str(kib * 1024),
                                                        threadPoolCount=str(threads))
                row[str(kib)] = sent / MIB / elapsed
            results[str(threads)] = row
            client = account.blob_service_client()
            container = f"plot-sdk-t{threads}"
            if not client.get_container_client(container).exists():
                client.create_container(container)
            bench_blob.THREADS = threads
            sdk[str(threads)] = len(data) / MIB / bench_blob.run_sdk_ceiling(account, container, data)
    finally:
        storage.stop()
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    for i, (threads, row) in enumerate(results.items()):
        color = f"C{i}"
        ax.plot([int(k) / 1024 for k in row], list(row.values()), marker="o", color=color,
                label=f"producer, threadPoolCount={threads}")
        ax.axhline(sdk[threads], color=color, linestyle=":", linewidth=1,
                   label=f"SDK upload_blob, max_concurrency={threads} (baseline)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("block size (maxFlushThresholdSize), MiB")
    ax.set_ylabel("MiB/s (Azurite on the same host)")
    ax.set_title(f"Blob producer: {scale['blob_mib']} MiB of 1 KiB Avro records, one stream")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: the lines stay visible
    path = _save(fig, "plot-blob-throughput", {"producer_mib_s": results, "sdk_mib_s": sdk,
                                                "records": n})
    best = max((v, t, k) for t, row in results.items() for k, v in row.items())
    note = (f"Best producer figure {best[0]:.1f} MiB/s (threadPoolCount={best[1]}, {int(best[2]) / 1024:g} MiB "
            f"blocks) against the SDK's {sdk[best[1]]:.1f} MiB/s with the same concurrency.")
    return path, note


# --- 2. restore vs replay ---------------------------------------------------------------------
def restore_vs_replay(scale: dict[str, Any], work: Path) -> tuple[str, str]:
    """Seconds to restore a store of each size from the blob store, and to replay it as a changelog."""
    import state_backup as bench_state

    from sparza.blobstore import LocalBlobStoreManager
    from sparza.blobstore.azure import AzureBlobStoreManager
    from sparza.config import Config
    from sparza.devservers.storage import AzuriteProcess
    from sparza.state.backup import StateBackup, StoreBackupManager

    storage = AzuriteProcess(work / "azurite-state")
    storage.start()
    rows: list[dict[str, float]] = []
    try:
        backends = {
            "local": LocalBlobStoreManager(work / "blobstore"),
            "azurite": AzureBlobStoreManager("plot-restore", Config({
                "azure.storage.connect": storage.connection_string})),
        }
        for keys in scale["restore_keys"]:
            src_dir = work / f"src-{keys}"
            source = bench_state.load(src_dir, keys, 1024)
            row: dict[str, float] = {"keys": keys, "mib": bench_state.sst_bytes(src_dir) / MIB}
            for name, blob_store in backends.items():
                backup = StateBackup(blob_store, "plot", str(keys), "Partition 0", threads=bench_state.THREADS,
                                     progress=False)
                mgr = StoreBackupManager(backup, "state", src_dir)
                snapshot = mgr.commit(source, "1", None)
                mgr.cleanup(snapshot, "1")
                host = StoreBackupManager(backup, "state", work / f"host-{name}-{keys}" / "state" / "Partition_0")
                started = time.perf_counter()
                host.restore(snapshot)
                row[f"restore_{name}_s"] = time.perf_counter() - started
                backup.close()
                shutil.rmtree(work / f"host-{name}-{keys}")
            _, row["replay_s"] = bench_state.replay_changelog(source, work / f"replay-{keys}")
            source.close()
            shutil.rmtree(src_dir)
            shutil.rmtree(work / f"replay-{keys}")
            rows.append(row)
            print(f"restore vs replay: {row}", flush=True)
    finally:
        storage.stop()
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    sizes = [r["mib"] for r in rows]
    ax.plot(sizes, [r["restore_local_s"] for r in rows], marker="o", label="blob restore, local dir")
    ax.plot(sizes, [r["restore_azurite_s"] for r in rows], marker="o", label="blob restore, Azurite")
    ax.plot(sizes, [r["replay_s"] for r in rows], marker="s", linestyle="--",
            label="changelog-style replay (baseline)")
    ax.set_xlabel("store size, MiB of SST files (1 KiB values)")
    ax.set_ylabel("seconds")
    ax.set_title("Restore time against store size")
    ax.legend(fontsize=8)
    path = _save(fig, "plot-restore", {"rows": rows})
    last = rows[-1]
    note = (f"At {last['mib']:.0f} MiB: restore {last['restore_local_s']:.1f} s (local) / "
            f"{last['restore_azurite_s']:.1f} s (Azurite) against {last['replay_s']:.1f} s of replay.")
    return path, note


# --- 3. failover ------------------------------------------------------------------------------
def failover(scale: dict[str, Any], work: Path) -> tuple[str, str]:
    """Failover seconds per kill of the leader and of a worker, default settings."""
    import coordination as bench_coord
    from sparza.devservers.storage import AzuriteProcess

    storage = AzuriteProcess(work / "azurite-coord")
    storage.start()
    try:
        kills = {"leader": scale["kills"], "worker": scale["kills"]}
        times = bench_coord.run_rounds(storage, work, "plotfailover", {}, kills, 120)
    finally:
        storage.stop()
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    roles = ["leader", "worker"]
    data = [times[r] for r in roles]
    ax.boxplot(data, showfliers=False)
    ax.set_xticks([1, 2], [f"kill -9 {r}" for r in roles])
    for i, values in enumerate(data, start=1):
        ax.scatter([i] * len(values), values, alpha=0.6, zorder=3)
    for i, role in enumerate(roles, start=1):
        ax.hlines(bench_coord.GOAL[role], i - 0.3, i + 0.3, colors="green", linestyles="--")
    ax.set_ylabel("seconds until every task is owned again")
    ax.set_title("Failover time (3 processors, 8 tasks; dashed: goal)")
    path = _save(fig, "plot-failover", {"seconds": times})
    note = ", ".join(f"{r}: {len(times[r])} kills, {min(times[r]):.1f}-{max(times[r]):.1f} s" for r in roles
                     if times[r])
    return path, note


PLOTS = {"blob": blob_throughput, "restore": restore_vs_replay, "failover": failover}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    parser.add_argument("--only", nargs="*", choices=sorted(PLOTS), help="make only these plots")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    parts = [f"Measured by this script at scale `{args.scale}` with the benchmarks' own helpers; the data is "
             "saved next to each PNG as JSON."]
    with tempfile.TemporaryDirectory(prefix="sparza-plots-") as tmp:
        for name in args.only or list(PLOTS):
            work = Path(tmp) / name
            work.mkdir()
            started = time.monotonic()
            path, note = PLOTS[name](scale, work)
            parts.append(f"![{name}]({path})\n\n{note} ({time.monotonic() - started:.0f} s)")
    command = f"python bench/plots.py --scale {args.scale}" + (f" --only {' '.join(args.only)}" if args.only else "")
    _report.record("plots", "Plots: blob producer throughput, restore vs replay, failover", command,
                   "\n\n".join(parts), measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
