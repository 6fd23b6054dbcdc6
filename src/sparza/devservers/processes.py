"""What the local servers for development and tests (Azurite, the Apache Kafka broker, a Spark Connect
server) have in common.

:class:`LocalServerProcess`: start a binary in its own process group
with its output in a log file, wait until a probe answers (naming the log on failure), tell whether
it runs, and stop it (SIGTERM, then SIGKILL) until its ports are free. A persistent dev server
(:class:`PersistentServer`: ``sparza dev-storage``, ``sparza dev-kafka``) is tracked by pid across
Python processes, so ``is_running`` and ``stop`` work from a pid alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

from sparza.errors import StorageUnavailableError
from sparza.host import free_port, pid_alive, port_open, sparza_home

__all__ = ["LocalServerProcess", "PersistentServer"]


def _terminate(pid: int, timeout_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s / 2
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)


@dataclass
class LocalServerProcess:
    """Start, probe, check and stop one local server (the base of the dataclasses that describe one).

    A subclass names its log file in ``LOG_NAME``, its program in ``PROGRAM`` and its port fields in
    ``PORT_FIELDS`` (each 0 at construction is given a free port), and lists the ports to wait for in
    :meth:`ports`. ``pid`` is keyword-only: it names a server started earlier (by another process).
    """

    LOG_NAME: ClassVar[str] = "server.log"
    PROGRAM: ClassVar[str] = "the server"
    PORT_FIELDS: ClassVar[tuple[str, ...]] = ()
    data_dir: Path
    pid: int | None = field(default=None, kw_only=True)
    _proc: subprocess.Popen[bytes] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        for name in self.PORT_FIELDS:
            setattr(self, name, getattr(self, name) or free_port())

    def ports(self) -> tuple[int, ...]:
        """The ports the server listens on (stop waits until they are free)."""
        raise NotImplementedError

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the server and wait until it answers."""
        raise NotImplementedError

    def _spawn(self, cmd: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / self.LOG_NAME, "ab")  # noqa: SIM115 - handed to the child process
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True, env=dict(env) if env is not None else None, cwd=cwd)
        log.close()
        self.pid = self._proc.pid

    def _wait_until(self, probe: Callable[[], object], endpoint: str, timeout_s: float, poll_s: float = 0.05) -> None:
        """Call ``probe`` until it returns without raising, once every port is open; else stop and raise."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        log = self.data_dir / self.LOG_NAME
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                raise StorageUnavailableError(f"{self.PROGRAM} exited with code {self._proc.returncode}: {tail}")
            if all(port_open(p) for p in self.ports()):
                try:
                    probe()
                    return
                except Exception as exc:
                    last = exc
            time.sleep(poll_s)
        self.stop()
        raise StorageUnavailableError(f"{self.PROGRAM} did not answer on {endpoint} within {timeout_s:.0f}s "
                                      f"(last error: {last}); see {log}")

    def __enter__(self) -> Self:
        """Start the server for a ``with`` block (fixtures, benchmarks); it is stopped when the block ends."""
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def is_running(self) -> bool:
        """True when the process is alive."""
        if self._proc is not None:
            return self._proc.poll() is None
        return self.pid is not None and pid_alive(self.pid)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and wait until its ports are free."""
        if self.pid is None:
            return
        _terminate(self.pid, timeout_s)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(port_open(p) for p in self.ports()):
            time.sleep(0.05)
        self.pid = None
        self._proc = None


_S = TypeVar("_S", bound=LocalServerProcess)


class PersistentServer(ABC, Generic[_S]):
    """A dev server that outlives the Python process that started it (``sparza dev-storage|dev-kafka
    start|stop|status``): it lives under ``$SPARZA_HOME/<HOME_NAME>`` (or ``./.sparza/<HOME_NAME>``) and
    records its pid and ports in ``state.json``, so a second ``start`` finds the running one and ``stop``
    works from any process. A subclass says how a server is made and how it is written to that file."""

    HOME_NAME: ClassVar[str]

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.state_file = self.home / "state.json"

    @classmethod
    def default(cls) -> Self:
        """The server under ``$SPARZA_HOME`` or ``./.sparza``."""
        return cls(sparza_home() / cls.HOME_NAME)

    @abstractmethod
    def _from_state(self, state: Any) -> _S:
        """The server ``state.json`` describes (raises ValueError, KeyError or TypeError when malformed)."""

    @abstractmethod
    def _state(self, proc: _S) -> dict[str, int | None]:
        """What ``state.json`` records of a started server: its pid and ports."""

    def _load(self) -> _S | None:
        if not self.state_file.exists():
            return None
        try:
            proc = self._from_state(json.loads(self.state_file.read_text()))
        except (ValueError, KeyError, TypeError):
            return None
        return proc if proc.is_running() and port_open(proc.ports()[0]) else None

    def status(self) -> _S | None:
        """The running server, or None."""
        return self._load()

    def _start(self, make: Callable[[], _S]) -> tuple[_S, bool]:
        """Start the server ``make`` builds unless one runs; returns it and whether it was started now."""
        running = self._load()
        if running is not None:
            return running, False
        proc = make()
        proc.start()
        proc._proc = None  # the process outlives this Python process; track it by pid
        self.state_file.write_text(json.dumps(self._state(proc)))
        return proc, True

    def stop(self) -> bool:
        """Stop the server; False when none was running."""
        proc = self._load()
        self.state_file.unlink(missing_ok=True)
        if proc is None:
            return False
        proc.stop()
        return True
