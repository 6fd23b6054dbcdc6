"""Fixtures for coordination tests: a job config with short timings on the shared Azurite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparza.coordination._fleet import ProcessorFleet
from sparza.testing import FAST_AZURE_COORDINATION

FAST = FAST_AZURE_COORDINATION


def job_config(connection_string: str, job_name: str, **extra: str) -> dict[str, str]:
    """A coordination config for ``job_name`` on the given storage."""
    return {**FAST, "azure.storage.connect": connection_string, "job.name": job_name, "job.id": "1", **extra}


@pytest.fixture
def coord_config(azure_connection_string: str, unique_name: str) -> dict[str, str]:
    """A fast azure-coordination config for a job unique to the test."""
    return job_config(azure_connection_string, unique_name)


@pytest.fixture
def fleet_factory(tmp_path: Path) -> Iterator[Any]:
    """Build :class:`ProcessorFleet` objects that are always torn down."""
    fleets: list[ProcessorFleet] = []

    def make(config: dict[str, str], tasks: int = 8, *, checkpoints: bool = False,
             name: str = "fleet") -> ProcessorFleet:
        fleet = ProcessorFleet(tmp_path / name, config, tasks, checkpoints=checkpoints)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()
