"""``sparza dev-kafka install|start|stop|status|wipe``: a local Apache Kafka broker (KRaft) for development."""

from __future__ import annotations

import typer

from sparza.cli._devserver import add_stop_and_status
from sparza.cli._help import SparzaTyper
from sparza.devservers.kafka import DevKafka, KafkaBroker

__all__ = ["app", "register"]

app = SparzaTyper(help="Run a local Apache Kafka broker (KRaft, one node) on loopback; topics under .sparza/kafka/.",
                  no_args_is_help=True)


@app.command()
def install() -> None:
    """Fetch Apache Kafka's broker jars from Maven Central once (needs Maven), the broker tests and benchmarks run."""
    from sparza.devservers.kafka import install_kafka

    kafka = install_kafka()
    if kafka.fetched_s is None:
        typer.echo(f"Apache Kafka {kafka.version} up to date ({kafka.home})")
    else:
        typer.echo(f"Apache Kafka {kafka.version} fetched from Maven Central and warmed up in "
                   f"{kafka.fetched_s:.0f} s ({kafka.home})")


@app.command()
def start(port: int = typer.Option(0, metavar="PORT", help="Listener port (0: a free one).")) -> None:
    """Start the broker (or report the running one) and print its bootstrap servers."""
    proc, started = DevKafka.default().start(port=port)
    state = "started" if started else "already running"
    typer.echo(f"dev kafka {state}: {_where(proc)}")
    typer.echo(f"config: systems.<s>.samza.factory: kafka, systems.<s>.consumer.bootstrap.servers: "
               f"{proc.bootstrap_servers}  (topics kept in {proc.log_dir} until 'sparza dev-kafka wipe')")


@app.command()
def wipe() -> None:
    """Delete the stopped broker's topics and their records (refused while it runs)."""
    typer.echo("dev kafka topics deleted" if DevKafka.default().wipe() else "dev kafka had no topics")


def _where(proc: KafkaBroker) -> str:
    return f"pid {proc.pid}, bootstrap servers {proc.bootstrap_servers}"


add_stop_and_status(app, name="dev kafka", command="dev-kafka", server=DevKafka.default, where=_where,
                    stop_help="Stop the running broker (its topics stay for the next start; 'wipe' deletes them).",
                    status_help="Say whether the broker runs, and where. Exit code 1 when it does not.")


def register(root: typer.Typer) -> None:
    """Add ``dev-kafka`` to the root command."""
    root.add_typer(app, name="dev-kafka")
