"""The container channel: how containers report to the driver while an epoch runs, and hear its stop request.

A Spark job returns its rows only when it ends, and an epoch lasts minutes: the status line, metrics,
failure detection and stop requests cannot wait for that. The driver therefore listens on a TCP port
(:class:`ContainerChannel`, on ``spark.driver.host``, the address executors already reach the driver at)
and every container connects to it (:class:`ContainerChannelClient`). Messages are JSON lines:

- container → driver: ``hello`` (epoch, container index, its locations, its tasks, the tasks that moved to
  it), ``result`` (one committed, skipped or failed task batch: a :class:`~sparza.engine.results.BatchResult`),
  ``done`` (a task left the run loop: caught up, ended, stopped), ``error`` (the container is failing);
- driver → container: ``end`` (finish the running batch, commit, return), ``drain`` (a job's drain request, or
  its cancellation: ``{"job", "drain"}`` with :meth:`~sparza.engine.drain.DrainRequest.to_json` or null) and
  ``ping`` (the driver is alive: a
  container that hears nothing from a driver it was connected to for ``job.container.driver.timeout.ms`` ends its
  epoch at the batch boundary, so a frozen or partitioned processor's containers stop doing work; the fencing of
  task checkpoints keeps the output exact either way).

Every connection starts with the epoch's token (random per processor), so nothing else can report into a
job. Without the channel (the driver cannot be reached from executors) a container still runs its epoch
and returns its results as rows; only the stop request then waits for the epoch's end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from sparza.engine.results import BatchResult, BatchStatus

__all__ = ["ChannelEvent", "ContainerChannel", "ContainerChannelClient", "result_from_json", "result_to_json"]

_log = logging.getLogger(__name__)

ChannelEvent = dict[str, Any]
"""One message from a container: ``{"type": ..., "epoch": e, "container": i, ...}``."""


def result_to_json(result: BatchResult) -> dict[str, Any]:
    """A batch result as JSON-able data."""
    body = asdict(result)
    body["status"] = result.status.value
    return body


def result_from_json(body: dict[str, Any]) -> BatchResult:
    """Inverse of :func:`result_to_json`."""
    return BatchResult(**{**body, "status": BatchStatus(body["status"])})


class ContainerChannel:
    """The driver's end: a TCP server for the containers of one processor (all its epochs and jobs).

    ``on_event(event)`` is called for every message, from the connection's thread.
    """

    def __init__(self, host: str, on_event: Callable[[ChannelEvent], None], *, ping_s: float = 1.0) -> None:
        self.token = secrets.token_hex(16)
        self.ping_s = ping_s
        self._on_event = on_event
        self._server = socket.create_server((host, 0))
        self._server.settimeout(0.5)
        self.host = host
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._peers: dict[tuple[int, int], socket.socket] = {}  # (epoch, container) -> connection
        self._ended: set[int] = set()  # epochs asked to end
        self._drains: dict[int, dict[str, Any]] = {}  # epoch -> job -> its drain request (None: cancelled)
        self._send_lock = threading.Lock()  # pings, ends and drains come from different threads: no interleaving
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="sparza-container-channel", daemon=True)
        self._thread.start()
        threading.Thread(target=self._ping, name="sparza-container-ping", daemon=True).start()

    def _ping(self) -> None:
        while not self._closed.wait(self.ping_s):
            with self._lock:
                peers = list(self._peers.values())
            for conn in peers:
                self._send_to(conn, {"type": "ping"})

    def _send_to(self, conn: socket.socket, body: dict[str, Any]) -> bool:
        with self._send_lock:
            return _send(conn, body)

    @property
    def address(self) -> tuple[str, int, str]:
        """``(host, port, token)``: what an epoch plan carries."""
        return self.host, self.port, self.token

    def end_epoch(self, epoch: int) -> None:
        """Ask every container of ``epoch`` (connected now or later) to finish its batch, commit and return."""
        with self._lock:
            self._ended.add(epoch)
            peers = [conn for (e, _), conn in self._peers.items() if e == epoch]
        for conn in peers:
            self._send_to(conn, {"type": "end"})

    def drain_job(self, epoch: int, job: str, drain: dict[str, Any] | None) -> None:
        """Tell every container of ``epoch`` (connected now or later) that ``job`` drains (``drain``, a
        :class:`~sparza.engine.drain.DrainRequest` as JSON), or no longer does (None)."""
        with self._lock:
            self._drains.setdefault(epoch, {})[job] = drain
            for old in [e for e in self._drains if e < epoch]:
                del self._drains[old]
            peers = [conn for (e, _), conn in self._peers.items() if e == epoch]
        for conn in peers:
            self._send_to(conn, {"type": "drain", "job": job, "drain": drain})

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            peers = list(self._peers.values())
            self._peers.clear()
        for conn in peers:
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="sparza-container-peer", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        key: tuple[int, int] | None = None
        try:
            conn.settimeout(30.0)  # a container says hello at once; anything silent is not one of ours
            reader = conn.makefile("r", encoding="utf-8")
            first = json.loads(reader.readline() or "null")
            if not isinstance(first, dict) or first.get("token") != self.token:
                return  # not one of ours
            conn.settimeout(None)
            key = (int(first["epoch"]), int(first["container"]))
            with self._lock:
                self._peers[key] = conn
                ended = key[0] in self._ended
                drains = dict(self._drains.get(key[0], {}))
            for job, drain in drains.items():
                self._send_to(conn, {"type": "drain", "job": job, "drain": drain})
            if ended:
                self._send_to(conn, {"type": "end"})
            self._dispatch(first)
            for line in reader:
                self._dispatch(json.loads(line))
        except (OSError, ValueError) as exc:
            _log.debug("container channel: a connection ended: %s", exc)
        finally:
            if key is not None:
                with self._lock:
                    if self._peers.get(key) is conn:
                        del self._peers[key]
            with contextlib.suppress(OSError):
                conn.close()

    def _dispatch(self, event: ChannelEvent) -> None:
        event.pop("token", None)
        try:
            self._on_event(event)
        except Exception:  # a reporting bug must not cut a container off
            _log.exception("container channel: handling %s failed", event.get("type"))


def _send(conn: socket.socket, body: dict[str, Any]) -> bool:
    try:
        conn.sendall((json.dumps(body, separators=(",", ":")) + "\n").encode("utf-8"))
        return True
    except OSError:
        return False


class ContainerChannelClient:
    """A container's end of the channel (see the module docstring)."""

    def __init__(self, conn: socket.socket, epoch: int, container: int, token: str,
                 driver_timeout_s: float = 10.0) -> None:
        self._conn = conn
        self.driver_timeout_s = driver_timeout_s
        self._last_heard = time.monotonic()
        self.driver_lost = False
        self._epoch = epoch
        self._container = container
        self._token = token
        self._buffer = b""
        self.ended = False
        self.broken = False
        self.drains: dict[str, dict[str, Any] | None] = {}
        """Job → the drain request the driver sent (None: cancelled), as it came."""

    @classmethod
    def connect(cls, address: tuple[str, int, str] | list[Any], epoch: int, container: int,
                timeout_s: float = 5.0, driver_timeout_s: float = 10.0) -> ContainerChannelClient | None:
        """Connect to the driver, or None (logged) when it cannot be reached."""
        host, port, token = address
        try:
            conn = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as exc:
            _log.warning("container %s of epoch %s cannot reach the driver at %s:%s (%s): it reports at the "
                         "epoch's end and hears no stop request before it", container, epoch, host, port, exc)
            return None
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(conn, epoch, container, str(token), driver_timeout_s)

    def _send(self, body: dict[str, Any]) -> bool:
        if self.broken:
            return False
        ok = _send(self._conn, {"epoch": self._epoch, "container": self._container, **body})
        if not ok:
            self.broken = True
        return ok

    def hello(self, locations: dict[str, str], tasks: list[str], moves: list[dict[str, Any]],
              alive: list[str]) -> None:
        """The first message: who this container is, where it is, what it runs, what moved to it."""
        self._send({"type": "hello", "token": self._token, "locations": locations, "tasks": tasks, "moves": moves,
                    "alive": alive})

    def send_result(self, job: str, result: BatchResult) -> bool:
        """One task batch's result; False when it could not be sent (the caller keeps it for the rows)."""
        return self._send({"type": "result", "job": job, "result": result_to_json(result)})

    def send_done(self, job: str, task: str, why: str) -> bool:
        """A task left the run loop (``caught up``, ``ended``, ``stopped``)."""
        return self._send({"type": "done", "job": job, "task": task, "why": why})

    def send_waiting(self, job: str, task: str, why: str) -> bool:
        """A task has nothing to do but is not caught up: its main input waits for ``why``."""
        return self._send({"type": "waiting", "job": job, "task": task, "why": why})

    def send_error(self, text: str) -> None:
        """The container is failing with ``text`` (Spark retries it; the driver says so)."""
        self._send({"type": "error", "error": text})

    def poll_end(self, wait_s: float) -> bool:
        """Wait up to ``wait_s`` for the driver's ``end``; True once it came, or once the driver it was connected
        to has been silent for ``driver_timeout_s`` or closed the connection (:attr:`driver_lost`). ``drain``
        messages read meanwhile land in :attr:`drains` and end the wait early (False), so the caller sees them;
        pings only keep the driver alive."""
        if self.ended or self.broken:
            if wait_s > 0 and not self.ended:
                select.select([], [], [], wait_s)
            return self.ended
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            try:
                readable, _, _ = select.select([self._conn], [], [], max(deadline - time.monotonic(), 0.0))
                if readable:
                    chunk = self._conn.recv(65536)
                    if not chunk:
                        self.broken = self.ended = self.driver_lost = True  # the driver is gone
                        return True
                    self._last_heard = time.monotonic()
                    if self._read(chunk):
                        return self.ended
            except OSError:
                self.broken = self.ended = self.driver_lost = True
                return True
            if time.monotonic() - self._last_heard > self.driver_timeout_s:
                self.ended = self.driver_lost = True
                return True
            if time.monotonic() >= deadline:
                return False

    def _read(self, chunk: bytes) -> bool:
        """Take the driver's messages in ``chunk``; True when one of them is for the caller (end, drain)."""
        self._buffer += chunk
        news = False
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if message.get("type") == "end":
                self.ended = news = True
            elif message.get("type") == "drain":
                self.drains[str(message["job"])] = message.get("drain")
                news = True
        return news

    def close(self) -> None:
        """Say goodbye and close."""
        self._send({"type": "bye"})
        with contextlib.suppress(OSError):
            self._conn.close()
