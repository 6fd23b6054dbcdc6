"""Concurrent writer processes: every message lands exactly once, in send order per producer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparza.config import Config
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin

WRITERS = 4
MESSAGES = 10_000
PER_FLUSH = 500


@pytest.mark.slow
def test_four_writer_processes_lose_and_duplicate_nothing(delta_config: Config, read_all: Callable[..., list],
                                                          run_writers: Callable[..., None]) -> None:
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 4))
    run_writers(delta_config, range(WRITERS), MESSAGES, PER_FLUSH)
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
                                                                      read_all: Callable[..., list],
                                                                      run_writers: Callable[..., None]) -> None:
    """A zombie and its replacement run the same task's batches at once: each batch lands once."""
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 2))
    run_writers(delta_config, [7, 7], 3000, 100)
    seen = [e.message for p in range(2) for e in read_all(delta_config, "s", p)]
    assert sorted(seen) == sorted(f"7:{i}".encode() for i in range(3000))
