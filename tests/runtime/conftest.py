"""Fixtures of the runtime tests: a keyed-count job over real Delta streams in a temp dir."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparza.config import Config

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # examples.* and tests.runtime.* are imported by dotted path

from tests.runtime.helpers import job_values  # noqa: E402


@pytest.fixture
def make_job(work_dir: Path) -> Callable[..., Config]:
    """Build the job config and create its streams (events, counts: 2 partitions each by default)."""
    from examples.keyed_count.load import create_streams

    def build(partitions: int = 2, **overrides: Any) -> Config:
        config = Config(job_values(work_dir, **overrides))
        create_streams(config, partitions)
        return config

    return build
