"""Benchmark: what a store's schema change costs, converting every value once at open vs resolving on every read.

A RocksDB store of ``--keys`` Avro values (``{count: long, page: string, at: long}``) is written, then opened with
a new schema, which converts every value (sparza's choice, ``sparza.state.kv.migration``):

1. a field added at the end with a default (the common change: the new bytes are the old ones plus the default's);
2. a general change (a field removed, a type widened, a field added in the middle: every value decoded, resolved
   and encoded again).

Baselines measured in the same run: a full scan of the store decoding every value (what any pass over the store
costs), and, for the alternative design (a schema id prefixed to each value, old values resolved when read), the
cost of a read of an old value resolved into the new schema against a plain read. The break-even is how many reads
of old values the conversion pays for.

Usage: ``python bench/state_schema.py [--keys 1000000]``.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report

from sparza.serde import AvroSerde
from sparza.state.backup import materialize_store_dir
from sparza.state.kv import RocksDbStore, open_store

V1 = {"type": "record", "name": "Visit", "fields": [
    {"name": "count", "type": "long"}, {"name": "page", "type": "string"}, {"name": "at", "type": "long"}]}
APPENDED = {**V1, "fields": [*V1["fields"], {"name": "source", "type": "string", "default": "v1"}]}
GENERAL = {"type": "record", "name": "Visit", "fields": [
    {"name": "count", "type": "double"}, {"name": "source", "type": "string", "default": "v1"},
    {"name": "at", "type": "long"}]}
TASK = "Partition 0"
READS = 100_000

MEASURES = ("Opening a RocksDB store of 1,000,000 Avro values with a changed schema, which converts every value "
            "once, against a full scan of the same store in the same run; and, for the design not taken (a schema "
            "id per value, old values resolved at every read), what such a read costs against a plain one.")
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def config(schema: Any) -> dict[str, str]:
    return {"stores.visits.key.serde": "string", "stores.visits.msg.serde": "avro",
            "stores.visits.msg.schema": json.dumps(schema)}


def build(base: Path, keys: int) -> Path:
    store = open_store("visits", config(V1), TASK, base)
    for start in range(0, keys, 10_000):
        store.put_all([(f"user-{i:09d}", {"count": i, "page": f"/wiki/page-{i % 50_000}", "at": 1_700_000_000_000 + i})
                       for i in range(start, min(keys, start + 10_000))])
    store.flush()
    checkpoint = base / "checkpoint"
    store.checkpoint(checkpoint)
    store.close()
    return checkpoint


def sst_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.glob("*.sst")) / (1 << 20)


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def scan(base: Path, checkpoint: Path) -> float:
    live = base / "scan"
    materialize_store_dir(checkpoint, live)
    store = RocksDbStore(live, msg_serde=AvroSerde(V1))
    try:
        seconds, n = timed(lambda: sum(1 for _ in store.all()))
        assert n > 0
        return seconds
    finally:
        store.close()


def convert(base: Path, checkpoint: Path, schema: Any, keys: int, name: str) -> tuple[float, float]:
    """(open-and-convert seconds, the SST MiB of the next checkpoint)."""
    work = base / name
    live = work / "visits" / "Partition_0"
    live.parent.mkdir(parents=True)
    materialize_store_dir(checkpoint, live)
    seconds, store = timed(lambda: open_store("visits", config(schema), TASK, work))
    try:
        assert store.get("user-000000007")["at"] == 1_700_000_000_007
        store.checkpoint(work / "after")
        return seconds, sst_mib(work / "after")
    finally:
        store.close()


def reads(checkpoint: Path, keys: int) -> tuple[float, float]:
    """(µs per plain read, µs per read resolved from V1 into the appended schema) of random old values."""
    raw = RocksDbStore(checkpoint, read_only=True)
    rng = random.Random(1)
    try:
        values = [raw.get(f"user-{rng.randrange(keys):09d}".encode()) for _ in range(READS)]
    finally:
        raw.close()
    plain, resolving = AvroSerde(V1), AvroSerde(APPENDED, V1)
    best_plain = min(timed(lambda: [plain.from_bytes(v) for v in values])[0] for _ in range(3))
    best_resolving = min(timed(lambda: [resolving.from_bytes(v) for v in values])[0] for _ in range(3))
    return best_plain / READS * 1e6, best_resolving / READS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sparza-bench-schema-"))
    started = time.perf_counter()
    try:
        checkpoint = build(base, args.keys)
        size = sst_mib(checkpoint)
        scan_s = scan(base, checkpoint)
        appended = convert(base, checkpoint, APPENDED, args.keys, "appended")
        general = convert(base, checkpoint, GENERAL, args.keys, "general")
        plain_us, resolving_us = reads(checkpoint, args.keys)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    n = args.keys
    rows = [
        ["baseline: full scan, every value decoded", f"{scan_s:.1f} s", f"{n / scan_s:,.0f}/s", "1.0x", ""],
        *[[what, f"{res[0]:.1f} s", f"{n / res[0]:,.0f}/s", f"{res[0] / scan_s:.1f}x", f"{size:.0f} → {res[1]:.0f} MiB"]
          for what, res in (("open with a field appended (with a default): every value converted, then compacted",
                             appended),
                            ("open with a general change (removed, widened, inserted): every value converted, "
                             "then compacted", general))],
    ]
    extra = resolving_us - plain_us
    body = (f"Store: {n:,} keys, Avro values of 3 fields, {size:.0f} MiB of SST files.\n\n"
            + _report.table(["what", "time", "rate", "vs scan", "SSTs of the next checkpoint"], rows)
            + "\n\nThe design not taken, a schema id per value with old values resolved at read: a read of an old "
            f"value costs {resolving_us:.1f} µs resolved against {plain_us:.1f} µs plain (best of 3 x "
            f"{READS:,} random values), +{extra:.1f} µs each, for as long as the value is not rewritten. The "
            f"appended-field conversion costs as much as {appended[0] / (extra * 1e-6):,.0f} such reads "
            f"({appended[0] / (extra * 1e-6) / n:.1f} per key), the general one "
            f"{general[0] / (extra * 1e-6):,.0f} ({general[0] / (extra * 1e-6) / n:.1f} per key). "
            f"Whole run: {time.perf_counter() - started:.0f} s.")
    _report.record("state_schema", "State schema evolution: converting a store once vs resolving every read",
                   f".venv/bin/python bench/state_schema.py --keys {n}", body, measures=MEASURES)


if __name__ == "__main__":
    main()
