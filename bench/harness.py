"""How many generated fault scenarios an hour each engine of the guarantees harness runs, on the same seeds.

The in-process engine (``sparza.testing.harness.inprocess``, TestRunner) runs seeds ``1..N`` in this one
process; the same-run baseline is the Spark engine (``sparza run`` subprocesses) on the first ``--spark``
of those seeds. Both rates are per hour of wall-clock time on this machine; every scenario's verdict is
counted too (a benchmark of a harness that fails proves nothing).

    .venv/bin/python bench/harness.py --seeds 500 --spark 2
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import record, table

from sparza.testing.harness.inprocess import run_inprocess_scenario
from sparza.testing.scenario import generate


def _inprocess(seeds: list[int], base: Path) -> tuple[float, int, list[int]]:
    logging.getLogger("sparza").setLevel(logging.ERROR)
    started = time.perf_counter()
    failed = []
    for seed in seeds:
        outcome = run_inprocess_scenario(generate(seed), base / f"inprocess-{seed}")
        if not outcome.ok:
            failed.append(seed)
    return time.perf_counter() - started, len(seeds), failed


def _spark(seeds: list[int], base: Path) -> tuple[float, int, list[int]]:
    from sparza.testing.harness.spark import run_spark_scenario, start_azurite, start_kafka

    started = time.perf_counter()
    azurite, kafka = start_azurite(base), start_kafka(base)
    failed = []
    try:
        for seed in seeds:
            outcome = run_spark_scenario(generate(seed), azurite, base / f"spark-{seed}", kafka=kafka)
            print(outcome.report(), flush=True)
            if not outcome.ok:
                failed.append(seed)
    finally:
        azurite.stop()
        kafka.stop()
    return time.perf_counter() - started, len(seeds), failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=500, help="in-process: seeds 1..N")
    parser.add_argument("--spark", type=int, default=2, help="baseline: the first N seeds on the Spark engine")
    args = parser.parse_args()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    base = Path(tempfile.mkdtemp(prefix="sparza-bench-harness-", dir=shm))
    seeds = list(range(1, args.seeds + 1))
    in_s, in_n, in_failed = _inprocess(seeds, base)
    rows = [["in-process (TestRunner, one process, state on tmpfs)", in_n, f"{in_s:.0f}", f"{in_n * 3600 / in_s:,.0f}",
             len(in_failed)]]
    if args.spark:
        sp_s, sp_n, sp_failed = _spark(seeds[:args.spark], Path(tempfile.mkdtemp(prefix="sparza-bench-spark-")))
        rows.append(["Spark (sparza run subprocesses, local[2])", sp_n, f"{sp_s:.0f}", f"{sp_n * 3600 / sp_s:,.0f}",
                     len(sp_failed)])
        ratio = (in_n / in_s) / (sp_n / sp_s)
    body = table(["engine", "scenarios", "seconds", "scenarios/hour", "failed"], rows)
    if args.spark:
        body += (f"\n\nThe in-process engine ran {ratio:,.0f}x as many scenarios per hour as the Spark engine on the "
                 f"same seeds (1..{args.spark}); the goal of issue 27 is 1,000 an hour in-process.")
    record("harness", "Guarantees harness: scenarios per hour, in-process vs Spark",
           f".venv/bin/python bench/harness.py --seeds {args.seeds} --spark {args.spark}", body)


if __name__ == "__main__":
    main()
