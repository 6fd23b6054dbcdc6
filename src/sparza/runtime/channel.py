"""The container channel: how a processor's driver and its containers on Spark executors talk.

The driver listens on a TCP port (:class:`ChannelServer`, on ``spark.driver.host``, the address executors already
reach the driver at; ``job.container.channel.host`` to choose another) and every container connects to it
(:class:`ChannelClient`). Each frame is a 4-byte big-endian length and a :mod:`sparza.engine.messages` message
(msgpack): the driver's :class:`~sparza.engine.manager.ContainerManager` sends commands, the container's
:class:`~sparza.engine.container.Container` reports events. A connection starts with a handshake carrying the
processor's token (random per processor), so nothing else can report into a job, and the container's index.

Liveness, both ways: the driver pings every ``ping_s``; a container whose driver has been silent for
``job.container.driver.timeout.ms`` (or closed the connection) stops at its next batch boundary, so a frozen or
partitioned processor's containers stop doing work (the fencing of task checkpoints keeps the output exact either
way). The driver treats a closed connection as a lost container at once (an executor or Python worker that died
closes its sockets); one that went silent without closing is lost once its Spark task ends.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable

import msgspec

from sparza.engine import messages
from sparza.engine.container import Container
from sparza.engine.messages import Command, Event

__all__ = ["ChannelClient", "ChannelServer"]

_log = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
_MAX_FRAME = 64 << 20


class _Handshake(msgspec.Struct):
    token: str
    container: int


def _send_frame(conn: socket.socket, lock: threading.Lock, payload: bytes) -> bool:
    try:
        with lock:
            conn.sendall(_HEADER.pack(len(payload)) + payload)
        return True
    except OSError:
        return False


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = conn.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_frame(conn: socket.socket) -> bytes | None:
    head = _recv_exact(conn, _HEADER.size)
    if head is None:
        return None
    (size,) = _HEADER.unpack(head)
    if size > _MAX_FRAME:
        raise ValueError(f"channel frame of {size} bytes: not one of ours")
    return _recv_exact(conn, size)


class _Link:
    """The driver's end of one container's connection (a :class:`~sparza.engine.manager.ContainerLink`)."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, command: Command) -> None:
        """Send ``command``; a broken connection drops it (the reader reports the container lost)."""
        _send_frame(self._conn, self._lock, messages.encode(command))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._conn.close()


class ChannelServer:
    """The driver's end: a TCP server for every container of one processor.

    ``on_connect(index, link)``, ``on_event(index, event)`` and ``on_lost(index, reason)`` are called from the
    connection's thread (a :class:`~sparza.engine.manager.ContainerManager` queues them).
    """

    def __init__(self, host: str, on_connect: Callable[[int, _Link], None], on_event: Callable[[int, Event], None],
                 on_lost: Callable[[int, str], None]) -> None:
        self.token = secrets.token_hex(16)
        self._on_connect = on_connect
        self._on_event = on_event
        self._on_lost = on_lost
        self._server = socket.create_server((host, 0))
        self._server.settimeout(0.5)
        self.host = host
        self.port = int(self._server.getsockname()[1])
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="sparza-channel", daemon=True).start()

    @property
    def address(self) -> tuple[str, int, str]:
        """``(host, port, token)``: what a container needs to connect."""
        return self.host, self.port, self.token

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            links, self._links = list(self._links), set()
        for link in links:
            link.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="sparza-channel-peer", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        index: int | None = None
        link: _Link | None = None
        reason = "its connection closed (the executor or its Python worker died, or the container ended)"
        try:
            conn.settimeout(30.0)  # a container says who it is at once; anything silent is not one of ours
            first = _recv_frame(conn)
            hello = msgspec.msgpack.decode(first, type=_Handshake) if first is not None else None
            if hello is None or hello.token != self.token:
                return
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            index = hello.container
            link = _Link(conn)
            with self._lock:
                self._links.add(link)
            self._on_connect(index, link)
            while True:
                frame = _recv_frame(conn)
                if frame is None:
                    break
                message = messages.decode(frame)
                try:
                    self._on_event(index, message)  # type: ignore[arg-type]
                except Exception:  # a reporting bug must not cut a container off
                    _log.exception("container channel: handling %s failed", type(message).__name__)
        except (OSError, ValueError, msgspec.MsgspecError) as exc:
            reason = f"its connection broke ({type(exc).__name__}: {exc})"
        finally:
            if link is not None:
                with self._lock:
                    self._links.discard(link)
            with contextlib.suppress(OSError):
                conn.close()
            if index is not None and not self._closed.is_set():
                self._on_lost(index, reason)


class ChannelClient:
    """A container's end of the channel: the :class:`~sparza.engine.container.ContainerHost` of a container on an
    executor. Commands it reads go to the container (:meth:`Container.command`)."""

    def __init__(self, conn: socket.socket, index: int, driver_timeout_s: float) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.index = index
        self.driver_timeout_s = driver_timeout_s
        self._last_heard = time.monotonic()
        self._broken = threading.Event()
        self.container: Container | None = None

    @classmethod
    def connect(cls, address: tuple[str, int, str] | list[object], index: int, *, driver_timeout_s: float,
                timeout_s: float = 10.0) -> ChannelClient:
        """Connect to the driver and say who this container is (raises ``OSError`` when it cannot be reached)."""
        host, port, token = address
        conn = socket.create_connection((str(host), int(str(port))), timeout=timeout_s)
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = cls(conn, index, driver_timeout_s)
        if not _send_frame(conn, client._lock, msgspec.msgpack.encode(_Handshake(str(token), index))):
            raise OSError(f"the driver at {host}:{port} closed the channel at once")
        return client

    def attach(self, container: Container) -> None:
        """Start reading the driver's commands into ``container``."""
        self.container = container
        threading.Thread(target=self._read, name="sparza-channel-reader", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                frame = _recv_frame(self._conn)
                if frame is None:
                    break
                self._last_heard = time.monotonic()
                command = messages.decode(frame)
                assert self.container is not None
                self.container.command(command)  # type: ignore[arg-type]
        except (OSError, ValueError, msgspec.MsgspecError) as exc:
            _log.debug("container channel: the driver's connection ended: %s", exc)
        finally:
            self._broken.set()
            if self.container is not None:
                self.container.command(messages.Ping())  # wake the loop: it sees the driver is gone

    def report(self, event: Event) -> None:
        """Send one event to the driver (a broken connection drops it: the container stops at its next pass)."""
        if not _send_frame(self._conn, self._lock, messages.encode(event)):
            self._broken.set()

    def alive(self) -> bool:
        """False once the driver closed the connection or has been silent for ``driver_timeout_s``."""
        return not self._broken.is_set() and time.monotonic() - self._last_heard <= self.driver_timeout_s

    @property
    def driver_lost(self) -> bool:
        """True when the container stopped because its driver went away or silent."""
        return not self.alive()

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self._conn.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._conn.close()
