"""What ``sparza dev-kafka`` and ``sparza dev-storage`` share: their ``stop`` and ``status`` commands over a
:class:`~sparza.devservers.processes.PersistentServer`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from sparza.devservers.processes import PersistentServer

__all__ = ["add_stop_and_status"]


def add_stop_and_status(app: typer.Typer, *, name: str, command: str, server: Callable[[], PersistentServer[Any]],
                        where: Callable[[Any], str], stop_help: str, status_help: str) -> None:
    """Add ``stop`` and ``status`` to ``app`` (``sparza <command>``) for the dev server ``server()``, called
    ``name`` in what they print; ``where(proc)`` says where a running one is (``status`` exits 1 when none runs)."""

    @app.command(help=stop_help)
    def stop() -> None:
        typer.echo(f"{name} stopped" if server().stop() else f"{name} was not running")

    @app.command(help=status_help)
    def status() -> None:
        proc = server().status()
        if proc is None:
            typer.echo(f"{name} is not running (start it with 'sparza {command} start')")
            raise typer.Exit(1)
        typer.echo(f"{name} running: {where(proc)}")
