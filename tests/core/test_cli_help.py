"""Every help page of the ``sparza`` command reads like the tools users know: no ``<str>``/``<bool>`` type
column, boolean options as bare flags, values with a metavar in capitals (or the accepted choices)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from typer.core import TyperArgument, TyperOption
from typer.main import get_command
from typer.testing import CliRunner

from sparza.cli import app
from sparza.cli._help import SparzaCommand, SparzaGroup, metavar

_TYPE_COLUMN = re.compile(r"<(str|bool|int|float|path|list|text)\b", re.IGNORECASE)
_METAVAR = re.compile(r"^([A-Z][A-Z0-9_:]*|[a-z]+(\|[a-z]+)+)$")


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(get_command(app))


def test_every_command_is_drawn_by_sparza_s_help() -> None:
    assert len(COMMANDS) > 30
    assert all(isinstance(c, SparzaGroup | SparzaCommand) for _, c in COMMANDS), \
        [" ".join(p) for p, c in COMMANDS if not isinstance(c, SparzaGroup | SparzaCommand)]


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "sparza")
def test_help_page_has_no_type_column_and_flags_read_as_flags(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.startswith(f"Usage: sparza {' '.join(path)}".rstrip() + " ")
    assert _TYPE_COLUMN.search(text) is None, text
    command = dict(COMMANDS)[path]
    for param in command.params:
        if isinstance(param, TyperOption) and param.is_flag:
            names = ", ".join(sorted(param.opts, key=lambda o: o.startswith("--")))
            assert re.search(rf"^  {re.escape(names)}( / --no-\S+)?  ", text, re.MULTILINE), (names, text)
        elif isinstance(param, TyperOption | TyperArgument):
            shown = metavar(param)
            assert _METAVAR.match(shown), (param.opts, shown)
            assert shown in text


def test_run_help_lines() -> None:
    text = CliRunner().invoke(app, ["run", "--help"]).output
    assert re.search(r"^  -c, --config FILE +Job config", text, re.MULTILINE)
    assert re.search(r"^  --once +Process what is available now", text, re.MULTILINE)
    assert re.search(r"^  --master URL +Spark master URL", text, re.MULTILINE)
    tail = CliRunner().invoke(app, ["stream", "tail", "--help"]).output
    assert "Usage: sparza stream tail [OPTIONS] STREAM\n" in tail
    assert re.search(r"^  -n, --count N +How many messages to print", tail, re.MULTILINE)
    assert "How many messages to print. [default: 10; at least 1]" in " ".join(tail.split())
    assert re.search(r"^  --control / --no-control +Show control messages", tail, re.MULTILINE)
    assert "Show control messages. [default: --control]" in " ".join(tail.split())
    demo = CliRunner().invoke(app, ["demo", "--help"]).output
    assert re.search(r"^  --lateness-ms MS ", demo, re.MULTILINE)
