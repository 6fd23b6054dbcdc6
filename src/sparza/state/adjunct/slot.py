"""One local copy of an adjunct store: its directory, its commit marker and its backup.

A store's directory holds the RocksDB files and ``ADJUNCT-MARKER.json``, written (atomically,
after a flush) at every commit: the batch, the snapshot-index id uploaded for it and the last
offset applied per SSP. On restart the marker is compared with the *committed* task checkpoint
entry: the local copy is valid only when both say the same thing. A copy that ran ahead of the
last committed checkpoint (a crash between the store commit and the checkpoint write) is
therefore never reused.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparza.config import Config
from sparza.serde import Serde
from sparza.state.kv import KeyValueStore, open_store, safe_dir_name, store_dir
from sparza.state.kv.format import configured_format

__all__ = ["MARKER_FILE", "StoreMarker", "StoreSlot", "open_raw_store", "store_serdes"]


def store_serdes(config: Config, store_name: str) -> tuple[Serde, Serde]:
    """The key and value serdes configured for ``stores.<store_name>`` (as ``open_store`` reads them)."""
    configured = configured_format(store_name, config)
    return configured.key.serde_object(), configured.msg.serde_object()


def open_raw_store(store_name: str, config: Config, task_name: str, base_dir: str | Path,
                   read_only: bool = False) -> KeyValueStore:
    """Open the store with bytes serdes (engine and options as configured): adjunct stores write the
    stream's bytes as they are and the task's read-only view applies the configured serdes."""
    raw = config.with_overrides({f"stores.{store_name}.key.serde": "bytes", f"stores.{store_name}.msg.serde": "bytes"})
    return open_store(store_name, raw, task_name, base_dir, read_only=read_only)

MARKER_FILE = "ADJUNCT-MARKER.json"


@dataclass(frozen=True, slots=True)
class StoreMarker:
    """What a local store copy contains: the state after ``batch``, uploaded as ``snapshot``."""

    batch: int
    snapshot: str | None
    offsets: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"batch": self.batch, "snapshot": self.snapshot, "offsets": dict(sorted(self.offsets.items()))}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> StoreMarker:
        """Parse :meth:`to_json`'s output."""
        offsets = {str(k): str(v) for k, v in body.get("offsets", {}).items()}
        return cls(int(body["batch"]), body.get("snapshot"), offsets)


class StoreSlot:
    """A writable local store (RocksDB directory or memory, keys and values as bytes) of one adjunct
    store, or one version of it.

    ``slot_name`` names the copy in blob paths (``customers`` or ``customers.v3``); ``dir_task`` is
    the task part of its directory (``Partition 0`` or ``Partition 0.v3``).
    """

    def __init__(self, store_name: str, slot_name: str, config: Config, dir_task: str, base_dir: str | Path,
                 persistent: bool) -> None:
        self.store_name = store_name
        self.slot_name = slot_name
        self.config = config
        self.dir_task = dir_task
        self.base_dir = Path(base_dir)
        self.persistent = persistent
        self.path = store_dir(self.base_dir, store_name, dir_task)
        self._store: KeyValueStore | None = None
        self.dirty = False
        """True when something was written since the last upload (a new snapshot is needed)."""

    # --- lifecycle -----------------------------------------------------------------------------
    @property
    def store(self) -> KeyValueStore:
        """The open store (opened on first use)."""
        if self._store is None:
            self._store = open_raw_store(self.store_name, self.config, self.dir_task, self.base_dir)
        return self._store

    def close(self) -> None:
        """Close the store (idempotent)."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def exists_locally(self) -> bool:
        """True when a persistent copy is on disk."""
        return self.persistent and (self.path / "CURRENT").exists()

    def wipe(self) -> None:
        """Close and delete the local copy (and any leftover checkpoint dir)."""
        self.close()
        if self.persistent:
            shutil.rmtree(self.path, ignore_errors=True)
            shutil.rmtree(self._checkpoint_dir(), ignore_errors=True)

    # --- marker ----------------------------------------------------------------------------------
    def read_marker(self) -> StoreMarker | None:
        """The marker of the last local commit (None: never committed here, or unreadable)."""
        try:
            return StoreMarker.from_json(json.loads((self.path / MARKER_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_marker(self, marker: StoreMarker) -> None:
        """Write the marker atomically; the store must have been flushed first."""
        if not self.persistent:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / (MARKER_FILE + ".tmp")
        tmp.write_text(json.dumps(marker.to_json(), sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path / MARKER_FILE)

    # --- snapshots -------------------------------------------------------------------------------
    def _checkpoint_dir(self) -> Path:
        return self.path.parent / (safe_dir_name(self.dir_task) + ".checkpoint")

    def checkpoint(self) -> Path:
        """Flush and write a RocksDB checkpoint next to the store (hard links); returns its dir."""
        self.store.flush()
        return self.store.checkpoint(self._checkpoint_dir())

    def drop_checkpoint(self) -> None:
        """Remove the checkpoint dir once it is uploaded."""
        shutil.rmtree(self._checkpoint_dir(), ignore_errors=True)

    def __repr__(self) -> str:
        return f"StoreSlot({self.slot_name!r}, path={str(self.path)!r})"
