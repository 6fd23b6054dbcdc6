"""``sparza dev-storage start|stop|status``: the embedded Azurite for development and demos."""

from __future__ import annotations

import typer

from sparza.cli._devserver import add_stop_and_status
from sparza.cli._help import SparzaTyper
from sparza.devservers.storage import AzuriteProcess, DevStorage

__all__ = ["app", "register"]

app = SparzaTyper(help="Run a local Azure Storage emulator (Azurite) on loopback under .sparza/azurite/.",
                  no_args_is_help=True)


@app.command()
def start(blob_port: int = typer.Option(0, metavar="PORT", help="Blob port (0: a free one)."),
          table_port: int = typer.Option(0, metavar="PORT", help="Table port (0: a free one).")) -> None:
    """Start Azurite (or report the running one) and print its connection string."""
    proc, started = DevStorage.default().start(blob_port=blob_port, table_port=table_port)
    state = "started" if started else "already running"
    typer.echo(f"dev storage {state}: {_where(proc)}")
    typer.echo("connection string (Azurite's public development key):")
    typer.echo(proc.connection_string)


def _where(proc: AzuriteProcess) -> str:
    return f"pid {proc.pid}, blob 127.0.0.1:{proc.blob_port}, table 127.0.0.1:{proc.table_port}"


add_stop_and_status(app, name="dev storage", command="dev-storage", server=DevStorage.default,
                    where=lambda proc: f"{_where(proc)}\n{proc.connection_string}",
                    stop_help="Stop the running Azurite and free its ports.",
                    status_help="Say whether Azurite runs, and where. Exit code 1 when it does not.")


def register(root: typer.Typer) -> None:
    """Add ``dev-storage`` to the root command."""
    root.add_typer(app, name="dev-storage")
