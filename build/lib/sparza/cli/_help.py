"""Help pages that read like the command-line tools users know (git, click, argparse).

Typer draws a type column (``<str>``, ``<bool>``) beside every option; sparza's help shows instead, per option,
its flags and a metavar that says what to give (``--config FILE``, ``--events N``, ``--lateness-ms MS``):
a boolean option is a bare flag (``--once``, ``--control/--no-control``), an option with no ``metavar`` of its
own shows its name in capitals (``--stage STAGE``), an integer ``N``. Every command group and command of the
``sparza`` app is made by :class:`SparzaTyper`, which gives them the classes below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["SparzaCommand", "SparzaGroup", "SparzaTyper", "metavar"]


def metavar(param: TyperOption | TyperArgument) -> str:
    """What the help shows for ``param``'s value ("" for a flag, which takes none)."""
    if isinstance(param, TyperOption) and param.is_flag:
        return ""
    if param.metavar:
        return param.metavar
    annotation = param.type_descriptor.annotation
    if isinstance(param, TyperOption):
        if annotation in (int, float):
            return "N"
        if annotation is Path:
            return "PATH"
        long = next((o for o in param.opts if o.startswith("--")), param.opts[0])
        return long.lstrip("-").replace("-", "_").upper()
    return (param.name or "ARG").upper()


def _option_names(param: TyperOption) -> str:
    names = ", ".join(sorted(param.opts, key=lambda o: o.startswith("--")))
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    value = metavar(param)
    return f"{names} {value}" if value else names


def _notes(param: TyperOption | TyperArgument) -> str:
    notes = []
    if param.required:
        notes.append("required")
    elif isinstance(param, TyperOption) and param.show_default is not False:
        default = param.default
        if param.is_flag and param.secondary_opts:
            notes.append(f"default: {(param.opts if default else param.secondary_opts)[0]}")
        elif not param.is_flag and default not in (None, "", [], ()) and not callable(default):
            notes.append(f"default: {', '.join(map(str, default)) if isinstance(default, list | tuple) else default}")
    if isinstance(param, TyperOption) and (param.min is not None or param.max is not None) and not param.is_flag:
        low = "" if param.min is None else f"at least {param.min}"
        high = "" if param.max is None else f"at most {param.max}"
        notes.append(" and ".join(x for x in (low, high) if x))
    return f"  [{'; '.join(notes)}]" if notes else ""


def _usage(command: Any, ctx: typer.Context) -> str:
    pieces = ["[OPTIONS]"]
    for param in command.get_params(ctx):
        if isinstance(param, TyperArgument):
            name = metavar(param) + ("..." if param.nargs != 1 else "")
            pieces.append(name if param.required else f"[{name}]")
    if isinstance(command, TyperGroup):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def format_help(command: Any, ctx: typer.Context, formatter: Any) -> None:
    """Usage, description, arguments, options and (for a group) commands, in click's plain layout."""
    formatter.write_usage(ctx.command_path, _usage(command, ctx))
    if command.help:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(command.help)
    params = [p for p in command.get_params(ctx) if not p.hidden]
    arguments = [(metavar(p), (p.help or "") + _notes(p)) for p in params if isinstance(p, TyperArgument)]
    options = [(_option_names(p), (p.help or "") + _notes(p)) for p in params if isinstance(p, TyperOption)]
    for title, rows in (("Arguments", arguments), ("Options", options)):
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)
    if isinstance(command, TyperGroup):
        rows = [(name, sub.get_short_help_str(limit=300))
                for name, sub in command.commands.items() if not sub.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class SparzaCommand(TyperCommand):
    """A sparza command: its help in the plain layout of :func:`format_help`."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # ctx: typer's own click Context
        format_help(self, ctx, formatter)


class SparzaGroup(TyperGroup):
    """A sparza command group: its help in the plain layout of :func:`format_help`, commands in declaration order."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # ctx: typer's own click Context
        format_help(self, ctx, formatter)


class SparzaTyper(typer.Typer):
    """A :class:`typer.Typer` whose groups and commands are :class:`SparzaGroup` and :class:`SparzaCommand`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", SparzaGroup)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", SparzaCommand)
        return super().command(*args, **kwargs)
