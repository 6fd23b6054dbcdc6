"""The ``sparza`` command. Each command group lives in its own module and is added here."""

from __future__ import annotations

import typer

from sparza import __version__
from sparza.cli import devstorage as _devstorage

__all__ = ["app", "main"]

app = typer.Typer(name="sparza", help="Samza's stream-processing model on Apache Spark, at home on Azure.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparza {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Samza's stream-processing model on Apache Spark, at home on Azure."""


app.add_typer(_devstorage.app, name="dev-storage")
# Command groups of other packages register here, one line each (see docs/cli.md).


def main() -> None:
    """Console-script entry point: runs the app and turns sparza errors into one clear line."""
    from sparza.cli._errors import run_app

    run_app(app)
