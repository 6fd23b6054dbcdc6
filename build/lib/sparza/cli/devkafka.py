"""``sparza dev-kafka start|stop|status``: a local Kafka-protocol broker (Tansu) for development."""

from __future__ import annotations

import typer

from sparza.cli._devserver import add_stop_and_status
from sparza.cli._help import SparzaTyper
from sparza.devservers.kafka import DevKafka, TansuProcess

__all__ = ["app", "register"]

app = SparzaTyper(help="Run a local Kafka-protocol broker (Tansu, in-memory) on loopback under .sparza/kafka/.",
                  no_args_is_help=True)


@app.command()
def start(port: int = typer.Option(0, metavar="PORT", help="Listener port (0: a free one).")) -> None:
    """Start the broker (or report the running one) and print its bootstrap servers."""
    proc, started = DevKafka.default().start(port=port)
    state = "started" if started else "already running"
    typer.echo(f"dev kafka {state}: {_where(proc)}")
    typer.echo(f"config: systems.<s>.samza.factory: kafka, systems.<s>.consumer.bootstrap.servers: "
               f"{proc.bootstrap_servers}  (topics live in memory until 'sparza dev-kafka stop')")


def _where(proc: TansuProcess) -> str:
    return f"pid {proc.pid}, bootstrap servers {proc.bootstrap_servers}"


add_stop_and_status(app, name="dev kafka", command="dev-kafka", server=DevKafka.default, where=_where,
                    stop_help="Stop the running broker (its topics are lost: it keeps them in memory).",
                    status_help="Say whether the broker runs, and where. Exit code 1 when it does not.")


def register(root: typer.Typer) -> None:
    """Add ``dev-kafka`` to the root command."""
    root.add_typer(app, name="dev-kafka")
