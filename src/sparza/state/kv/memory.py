"""The in-memory engine: a dict plus a sorted key list, for stores that need no durability."""

from __future__ import annotations

import bisect
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from sparza.serde import Serde
from sparza.state.kv.api import SerdeStore, StoreClosedError

__all__ = ["InMemoryStore"]


class InMemoryStore(SerdeStore):
    """A sorted in-memory store (Samza's ``inmemory`` engine): fast; its contents live in this process.

    ``checkpoint(dir)`` writes the entries as one JSON-lines file of hex pairs and ``load(dir)``
    reads them back, which is how the task runtime makes memory stores as durable as RocksDB ones.
    """

    def __init__(self, name: str = "memory", key_serde: Serde | None = None, msg_serde: Serde | None = None,
                 read_only: bool = False) -> None:
        super().__init__(name, key_serde, msg_serde, read_only)
        self._data: dict[bytes, bytes] | None = {}
        self._keys: list[bytes] = []

    def _live(self) -> dict[bytes, bytes]:
        if self._data is None:
            raise StoreClosedError(self.name)
        return self._data

    def _get_raw(self, key: bytes) -> bytes | None:
        return self._live().get(key)

    def _multi_get_raw(self, keys: list[bytes]) -> list[bytes | None]:
        data = self._live()
        return [data.get(k) for k in keys]

    def _write_raw(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        data = self._live()
        for key, value in puts:
            if key not in data:
                bisect.insort(self._keys, key)
            data[key] = value
        for key in deletes:
            if data.pop(key, None) is not None:
                del self._keys[bisect.bisect_left(self._keys, key)]

    def _iter_raw(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        data = self._live()
        lo = 0 if from_key is None else bisect.bisect_left(self._keys, from_key)
        hi = len(self._keys) if to_key is None else bisect.bisect_left(self._keys, to_key)
        # Snapshot the slice: callers may write while iterating.
        for key in self._keys[lo:hi]:
            value = data.get(key)
            if value is not None:
                yield key, value

    def flush(self) -> None:
        self._live()

    def checkpoint(self, directory: str | Path) -> Path:
        target = Path(directory)
        if target.exists():
            shutil.rmtree(target)  # a leftover of a crashed attempt is never referenced
        target.mkdir(parents=True)
        with open(target / "entries.jsonl", "w", encoding="utf-8") as fh:
            for key, value in self._iter_raw(None, None):
                fh.write(json.dumps([key.hex(), value.hex()]) + "\n")
        self._record_format(target)
        return target

    def load(self, directory: str | Path) -> int:
        """Put every entry of a dir written by :meth:`checkpoint` into this store; returns how many."""
        path = Path(directory) / "entries.jsonl"
        if not path.exists():
            return 0
        puts: list[tuple[bytes, bytes]] = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    key, value = json.loads(line)
                    puts.append((bytes.fromhex(key), bytes.fromhex(value)))
        data = self._live()
        data.update(puts)
        self._keys = sorted(data)
        return len(puts)

    def close(self) -> None:
        self._data = None
        self._keys = []

    def __len__(self) -> int:
        return len(self._live())
