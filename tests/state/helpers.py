"""Shared helpers of the state tests (``from tests.state import helpers``)."""

from __future__ import annotations

import random
from pathlib import Path

from sparza.state.kv import RocksDbStore

OPTIONS = {"write.buffer.size.bytes": "256KB", "target.file.size.bytes": "256KB"}


def open_rocks(path: Path) -> RocksDbStore:
    """A small-buffered RocksDB store, so a few thousand puts make several SST files."""
    return RocksDbStore(path, options=OPTIONS)


def fill(store: RocksDbStore, start: int, count: int, seed: int = 0, size: int = 200) -> dict[bytes, bytes]:
    """Put ``count`` random values for keys ``k<start..>``; returns what was written."""
    rng = random.Random(seed)
    data = {b"k%08d" % i: rng.randbytes(size) for i in range(start, start + count)}
    store.put_all(data)
    return data


def contents(path: Path) -> dict[bytes, bytes]:
    """Every entry of the RocksDB store at ``path`` (opened read-only)."""
    store = RocksDbStore(path, read_only=True)
    try:
        return dict(store.all())
    finally:
        store.close()
