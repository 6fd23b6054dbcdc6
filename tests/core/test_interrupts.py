"""Ctrl-C while a job runs: the first asks for a clean stop, a second forces it, saying so; no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from sparza.cli._errors import run_app
    from sparza.interrupts import StopOnSignals, sigint_kept

    def app(args, prog_name, standalone_mode):
        stops = []
        signals = StopOnSignals(stops.append, lambda line: print(line, file=sys.stderr, flush=True)).install()
        with sigint_kept():  # what PySpark's SparkContext does to SIGINT while a session is built
            signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        print(f"stops: {stops}", file=sys.stderr, flush=True)
        if args == ["twice"]:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        signals.restore()
        sys.exit(0)

    run_app(app, ["sparza", *sys.argv[1:]])
""")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_first_ctrl_c_requests_a_clean_stop() -> None:
    result = _run("once")
    assert result.returncode == 0, result.stderr
    assert "stops: ['stopped by SIGINT']" in result.stderr
    assert "finishing the running batch, committing, then exiting (Ctrl-C again" in result.stderr
    assert "Traceback" not in result.stderr


def test_second_ctrl_c_forces_saying_what_it_costs() -> None:
    result = _run("twice")
    assert result.returncode == 130, result.stderr
    assert "second Ctrl-C: stopping now; the running batch is not committed" in result.stderr
    assert "stopped without committing the running batch" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_help_and_the_docs_say_the_same_about_ctrl_c() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", "from sparza.cli import main; main()", "run", "--help"],
                            capture_output=True, text=True, timeout=60, env={"COLUMNS": "300", "PATH": ""})
    text = " ".join(result.stdout.split())
    assert "Ctrl-C (SIGINT) and SIGTERM, to the process or its whole process group, finish the running batch" in text
    assert "a second Ctrl-C stops at once" in text and "130" in text
    for page in ("runtime.md", "operations.md"):
        doc = " ".join((root / "docs" / page).read_text(encoding="utf-8").split())
        assert "second Ctrl-C" in doc and "130" in doc, page
        assert "130 for Ctrl-C" not in doc, page
