"""``sparza dev-registry start|stop|status``: a local schema registry (Apicurio, in-memory) for development."""

from __future__ import annotations

import typer

from sparza.cli._devserver import add_stop_and_status
from sparza.cli._help import SparzaTyper
from sparza.devservers.registry import ApicurioProcess, DevRegistry

__all__ = ["app", "register"]

app = SparzaTyper(help="Run a local schema registry (Apicurio Registry, in-memory, Confluent-compatible API) on "
                       "loopback under .sparza/registry/.", no_args_is_help=True)


@app.command()
def start(port: int = typer.Option(0, metavar="PORT", help="API port (0: a free one).")) -> None:
    """Start the registry (or report the running one) and print its Confluent-compatible URL."""
    proc, started = DevRegistry.default().start(port=port)
    state = "started" if started else "already running"
    typer.echo(f"dev registry {state}: {_where(proc)}")
    typer.echo(f"config: systems.<s>.schema.registry.url: {proc.url}  (schemas live in memory until "
               "'sparza dev-registry stop'; compatibility level BACKWARD)")


def _where(proc: ApicurioProcess) -> str:
    return f"pid {proc.pid}, url {proc.url}"


add_stop_and_status(app, name="dev registry", command="dev-registry", server=DevRegistry.default, where=_where,
                    stop_help="Stop the running registry (its schemas are lost: it keeps them in memory).",
                    status_help="Say whether the registry runs, and where. Exit code 1 when it does not.")


def register(root: typer.Typer) -> None:
    """Add ``dev-registry`` to the root command."""
    root.add_typer(app, name="dev-registry")
