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


def write_parquet(root: Path, batches: list[list[tuple[int, pa.Table]]]) -> tuple[float, list[list[str]]]:
    files: list[list[str]] = [[] for _ in range(PARTITIONS)]
    started = time.perf_counter()
    for b, batch in enumerate(batches):
        for p, rows in batch:
            directory = root / f"partition={p}"
            directory.mkdir(parents=True, exist_ok=True)
            path = str(directory / f"{b:06d}.parquet")
            pq.write_table(rows, path, compression="snappy")
            files[p].append(path)
    return time.perf_counter() - started, files


def write_delta(config: Config, stream: str, batches: list[list[tuple[int, pa.Table]]], arrow: bool) -> float:
    DeltaSystemAdmin("d", config).create_stream(StreamSpec(stream, PARTITIONS))
    producer = DeltaSystemProducer("d", config)
    producer.register("bench")
    target = SystemStream("d", stream)
    py_batches = None
    if not arrow:  # per-message input prepared outside the timed loop, as a task would hold it
        py_batches = [[(p, rows.column("key").to_pylist(), rows.column("value").to_pylist(),
                        rows.column("timestamp").to_pylist()) for p, rows in batch] for batch in batches]
    started = time.perf_counter()
    for b, batch in enumerate(batches):
        if arrow:
            for p, rows in batch:
                producer.send_batch("bench", stream, p, rows)
        else:
            assert py_batches is not None
            for p, keys, values, stamps in py_batches[b]:
                for key, value, ts in zip(keys, values, stamps, strict=True):
                    producer.send("bench", OutgoingMessageEnvelope(target, value, key=key, partition=p, timestamp=ts))
        producer.flush("bench", transaction=("bench", b))
    return time.perf_counter() - started


def read_parquet(files: list[list[str]]) -> tuple[float, int]:
    started = time.perf_counter()
    rows = 0
    for paths in files:
        for path in paths:
            rows += pq.ParquetFile(path).read().num_rows   # the lightest pyarrow read of a whole file
    return time.perf_counter() - started, rows


def read_delta(config: Config, stream: str, envelopes: bool = False) -> tuple[float, int]:
    consumer = DeltaSystemConsumer("d", config)
    rows = 0
    started = time.perf_counter()
    for p in range(PARTITIONS):
        ssp = SystemStreamPartition("d", stream, p)
        if envelopes:
            rows += sum(1 for _ in consumer.read(ssp, "0:0"))
        else:
            rows += sum(b.num_rows for b in consumer.read_arrow(ssp, "0:0"))
    return time.perf_counter() - started, rows


def _fresh_process_cache() -> None:
    # Reads are measured cold: parsed commits are otherwise cached per process.
    from sparza.systems.delta import log

    log._CACHE._items.clear()


def _fmt(rows: int, size: int, seconds: float) -> tuple[str, str]:
    return f"{rows / seconds:,.0f}", f"{size / seconds / 1e6:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    work = Path(tempfile.mkdtemp(prefix="sparza-bench-streams-"))
    warm = _data(2_000, 100, 1_000)   # warm imports and caches so the first measured path is not penalised
    write_parquet(work / "warm-parquet", warm)
    write_delta(_config(work / "warm-delta"), "warm", warm, arrow=True)
    out_rows = []
    summary = []
    try:
        for size, (n, per_batch) in scale["sizes"].items():
            batches = _data(n, size, per_batch)
            rows, payload = _payload(batches)
            label = f"{size} B values, {rows:,} msgs, {len(batches)} commits"
            pq_write, files = write_parquet(work / f"parquet-{size}", batches)
            config = _config(work / f"delta-{size}")
            d_send = write_delta(config, f"send{size}", batches, arrow=False)
            d_arrow = write_delta(config, f"arrow{size}", batches, arrow=True)
            pq_read, pq_rows = read_parquet(files)
            _fresh_process_cache()
            d_read, d_rows = read_delta(config, f"arrow{size}")
            _fresh_process_cache()
            d_env, env_rows = read_delta(config, f"arrow{size}", envelopes=True)
            assert pq_rows == d_rows == env_rows == rows, (pq_rows, d_rows, env_rows, rows)
            for what, secs, base in (("write: producer send() per message", d_send, pq_write),
                                     ("write: producer send_batch() (Arrow)", d_arrow, pq_write),
                                     ("write: Parquet files (ceiling)", pq_write, pq_write),
                                     ("read: consumer read_arrow()", d_read, pq_read),
                                     ("read: consumer read() envelopes", d_env, pq_read),
                                     ("read: Parquet files (ceiling)", pq_read, pq_read)):
                msgs, mb = _fmt(rows, payload, secs)
                out_rows.append((label, what, msgs, mb, f"{base / secs:.0%}"))
            summary.append(f"{size} B: read_arrow {pq_read / d_read:.0%} of the Parquet ceiling, "
                           f"send_batch write {pq_write / d_arrow:.0%}, send() write {pq_write / d_send:.0%}")
        commits, each = scale["small_commits"]
        batches = _data(commits * each, 100, each)
        rows, payload = _payload(batches)
        config = _config(work / "delta-small-commits")
        write_delta(config, "small", batches, arrow=True)
        _, files = write_parquet(work / "parquet-small-commits", batches)
        pq_read, _ = read_parquet(files)
        _fresh_process_cache()
        d_read, d_rows = read_delta(config, "small")
        assert d_rows == rows
        label = f"100 B values, {rows:,} msgs in {commits:,} small commits"
        for what, secs in (("read: consumer read_arrow()", d_read), ("read: Parquet files (ceiling)", pq_read)):
            msgs, mb = _fmt(rows, payload, secs)
            out_rows.append((label, what, msgs, mb, f"{pq_read / secs:.0%}"))
        summary.append(f"small commits: read_arrow {pq_read / d_read:.0%} of the Parquet ceiling")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = (_report.table(["data", "path", "messages/s", "MB/s (key+value)", "vs Parquet ceiling"], out_rows)
            + "\n\n" + "\n".join(f"- {line}" for line in summary)
            + f"\n\n{PARTITIONS} partitions, snappy, one Delta commit per batch (with an app transaction), "
              "local disk. The ceiling writes/reads the same per-partition files with pyarrow and no Delta log. "
              "Goals (issue 3): read >= 50% and write >= 30% of the ceiling.\n")
    command = f".venv/bin/python bench/streams.py --scale {args.scale}"
    _report.record("streams", f"Delta streams ({args.scale})", command, body)


if __name__ == "__main__":
    main()
