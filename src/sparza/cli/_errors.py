"""How the CLI reports failures: one red line naming the problem, exit code 2 for config errors."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

from sparza.errors import ConfigError, SparzaError

__all__ = ["EXIT_CONFIG", "EXIT_FAILURE", "run_app"]

EXIT_FAILURE = 1
EXIT_CONFIG = 2


def run_app(app: Any) -> None:
    """Run a Typer app; a :class:`SparzaError` becomes one line on stderr instead of a traceback."""
    err = Console(stderr=True, soft_wrap=True)  # one line, even without a terminal
    try:
        app(standalone_mode=True)
    except ConfigError as exc:
        err.print(f"[red]config error:[/red] {exc}", highlight=False)
        sys.exit(EXIT_CONFIG)
    except SparzaError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(EXIT_FAILURE)
