"""Concurrent writer processes: every message lands exactly once, in send order per producer."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin

WRITERS = 4
MESSAGES = 10_000
PER_FLUSH = 500


@pytest.mark.slow
def test_four_writer_processes_lose_and_duplicate_nothing(delta_config: Config,
                                                          read_all: Callable[..., list]) -> None:
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 4))
    script = str(Path(__file__).with_name("writer_process.py"))
    procs = [subprocess.Popen([sys.executable, script, json.dumps(dict(delta_config)), str(w), str(MESSAGES),
                               str(PER_FLUSH)]) for w in range(WRITERS)]
    try:
        for proc in procs:
            assert proc.wait(timeout=240) == 0, f"writer exited with {proc.returncode}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    seen: list[bytes] = []
    for p in range(4):
        got = [e.message for e in read_all(delta_config, "s", p)]
        # Each writer's messages keep their send order within a partition.
        for w in range(WRITERS):
            mine = [int(m.split(b":")[1]) for m in got if m.startswith(f"{w}:".encode())]
            assert mine == sorted(mine)
        seen += got
    assert len(seen) == WRITERS * MESSAGES
    assert set(seen) == {f"{w}:{i}".encode() for w in range(WRITERS) for i in range(MESSAGES)}


@pytest.mark.slow
def test_two_processes_flushing_the_same_transactions_commit_each_once(delta_config: Config,
                                                                      read_all: Callable[..., list]) -> None:
    """A zombie and its replacement run the same task's batches at once: each batch lands once."""
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 2))
    script = str(Path(__file__).with_name("writer_process.py"))
    procs = [subprocess.Popen([sys.executable, script, json.dumps(dict(delta_config)), "7", "3000", "100"])
             for _ in range(2)]
    try:
        for proc in procs:
            assert proc.wait(timeout=240) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    seen = [e.message for p in range(2) for e in read_all(delta_config, "s", p)]
    assert sorted(seen) == sorted(f"7:{i}".encode() for i in range(3000))
