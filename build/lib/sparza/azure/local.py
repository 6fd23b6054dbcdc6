"""The storage emulator ``sparza dev-storage start`` left running on this machine, as one record.

The dev server writes the record when it starts (:class:`~sparza.devservers.storage.DevStorage`) and
account resolution reads it as its last resort (step 4 of :mod:`sparza.azure.resolve`), so resolving
an account does not import the development servers: both sides share this file format, nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.azure.account import StorageAccount
from sparza.host import pid_alive, port_open, sparza_home

__all__ = ["DEV_STORAGE_DIR", "EmulatorRecord", "running_emulator"]

DEV_STORAGE_DIR = "azurite"
"""The dev storage's directory under :func:`~sparza.host.sparza_home`; its record is ``state.json`` there."""


@dataclass(frozen=True, slots=True)
class EmulatorRecord:
    """A started emulator: its process and its loopback ports (what ``state.json`` holds)."""

    pid: int | None
    blob_port: int
    table_port: int
    queue_port: int

    @property
    def account(self) -> StorageAccount:
        """Azurite's account on this emulator's ports."""
        return StorageAccount.emulator(self.blob_port, self.table_port)

    def is_running(self) -> bool:
        """True when the process is alive and its blob port answers."""
        return self.pid is not None and pid_alive(self.pid) and port_open(self.blob_port)

    def to_json(self) -> dict[str, int | None]:
        """The record as ``state.json`` holds it."""
        return {"pid": self.pid, "blob_port": self.blob_port, "table_port": self.table_port,
                "queue_port": self.queue_port}

    @classmethod
    def from_json(cls, state: Any) -> EmulatorRecord:
        """The record ``state.json`` holds (raises ValueError, KeyError or TypeError when malformed)."""
        return cls(state["pid"], int(state["blob_port"]), int(state["table_port"]), int(state["queue_port"]))


def running_emulator(home: Path | None = None) -> StorageAccount | None:
    """The account of the dev storage recorded under ``home`` (default: the machine's), when it still runs."""
    state_file = (home or sparza_home() / DEV_STORAGE_DIR) / "state.json"
    try:
        record = EmulatorRecord.from_json(json.loads(state_file.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record.account if record.is_running() else None
