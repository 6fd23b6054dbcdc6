"""``sparza config check`` (every key explained, every problem listed) and ``sparza config migrate``
(a Samza job config in sparza's spelling, and what cannot be carried over)."""

from __future__ import annotations

from pathlib import Path

import typer

from sparza.cli._help import SparzaTyper

__all__ = ["register"]

config_app = SparzaTyper(help="Check a job config, or migrate a Samza job config.", no_args_is_help=True)


@config_app.command("check")
def check(config: str = typer.Option(..., "--config", "-c", metavar="FILE",
                                     help="Job config (YAML or .properties).")) -> None:
    """Print every key with its meaning, default and the package that reads it, then every problem.

    Exit codes: 0 nothing wrong (warnings allowed), 1 at least one problem (the job would not start)."""
    from sparza.config import Config
    from sparza.config.check import check_config

    report = check_config(Config.load(config))
    typer.echo(f"{config}: {len(report.keys)} keys")
    for entry in report.keys:
        typer.echo(f"  {entry.key} = {entry.value}")
        if entry.status in ("ok", "pass-through"):
            default = "none" if entry.default is None else repr(entry.default)
            where = f"read by {entry.package}" if entry.status == "ok" else "passed through"
            typer.echo(f"      {entry.meaning} (default: {default}; {where}; pattern {entry.pattern})")
        elif entry.status == "free-form":
            typer.echo(f"      free-form {entry.meaning}")
        elif entry.status == "job-code":
            typer.echo(f"      the job's own setting: {entry.meaning}")
        elif entry.status == "samza-unused":
            typer.echo(f"      Samza key not used by sparza: {entry.meaning}")
        elif entry.status == "unused":
            typer.echo("      not read by sparza")
        else:
            typer.echo("      UNKNOWN")
    infos = [n for n in report.notes if n.level == "info"]
    if infos:
        typer.echo("translated from Samza's spelling:")
        for note in infos:
            typer.echo(f"  {note.key}: {note.message}")
    if report.warnings:
        typer.echo("warnings:")
        for line in dict.fromkeys(report.warnings):
            typer.echo(f"  {line}")
    if report.problems:
        typer.echo(f"problems ({len(report.problems)}):")
        for problem in report.problems:
            typer.echo(f"  {problem}")
        raise typer.Exit(1)
    typer.echo("no problems")


@config_app.command("migrate")
def migrate(source: str = typer.Argument(..., help="A Samza job config (.properties, or YAML)."),
            output: str = typer.Option(None, "--output", "-o", metavar="FILE",
                                       help="Write the sparza config here (with secret values); stdout masks them."),
            fmt: str = typer.Option("properties", "--format", metavar="properties|yaml",
                                    help="properties or yaml.")) -> None:
    """Print the sparza equivalent of a Samza job config and what cannot be carried over.

    Exit codes: 0 everything carried over (notes allowed), 1 something must be changed by hand."""
    from sparza.config import Config
    from sparza.config.check import migrate_config

    result = migrate_config(Config.load(source))
    text = result.render(fmt, mask_secrets=output is None)
    if output is not None:
        Path(output).write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output}")
    else:
        typer.echo(text, nl=False)
    if result.changes:
        typer.echo("# changed:")
        for line in result.changes:
            typer.echo(f"#   {line}")
    if result.dropped:
        typer.echo("# not carried over (sparza does not use these):")
        for line in result.dropped:
            typer.echo(f"#   {line}")
    if result.to_fix:
        typer.echo("# must be changed by hand:")
        for line in result.to_fix:
            typer.echo(f"#   {line}")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``config check`` and ``config migrate`` to the root command."""
    app.add_typer(config_app, name="config")
