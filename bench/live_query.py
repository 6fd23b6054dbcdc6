"""Live store queries while the job runs at full speed: how long a read takes, and what it costs the job.

The keyed count (8 tasks, RocksDB backed up to a local blob store, Delta streams in and out) on `local[2]` in the
container mode processes ``--messages`` messages appended up front, twice in the same run and session: once with no
reader (the baseline) and once while a reader asks the processor's live query endpoint ``--reads`` times a second
for the committed count of a random key (``GET /v1/stores/counts/get``, routed to the key's task), through
``LiveStores`` on one kept connection (``--connection kept``) or with a new connection per read (``per-read``, as
curl or ``sparza store get --live`` does). Reported: each run's throughput (messages / seconds from the first to
the last commit of output rows, from the output's Delta log), the drop with reads, and the reads' latency
percentiles (HTTP round trip, client to answer).

Usage: ``python bench/live_query.py [--messages 400000] [--reads 100] [--connection kept|per-read]``
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _report  # noqa: E402
from _procs import loadavg  # noqa: E402

from sparza.config import Config  # noqa: E402

TASKS = 8
KEYS = 10_000
_COMMITTED = re.compile(r"batch \d+ \(.*\): (\d+) msgs in")  # the runner's status line of committed task batches
MEASURES = ("Reads of a running job's store through its processor's live query endpoint (`sparza store get --live`) "
            "while the keyed count runs at full speed on `local[2]`: read latency, and the job's throughput with "
            "reads against the same job without them in the same run.")
GOAL = "p99 ≤ 20 ms; the job's throughput drops ≤ 5 % under 100 reads/s"


def _run(spark: Any, root: Path, name: str, messages: int, reads: int, connection: str = "kept") -> dict[str, Any]:
    from examples.keyed_count.config import job_values
    from examples.keyed_count.load import bulk_append, create_streams

    from sparza.runtime import JobRunner
    from sparza.storeview.live import LiveStores

    config = Config(job_values(root / name, **{"job.name": name, "task.max.batch.messages": "5000",
                                               "blob.store.local.fsync": "false"}))
    create_streams(config, TASKS)
    bulk_append(config, messages, KEYS, TASKS)
    times: list[float] = []
    committed = [0]  # messages the job committed, from its status lines

    def status(line: str) -> None:
        # The job is done when it committed every message. Not from its output: final_counts decodes every output
        # row's JSON in Python (0.7-1.4 s per call from 120,000 rows on), and a poll of it in this process (which
        # also serves the live queries and runs the reader) held the GIL most of the run: the job ran at ~125,000
        # msg/s instead of ~200,000, and a read's five hops in the driver each waited for the GIL (read p99 73 ms
        # with that poll, 20 ms without, the product unchanged between the two).
        found = _COMMITTED.match(line)
        if found:
            times.append(time.monotonic())
            committed[0] += int(found.group(1))

    runner = JobRunner(config, spark=spark, install_signal_handlers=False, status=status)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (runner.run(), done.set()), daemon=True)
    started = time.time()
    thread.start()
    latencies: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    stop = threading.Event()

    def reader() -> None:
        nonlocal errors
        rng = random.Random(1)
        stores = LiveStores(config, timeout_s=5)
        url = None
        while not stop.is_set():
            if url is None:
                try:
                    url = stores.url  # once the processor wrote its _live document
                except Exception:
                    time.sleep(0.2)
                    continue
            key = f"k{rng.randrange(KEYS)}"
            address = f"{url}/v1/stores/counts/get?" + urllib.parse.urlencode({"job": f"{name}-1",
                                                                                "key": json.dumps(key)})
            began = time.perf_counter()
            try:
                if connection == "kept":
                    stores.get("counts", key)  # the Python client: one kept connection
                else:
                    with urllib.request.urlopen(address, timeout=5) as response:  # as curl or the CLI: a new one
                        response.read()
                if times:  # measured once the job commits (before, the tasks have no committed state)
                    latencies.append((time.perf_counter() - began) * 1000)
            except Exception as exc:
                if times:
                    errors += 1
                    text = str(getattr(exc, "read", lambda: b"")() or exc)[:120]
                    kinds[text] = kinds.get(text, 0) + 1
            stop.wait(max(0.0, 1.0 / reads - (time.perf_counter() - began)))
        stores.close()

    readers = [threading.Thread(target=reader, daemon=True)] if reads else []
    for r in readers:
        r.start()
    while not done.is_set() and committed[0] < messages:
        time.sleep(0.05)
    stop.set()
    for r in readers:
        r.join(10)
    runner.request_stop("bench done")
    thread.join(180)
    from tests.runtime.helpers import final_counts

    rows = final_counts(config)[1]  # once the job stopped: its output is complete
    if rows < messages:
        raise RuntimeError(f"{name}: the job's output has {rows} of {messages} counts")
    commits = output_commits(config, started)
    print(f"{name}: {messages:,} messages in {len(commits)} output commits over {commits[-1] - commits[0]:.2f} s "
          f"(status lines: {times[-1] - times[0] if times else 0:.2f} s)", flush=True)
    if kinds:
        print(f"{name}: failed reads: {kinds}", flush=True)
    return {"name": name, "rate": messages / max(commits[-1] - commits[0], 1e-6), "latencies": latencies,
            "errors": errors, "load": loadavg()}


def output_commits(config: Config, since: float) -> list[float]:
    """When each commit of output rows landed (epoch seconds, sorted): the output's Delta log entries written since
    ``since`` that add rows. Not the status lines' arrival: the runner reports container results once a second,
    so a run's first-to-last status line counted whole seconds (400,000 messages read as 2.0 s or 2.25 s, i.e.
    199,000 or 177,000 msg/s, in runs of the same build)."""
    log = Path(config["systems.delta.delta.root"]) / "counts" / "_delta_log"
    stamps = []
    for entry in log.glob("*.json"):
        written = entry.stat().st_mtime
        if written < since:
            continue
        for line in entry.read_text().splitlines():
            add = json.loads(line).get("add") if line.strip() else None
            if add is not None and json.loads(add.get("stats") or '{"numRecords": 1}').get("numRecords", 1):
                stamps.append(written)
                break
    if len(stamps) < 2:
        raise RuntimeError(f"the output has {len(stamps)} commit(s) of rows since the run started: too few to time")
    return sorted(stamps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--connection", choices=("kept", "per-read"), default="kept",
                        help="kept: the reader is LiveStores (one kept HTTP connection); per-read: a new connection "
                             "per read (urllib, as curl or `sparza store get --live` does)")
    args = parser.parse_args()
    from sparza.runtime.driver.app import _importable_cwd
    from sparza.testing import local_spark_session

    _importable_cwd()
    spark = local_spark_session("local[2]", "sparza-bench-live-query")
    try:
        with tempfile.TemporaryDirectory(prefix="sparza-live-query-") as tmp:
            root = Path(tmp)
            _run(spark, root, "warm", 20_000, 0)  # the JVM, the Python workers and the containers warm
            base = _run(spark, root, "noreads", args.messages, 0)
            read = _run(spark, root, "reads", args.messages, args.reads, args.connection)
    finally:
        spark.stop()
    lat = read["latencies"]
    drop = (1 - read["rate"] / base["rate"]) * 100
    rows = [["without reads (baseline)", f"{base['rate']:,.0f}", "-", "-", "-", "-", base["load"]],
            [f"{args.reads} reads/s ({args.connection} connection)", f"{read['rate']:,.0f}",
             f"{len(lat)} ({read['errors']} failed)",
             f"{_report.pct(lat, 0.5):.1f}", f"{_report.pct(lat, 0.99):.1f}", f"{max(lat, default=0):.1f}",
             read["load"]]]
    header = ["run", "msg/s", "reads", "read p50 ms", "read p99 ms", "read max ms", "load"]
    body = (f"{args.messages:,} messages, {KEYS:,} keys, {TASKS} tasks. Throughput drop with reads: "
            f"**{drop:.1f} %**.\n\n" + _report.table(header, rows) + f"\n\nGoal: {GOAL}.\n")
    _report.record("live_query", "Live store queries while the job runs",
                   "python bench/live_query.py " + " ".join(sys.argv[1:]), body, measures=MEASURES)


if __name__ == "__main__":
    main()
