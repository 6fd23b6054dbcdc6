"""The embedded Azure Storage: an Azurite process on loopback for development, demos and tests.

:class:`AzuriteProcess` starts one Azurite with its own data directory and ports and waits until
it answers. :class:`DevStorage` is the persistent one behind ``sparza dev-storage``: it lives under
``.sparza/azurite/`` (or ``$SPARZA_HOME/azurite``) and records its pid and ports in ``state.json``
so a second ``start`` finds the running one.
"""

from __future__ import annotations

import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.azure.account import AZURITE_ACCOUNT_NAME, StorageAccount
from sparza.azure.local import DEV_STORAGE_DIR, EmulatorRecord
from sparza.devservers.processes import LocalServerProcess, PersistentServer
from sparza.errors import SparzaError

__all__ = ["AzuriteNotInstalledError", "AzuriteProcess", "DevStorage", "find_azurite"]


class AzuriteNotInstalledError(SparzaError):
    """The Azurite emulator could not be found."""


def find_azurite() -> str:
    """The path of the ``azurite`` executable.

    Looks at ``$SPARZA_AZURITE_BIN``, ``node_modules/.bin/azurite`` in the current directory and its
    parents and in the sparza source checkout, then ``PATH``.
    """
    env = os.environ.get("SPARZA_AZURITE_BIN")
    if env:
        return env
    starts = [Path.cwd(), Path(__file__).resolve().parent]
    for start in starts:
        for folder in [start, *start.parents]:
            candidate = folder / "node_modules" / ".bin" / "azurite"
            if candidate.exists():
                return str(candidate)
    found = shutil.which("azurite")
    if found:
        return found
    raise AzuriteNotInstalledError(
        "Azurite (the local Azure Storage emulator) is not installed: run 'make setup' in the sparza "
        "checkout, or 'npm install azurite@3.37.0', or set SPARZA_AZURITE_BIN; or configure a real "
        "account with azure.storage.connect / AZURE_STORAGE_CONNECTION_STRING")


@dataclass
class AzuriteProcess(LocalServerProcess):
    """One Azurite process with its own data directory, on loopback ports (0 = pick free ones)."""

    LOG_NAME = "azurite.log"
    PROGRAM = "Azurite"
    PORT_FIELDS = ("blob_port", "table_port", "queue_port")

    blob_port: int = 0
    table_port: int = 0
    queue_port: int = 0
    request_log: bool = False
    """True: Azurite logs every request it serves to :attr:`log_path` (one line each, as its access log)."""

    @property
    def account(self) -> StorageAccount:
        """The emulator's account with this process's endpoints."""
        return StorageAccount.emulator(self.blob_port, self.table_port)

    @property
    def connection_string(self) -> str:
        """A connection string for this emulator (the key is Azurite's public dev key)."""
        return self.account.connection_string() + f"QueueEndpoint=http://127.0.0.1:{self.queue_port}/{AZURITE_ACCOUNT_NAME};"

    @property
    def log_path(self) -> Path:
        """Azurite's output: with :attr:`request_log`, a line per request served."""
        return self.data_dir / self.LOG_NAME

    def ports(self) -> tuple[int, ...]:
        """The blob and table ports (the queue service is not waited for)."""
        return (self.blob_port, self.table_port)

    def start(self, timeout_s: float = 30.0) -> None:
        """Start Azurite and wait until the blob and table services answer."""
        quiet = [] if self.request_log else ["--silent"]
        self._spawn([find_azurite(), *quiet, "--location", str(self.data_dir),
                     "--blobHost", "127.0.0.1", "--blobPort", str(self.blob_port),
                     "--tableHost", "127.0.0.1", "--tablePort", str(self.table_port),
                     "--queueHost", "127.0.0.1", "--queuePort", str(self.queue_port),
                     "--skipApiVersionCheck", "--loose", "--disableProductStyleUrl"])
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until a real request to the blob service succeeds."""
        self._wait_until(lambda: self.account.blob_service_client(retry_total=0, timeout_s=2).get_service_properties(),
                         f"127.0.0.1:{self.blob_port}", timeout_s, poll_s=0.1)

    def pause(self) -> None:
        """SIGSTOP the process (requests then hang: for timeout tests)."""
        if self.pid is not None:
            os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused process."""
        if self.pid is not None:
            os.killpg(self.pid, signal.SIGCONT)

    def restart(self, timeout_s: float = 30.0) -> None:
        """Stop and start again on the same ports and data directory."""
        self.stop()
        self.start(timeout_s)


class DevStorage(PersistentServer[AzuriteProcess]):
    """The persistent embedded storage behind ``sparza dev-storage start|stop|status``."""

    HOME_NAME = DEV_STORAGE_DIR

    def _from_state(self, state: Any) -> AzuriteProcess:
        record = EmulatorRecord.from_json(state)  # the format account resolution reads (sparza.azure.local)
        return AzuriteProcess(self.home / "data", record.blob_port, record.table_port, record.queue_port,
                              pid=record.pid)

    def _state(self, proc: AzuriteProcess) -> dict[str, int | None]:
        return EmulatorRecord(proc.pid, proc.blob_port, proc.table_port, proc.queue_port).to_json()

    def running_account(self) -> StorageAccount | None:
        """The account of the running emulator, or None when none runs."""
        proc = self._load()
        return proc.account if proc else None

    def start(self, blob_port: int = 0, table_port: int = 0, queue_port: int = 0) -> tuple[AzuriteProcess, bool]:
        """Start the emulator unless it runs; returns it and whether it was started now."""
        return self._start(lambda: AzuriteProcess(self.home / "data", blob_port, table_port, queue_port))
