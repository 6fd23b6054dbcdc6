"""How the CLI reports failures: one red line naming the problem, never a traceback.

Exit code 2 for config errors and failed start checks, 1 for every other failure (sparza's own
errors, storage errors, anything unexpected), 130 for a Ctrl-C that stopped a command at once (a
running job stops cleanly on the first Ctrl-C and exits 0; a second one forces it: see
:mod:`sparza.interrupts`). ``--debug`` (anywhere on the command line) or ``SPARZA_DEBUG=1`` lets the
traceback through instead.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from sparza.azure import Failure, classify
from sparza.errors import JOB_CONFIG_PLACEHOLDER, ConfigError, SparzaError, StartCheckError, set_job_config_path
from sparza.interrupts import ForcedStop

__all__ = ["DEBUG_FLAG", "EXIT_CONFIG", "EXIT_FAILURE", "one_line", "run_app"]

EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130

DEBUG_FLAG = "--debug"
"""Command-line flag (accepted anywhere before ``--``) that shows the traceback of a failure."""


def _take_debug_flag(argv: list[str]) -> bool:
    """Remove ``--debug`` from ``argv`` (before any ``--``) and say whether it was there: every command
    accepts it without declaring it."""
    end = argv.index("--") if "--" in argv else len(argv)
    found = DEBUG_FLAG in argv[1:end]
    if found:
        argv[:] = [a for i, a in enumerate(argv) if not (a == DEBUG_FLAG and 0 < i < end)]
    return found


def one_line(exc: BaseException) -> str:
    """An unexpected exception as one line: its type and the first line of its message (SDK errors
    carry whole HTTP bodies), with what a storage error means when it is one."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    failure = classify(exc)
    if failure is None or not failure.from_sdk:
        return line
    if failure.kind is Failure.CREDENTIALS:
        return (f"storage refused the credentials ({line}): check the account key in azure.storage.connect, "
                "the account.key of the system, or AZURE_STORAGE_CONNECTION_STRING")
    if failure.kind is Failure.UNREACHABLE:
        return f"cannot connect to storage ({line}): check the endpoint and that the service (or Azurite) runs"
    return f"storage failed ({line})"


def _config_path(argv: list[str]) -> str | None:
    """The value of ``--config``/``-c`` on the command line, if any."""
    for i, arg in enumerate(argv[1:], start=1):  # argv[0] is the program (``-c`` under ``python -c``)
        if arg in ("--config", "-c") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


_job_config: str | None = None


def _say(console: Console, label: str, text: str) -> None:
    # Hints name the job's config as a placeholder (sparza.errors.JOB_CONFIG_PLACEHOLDER): the path given.
    if _job_config:
        text = text.replace(JOB_CONFIG_PLACEHOLDER, _job_config)
    # A Text, not markup: messages hold brackets (local[2], [redacted]) that rich would eat.
    console.print(Text.assemble((label, "red"), " " if text else "", text), highlight=False)


def run_app(app: Any, argv: list[str] | None = None) -> None:
    """Run a Typer app; every failure becomes one line on stderr (with ``--debug``, the traceback)."""
    global _job_config
    args = sys.argv if argv is None else argv
    debug = _take_debug_flag(args) or os.environ.get("SPARZA_DEBUG", "") not in ("", "0")
    _job_config = _config_path(args)
    set_job_config_path(_job_config)  # hints built in this process name it directly
    err = Console(stderr=True, soft_wrap=True)  # one line, even without a terminal
    hint = "" if debug else f" ({DEBUG_FLAG} shows the traceback)"
    try:
        app(args=args[1:], prog_name="sparza", standalone_mode=True)
    except SystemExit:
        raise
    except ForcedStop:
        _say(err, "stopped without committing the running batch (second Ctrl-C)", "")
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        _say(err, "interrupted", "")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if debug:
            raise
        label, text, code = _failure(exc, hint)
        _say(err, label, text)
        sys.exit(code)


def _failure(exc: Exception, hint: str) -> tuple[str, str, int]:
    """``(label, message, exit code)`` of a failed command: a config or start-check problem exits 2 with the
    message as it is, another sparza error 1; anything else 1, in one line with the debug hint."""
    if isinstance(exc, StartCheckError):
        return "start check failed:", f"{exc}", EXIT_CONFIG
    if isinstance(exc, ConfigError):
        return "config error:", f"{exc}", EXIT_CONFIG
    if isinstance(exc, SparzaError):
        return "error:", f"{exc}", EXIT_FAILURE
    return "error:", f"{one_line(exc)}{hint}", EXIT_FAILURE
