"""Fixtures of the Delta stream tests: a config with a local root, and helpers to write and read."""

from __future__ import annotations

from collections.abc import Callable
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
