"""``sparza dev-storage start|stop|status``: the embedded Azurite for development and demos."""

from __future__ import annotations

import typer

from sparza.cli._help import SparzaTyper
from sparza.devservers.storage import DevStorage

__all__ = ["app", "register"]

app = SparzaTyper(help="Run a local Azure Storage emulator (Azurite) on loopback under .sparza/azurite/.",
                  no_args_is_help=True)


@app.command()
def start(blob_port: int = typer.Option(0, metavar="PORT", help="Blob port (0: a free one)."),
          table_port: int = typer.Option(0, metavar="PORT", help="Table port (0: a free one).")) -> None:
    """Start Azurite (or report the running one) and print its connection string."""
    proc, started = DevStorage.default().start(blob_port=blob_port, table_port=table_port)
    state = "started" if started else "already running"
    typer.echo(f"dev storage {state}: pid {proc.pid}, blob 127.0.0.1:{proc.blob_port}, "
               f"table 127.0.0.1:{proc.table_port}")
    typer.echo("connection string (Azurite's public development key):")
    typer.echo(proc.connection_string)


@app.command()
def stop() -> None:
    """Stop the running Azurite and free its ports."""
    stopped = DevStorage.default().stop()
    typer.echo("dev storage stopped" if stopped else "dev storage was not running")


@app.command()
def status() -> None:
    """Say whether Azurite runs, and where. Exit code 1 when it does not."""
    proc = DevStorage.default().status()
    if proc is None:
        typer.echo("dev storage is not running (start it with 'sparza dev-storage start')")
        raise typer.Exit(1)
    typer.echo(f"dev storage running: pid {proc.pid}, blob 127.0.0.1:{proc.blob_port}, "
               f"table 127.0.0.1:{proc.table_port}")
    typer.echo(proc.connection_string)


def register(root: typer.Typer) -> None:
    """Add ``dev-storage`` to the root command."""
    root.add_typer(app, name="dev-storage")
