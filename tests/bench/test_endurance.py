"""bench/endurance.py's own parts, without Spark: the verdict on a series (flat / bounded by a cycle / growing)
against series built so that their answer is known, and the sampler's reading of a live process tree (RSS,
descriptors, threads, roles), of directories and of a real Delta table."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def endurance() -> ModuleType:
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("endurance", REPO / "bench" / "endurance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _series(fn, n: int = 60, step: float = 60.0) -> list[tuple[float, float]]:
    return [(i * step, fn(i)) for i in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_flat_bounded_and_growing_series_are_told_apart(endurance: ModuleType, seed: int) -> None:
    rng = random.Random(seed)
    level = rng.uniform(50, 5_000)
    n = rng.randrange(12, 120)
    # noise within 4% of the level: flat
    flat = _series(lambda i: level * (1 + rng.uniform(-0.02, 0.02)), n)
    assert endurance.judge(flat, absolute=level * 0.05).verdict == "flat"
    # a sawtooth: climbs for `period` samples, then compaction/gc takes it back down; every cycle peaks alike
    period = rng.randrange(3, max(4, n // 4))
    saw = _series(lambda i: level + level * (i % period) / period, n)
    assert endurance.judge(saw).verdict == "bounded"
    # a steady climb by 1% of the level per sample: growing, with the slope the points were made with
    climb = _series(lambda i: level + level * 0.01 * i, n)
    verdict = endurance.judge(climb)
    assert verdict.verdict == "growing"
    assert verdict.slope_per_hour == pytest.approx(level * 0.01 * 60, rel=1e-6)
    assert verdict.first == climb[0][1] and verdict.last == climb[-1][1] and verdict.n == n
    # a slow leak within the tolerances (5% of the level over the run) is still growing, beyond the slack
    leak = _series(lambda i: level * (1 + 0.05 * i / n), n)
    assert endurance.judge(leak, absolute=level * 0.01).verdict == "growing"
    assert endurance.judge(leak, absolute=level * 0.2).verdict == "flat"
    # a climb that stops (a cache that filled in the middle third) is bounded, not growing
    fill = _series(lambda i: level * min(i, n // 2) / n + level, n)
    assert endurance.judge(fill).verdict in ("bounded", "flat")


def test_judge_edge_cases(endurance: ModuleType) -> None:
    assert endurance.judge([]).verdict == "empty"
    assert endurance.judge([(0.0, 3.0)]).verdict == "flat"
    assert endurance.judge(_series(lambda i: 0.0, 10)).verdict == "flat"
    # small absolute wiggles of a tiny count (python workers 1 <-> 2) are flat with an absolute slack
    assert endurance.judge(_series(lambda i: 1.0 + i % 2, 30), tolerance=0.0, absolute=1).verdict == "flat"
    assert endurance.judge(_series(lambda i: 1.0 + i % 2, 30), tolerance=0.0).verdict == "bounded"
    # unsorted input is sorted by time first
    points = _series(lambda i: float(i), 30)
    assert endurance.judge(list(reversed(points))).verdict == "growing"


_CHILD = """
import os, subprocess, sys, threading, time
files = [open(os.devnull) for _ in range({files})]
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range({threads})]
for t in threads:
    t.start()
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
ballast = bytearray({mib} << 20)
print(worker.pid, flush=True)
time.sleep(60)
"""


def test_sampler_reads_a_live_process_tree(endurance: ModuleType, tmp_path: Path) -> None:
    files, threads, mib = 37, 9, 64
    proc = subprocess.Popen([sys.executable, "-c", _CHILD.format(files=files, threads=threads, mib=mib)],
                            stdout=subprocess.PIPE, text=True)
    try:
        worker = int(proc.stdout.readline())
        stats = endurance.process_stats(proc.pid)
        assert stats is not None
        assert stats["fds"] >= files + 3
        assert stats["threads"] == threads + 1
        assert stats["rss"] >= mib << 20
        # the worker moved to a session of its own (as PySpark's daemon's workers do) and is still found
        assert os.getpgid(worker) != os.getpgid(proc.pid)
        roles = endurance.process_roles(proc.pid)
        assert roles["driver"] == [proc.pid] and roles["python_workers"] == [worker] and roles["jvm"] == []
        assert endurance.jvm_heap(proc.pid) is None  # not a JVM: jstat fails, no numbers made up

        sampler = endurance.Sampler([], "")
        job = endurance.Job("j", tmp_path, {"job.logged.store.base.dir": str(tmp_path)}, 0, lambda stop: None,
                            "s", "o")
        sampler._processes(job, proc.pid)
        value = sampler.registry.get_sample_value
        assert value("endurance_process", {"app": "j", "role": "driver", "what": "fds"}) == stats["fds"]
        assert value("endurance_process", {"app": "j", "role": "python_workers", "what": "processes"}) == 1
        assert value("endurance_process", {"app": "j", "role": "jvm", "what": "processes"}) == 0
    finally:
        proc.kill()
        proc.wait()
        with __import__("contextlib").suppress(ProcessLookupError, UnboundLocalError):
            os.kill(worker, 9)
    time.sleep(0.1)
    assert endurance.process_stats(proc.pid) is None  # gone: no numbers


def test_directory_and_delta_table_counts(endurance: ModuleType, tmp_path: Path) -> None:
    from deltalake import write_deltalake

    rng = random.Random(3)
    sizes = [rng.randrange(1, 5000) for _ in range(7)]
    for i, size in enumerate(sizes):
        (tmp_path / "d" / str(i % 3)).mkdir(parents=True, exist_ok=True)
        (tmp_path / "d" / str(i % 3) / f"f{i}").write_bytes(b"x" * size)
    assert endurance.dir_stats(tmp_path / "d") == (sum(sizes), len(sizes))
    assert endurance.dir_stats(tmp_path / "missing") == (0, 0)

    table = tmp_path / "streams" / "t"
    appends = rng.randrange(2, 6)
    for i in range(appends):
        write_deltalake(str(table), pa.table({"x": [i, i + 1]}), mode="append")
    assert endurance.delta_tables(tmp_path) == [table]
    stats = endurance.delta_stats(table)
    assert stats == {"log_files": appends, "checkpoints": 0, "version": appends - 1, "data_files": appends}
