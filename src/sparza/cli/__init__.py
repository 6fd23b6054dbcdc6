"""The ``sparza`` command. Each command group lives in its own module of this package.

A module listed in ``_COMMAND_MODULES`` defines ``register(app: typer.Typer) -> None`` that adds its
commands or sub-apps; modules not written yet are skipped, so packages can add theirs independently.
"""

from __future__ import annotations

import importlib
import importlib.util

import typer

from sparza import __version__
from sparza.cli._help import SparzaTyper

__all__ = ["app", "main"]

app = SparzaTyper(name="sparza", help="Samza's stream-processing model on Apache Spark, at home on Azure.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

_COMMAND_MODULES = (
    "sparza.cli.devstorage",   # dev-storage start|stop|status
    "sparza.cli.devkafka",     # dev-kafka start|stop|status                (systems.kafka)
    "sparza.cli.devregistry",  # dev-registry start|stop|status             (schemaregistry)
    "sparza.cli.stream",       # stream create|describe|tail|load|compact   (systems.delta)
    "sparza.cli.blobs",        # blobs ls|cat                              (systems.azureblob)
    "sparza.cli.snapshots",    # snapshots show|restore|verify, gc          (state.backup, blobstore)
    "sparza.cli.coordinator",  # coordinator status                         (coordination)
    "sparza.cli.run",          # run, drain, checkpoints show               (runtime)
    "sparza.cli.ops",          # rewind, savepoint create|list|delete       (ops)
    "sparza.cli.store",        # store get|scan|count                       (storeview)
    "sparza.cli.demo",         # demo
    "sparza.cli.config",       # config check|migrate                       (config.check, config.samza)
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparza {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          debug: bool = typer.Option(False, "--debug",
                                     help="Show the traceback of a failure instead of one line (accepted "
                                          "anywhere on the command line; or set SPARZA_DEBUG=1).")) -> None:
    """Samza's stream-processing model on Apache Spark, at home on Azure."""


for _name in _COMMAND_MODULES:
    if importlib.util.find_spec(_name) is not None:
        importlib.import_module(_name).register(app)


def main() -> None:
    """Console-script entry point: runs the app and turns sparza errors into one clear line."""
    from sparza.cli._errors import run_app

    run_app(app)
