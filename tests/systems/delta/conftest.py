"""Fixtures of the Delta stream tests: a config with a local root, and helpers to write (in writer processes) and
read."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.streams import SystemStreamPartition
from sparza.systems.delta import DeltaSystemConsumer


@pytest.fixture
def delta_config(work_dir: Path) -> Config:
    """A ``delta`` system named ``d`` whose tables live under the test's temp dir."""
    return Config({"systems.d.samza.factory": "delta", "systems.d.delta.root": str(work_dir / "streams")})


@pytest.fixture
def read_all() -> Callable[..., list]:
    """Read an SSP's envelopes from ``start`` (None: oldest) to ``end`` with a fresh consumer."""

    def read(config: Config, stream: str, partition: int, start: str | None = None, end: str | None = None,
             **kwargs: object) -> list:
        consumer = DeltaSystemConsumer("d", config)
        return list(consumer.read(SystemStreamPartition("d", stream, partition), start, end, **kwargs))

    return read


@pytest.fixture
def run_writers() -> Callable[..., None]:
    """Run ``writer_process.py`` for each writer number of ``writers`` at once (``messages`` each, flushed every
    ``per_flush``) and wait until every one exited 0 (any still running after a failure is killed)."""
    script = str(Path(__file__).with_name("writer_process.py"))

    def run(config: Config, writers: Iterable[int], messages: int, per_flush: int) -> None:
        procs = [subprocess.Popen([sys.executable, script, json.dumps(dict(config)), str(w), str(messages),
                                   str(per_flush)]) for w in writers]
        try:
            for proc in procs:
                assert proc.wait(timeout=240) == 0, f"writer exited with {proc.returncode}"
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    return run
