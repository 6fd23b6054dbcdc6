"""This machine: is a process alive, is a loopback port open, a free port, where sparza keeps local state, and
making a rename or link in a directory durable.

What records a process by its pid (a job claim, an adjunct container store's lock, the dev servers'
``state.json``) asks :func:`pid_alive`; what records a local server asks :func:`port_open`. They live
here, below every package, so production code does not import the development servers for them.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["free_port", "fsync_dir", "pid_alive", "port_open", "sparza_home"]


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename, link or unlink in it survives a crash of the host. A file system that cannot
    sync a directory (some network mounts refuse it) is left as it is: the file's own fsync is what matters most."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as dead
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def sparza_home() -> Path:
    """Where sparza keeps local state of this machine (dev servers, demo runs): ``$SPARZA_HOME`` or ``./.sparza``."""
    return Path(os.environ.get("SPARZA_HOME") or Path.cwd() / ".sparza")
