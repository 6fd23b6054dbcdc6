"""Delta stream throughput against plain Parquet files written and read with pyarrow (the ceiling).

Writes the same rows (8 partitions, 100-byte and 1-KiB values) three ways, one commit per batch:
the producer's per-message ``send`` path (what a task does), its Arrow ``send_batch`` path (what a
Spark ``mapInArrow`` task can do), and plain ``pyarrow.parquet.write_table`` of one file per
partition per batch (no Delta log, no commit: the ceiling). Then reads every partition back through
``DeltaSystemConsumer.read_arrow`` (and as envelopes) against ``pyarrow.parquet.read_table`` of the
same files in the same order. A last case reads a stream of many small commits.

    .venv/bin/python bench/streams.py --scale small|full
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemConsumer, DeltaSystemProducer

PARTITIONS = 8
SCALES = {  # value size -> (messages, messages per commit); small commits: (commits, messages each)
    "small": {"sizes": {100: (40_000, 5_000), 1024: (10_000, 2_500)}, "small_commits": (100, 50)},
    "full": {"sizes": {100: (1_000_000, 50_000), 1024: (250_000, 25_000)}, "small_commits": (1_000, 100)},
}


MEASURES = ('Writing and reading Delta streams through the producer and consumer, against writing and reading the '
            'same per-partition Parquet files with pyarrow and no Delta log (the ceiling).')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def _data(n: int, size: int, per_batch: int) -> list[list[tuple[int, pa.Table]]]:
    """Batches of per-partition Arrow tables (key, value, timestamp); random values do not compress."""
    batches = []
    for start in range(0, n, per_batch):
        count = min(per_batch, n - start)
        blob = os.urandom(count * size)
        values = pa.array([blob[i * size:(i + 1) * size] for i in range(count)], pa.binary())
        keys = pa.array([f"key-{start + i:09d}".encode() for i in range(count)], pa.binary())
        ts = pa.array(range(start, start + count), pa.int64())
        parts = pa.array([(start + i) % PARTITIONS for i in range(count)], pa.int32())
        table = pa.table({"key": keys, "value": values, "timestamp": ts, "p": parts})
        batch = []
        for p in range(PARTITIONS):
            rows = table.filter(pa.compute.equal(table.column("p"), p)).drop_columns(["p"])
            batch.append((p, rows))
        batches.append(batch)
    return batches


def _payload(batches: list[list[tuple[int, pa.Table]]]) -> tuple[int, int]:
    rows = sum(t.num_rows for b in batches for _, t in b)
    size = sum(t.column("key").nbytes + t.column("value").nbytes for b in batches for _, t in b)
    return rows, size


def _config(root: Path) -> Config:
    return Config({"systems.d.samza.factory": "delta", "systems.d.delta.root": str(root)})


def _write_parquet_batch(root: Path, b: int, batch: list[tuple[int, pa.Table]], files: list[list[str]]) -> None:
    for p, rows in batch:
        directory = root / f"partition={p}"
        directory.mkdir(parents=True, exist_ok=True)
        path = str(directory / f"{b:06d}.parquet")
        pq.write_table(rows, path, compression="snappy")
        files[p].append(path)


def _producer(config: Config, stream: str) -> DeltaSystemProducer:
    DeltaSystemAdmin("d", config).create_stream(StreamSpec(stream, PARTITIONS))
    producer = DeltaSystemProducer("d", config)
    producer.register("bench")
    return producer


def write_all(root: Path, config: Config, tag: str, batches: list[list[tuple[int, pa.Table]]]
              ) -> tuple[dict[str, float], list[list[str]]]:
    """Write every batch three ways, interleaved batch by batch so all three see the same machine load."""
    files: list[list[str]] = [[] for _ in range(PARTITIONS)]
    send_p, arrow_p = _producer(config, f"send{tag}"), _producer(config, f"arrow{tag}")
    target = SystemStream("d", f"send{tag}")
    times = {"parquet": 0.0, "send": 0.0, "arrow": 0.0}
    for b, batch in enumerate(batches):
        # per-message input prepared outside the timed region, as a task would hold it
        py = [(p, rows.column("key").to_pylist(), rows.column("value").to_pylist(),
               rows.column("timestamp").to_pylist()) for p, rows in batch]
        t0 = time.perf_counter()
        _write_parquet_batch(root, b, batch, files)
        t1 = time.perf_counter()
        for p, keys, values, stamps in py:
            for key, value, ts in zip(keys, values, stamps, strict=True):
                send_p.send("bench", OutgoingMessageEnvelope(target, value, key=key, partition=p, timestamp=ts))
        send_p.flush("bench", transaction=("bench", b))
        t2 = time.perf_counter()
        for p, rows in batch:
            arrow_p.send_batch("bench", f"arrow{tag}", p, rows)
        arrow_p.flush("bench", transaction=("bench", b))
        t3 = time.perf_counter()
        times["parquet"] += t1 - t0
        times["send"] += t2 - t1
        times["arrow"] += t3 - t2
    return times, files


def _fresh_process_cache() -> None:
    # Reads are measured cold: parsed commits are otherwise cached per process.
    from sparza.systems.delta import log

    log._CACHE._items.clear()


def read_all(config: Config, stream: str, files: list[list[str]], rows: int, rounds: int = 3) -> dict[str, float]:
    """Best of ``rounds`` of reading every partition three ways, interleaved partition by partition."""
    best = {"parquet": float("inf"), "arrow": float("inf"), "envelopes": float("inf")}
    for _ in range(rounds):
        consumer = DeltaSystemConsumer("d", config)
        _fresh_process_cache()
        times = {"parquet": 0.0, "arrow": 0.0, "envelopes": 0.0}
        counts = {"parquet": 0, "arrow": 0, "envelopes": 0}
        for p in range(PARTITIONS):
            ssp = SystemStreamPartition("d", stream, p)
            t0 = time.perf_counter()
            counts["parquet"] += sum(pq.ParquetFile(path).read().num_rows for path in files[p])
            t1 = time.perf_counter()
            counts["arrow"] += sum(b.num_rows for b in consumer.read_arrow(ssp, "0:0"))
            t2 = time.perf_counter()
            counts["envelopes"] += sum(1 for _ in consumer.read(ssp, "0:0"))
            t3 = time.perf_counter()
            times["parquet"] += t1 - t0
            times["arrow"] += t2 - t1
            times["envelopes"] += t3 - t2
        assert all(c == rows for c in counts.values()), (counts, rows)
        best = {k: min(best[k], times[k]) for k in best}
    return best


def _fmt(rows: int, size: int, seconds: float) -> tuple[str, str]:
    return f"{rows / seconds:,.0f}", f"{size / seconds / 1e6:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    work = Path(tempfile.mkdtemp(prefix="sparza-bench-streams-"))
    warm = _data(2_000, 100, 1_000)   # warm imports and caches so the first measured path is not penalised
    write_all(work / "warm-parquet", _config(work / "warm-delta"), "warm", warm)
    out_rows = []
    summary = []
    try:
        for size, (n, per_batch) in scale["sizes"].items():
            batches = _data(n, size, per_batch)
            rows, payload = _payload(batches)
            label = f"{size} B values, {rows:,} msgs, {len(batches)} commits"
            config = _config(work / f"delta-{size}")
            w, files = write_all(work / f"parquet-{size}", config, str(size), batches)
            r = read_all(config, f"arrow{size}", files, rows)
            for what, secs, base in (("write: producer send() per message", w["send"], w["parquet"]),
                                     ("write: producer send_batch() (Arrow)", w["arrow"], w["parquet"]),
                                     ("write: Parquet files (ceiling)", w["parquet"], w["parquet"]),
                                     ("read: consumer read_arrow()", r["arrow"], r["parquet"]),
                                     ("read: consumer read() envelopes", r["envelopes"], r["parquet"]),
                                     ("read: Parquet files (ceiling)", r["parquet"], r["parquet"])):
                msgs, mb = _fmt(rows, payload, secs)
                out_rows.append((label, what, msgs, mb, f"{base / secs:.0%}"))
            summary.append(f"{size} B: read_arrow {r['parquet'] / r['arrow']:.0%} of the Parquet ceiling, "
                           f"send_batch write {w['parquet'] / w['arrow']:.0%}, "
                           f"send() write {w['parquet'] / w['send']:.0%}")
            del batches
        commits, each = scale["small_commits"]
        batches = _data(commits * each, 100, each)
        rows, payload = _payload(batches)
        config = _config(work / "delta-small-commits")
        _, files = write_all(work / "parquet-small-commits", config, "small", batches)
        r = read_all(config, "arrowsmall", files, rows)
        label = f"100 B values, {rows:,} msgs in {commits:,} small commits"
        for what, secs in (("read: consumer read_arrow()", r["arrow"]),
                           ("read: Parquet files (ceiling)", r["parquet"])):
            msgs, mb = _fmt(rows, payload, secs)
            out_rows.append((label, what, msgs, mb, f"{r['parquet'] / secs:.0%}"))
        summary.append(f"small commits: read_arrow {r['parquet'] / r['arrow']:.0%} of the Parquet ceiling")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = (_report.table(["data", "path", "messages/s", "MB/s (key+value)", "vs Parquet ceiling"], out_rows)
            + "\n\n" + "\n".join(f"- {line}" for line in summary)
            + f"\n\n{PARTITIONS} partitions, snappy, one Delta commit per batch (with an app transaction), "
              "local disk. The ceiling writes/reads the same per-partition files with pyarrow and no Delta log. "
              "The three write paths run interleaved batch by batch and the reads partition by partition "
              "(best of 3 rounds, commit cache cleared), so each figure and its baseline see the same load. "
              "Goals: read >= 50% and write >= 30% of the ceiling.\n")
    command = f".venv/bin/python bench/streams.py --scale {args.scale}"
    _report.record("streams", f"Delta streams ({args.scale})", command, body, measures=MEASURES)


if __name__ == "__main__":
    main()
