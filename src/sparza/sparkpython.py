"""The Python that Spark runs on a local master: the installed pyspark first, for every process Spark starts.

Spark starts some Python processes itself, not through the worker daemon: the driver-side runner of a Python
streaming source (``pyspark.sql.streaming.python_streaming_source_runner``) is started as
``<PYSPARK_PYTHON> -m <module>`` with Spark's source zips at the head of ``PYTHONPATH``, and must connect back to
the JVM within a fixed 10 s ("Python worker failed to connect back"; no setting changes it). From the zip it
compiles pyspark's modules from source first: 4-6 s on this 2-core machine at a load of 12, against 1.3-1.7 s
for the installed copy with its ``__pycache__``, so a busy machine missed the 10 s now and then.

:func:`launcher` writes a small executable that runs this module with the same interpreter; this module moves
the zips behind the installed package (:func:`sparza.sparkdaemon.prefer_installed_pyspark`) and runs the module
Spark asked for, as ``python -m`` would. Sessions sparza builds on a ``local`` master use it as the Python of
their workers (:func:`local_python`): the code that runs is the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import runpy
import shlex
import signal
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["launcher", "local_python", "write_executable"]


def launcher(python: str | None = None) -> str:
    """The path of an executable that runs ``python`` (this interpreter by default) through this module; written
    once per interpreter under the temp dir and reused."""
    python = python or sys.executable
    return write_executable("python", python, f'#!/bin/sh\nexec {shlex.quote(python)} -m {__name__} "$@"\n')


def write_executable(kind: str, target: str, script: str) -> str:
    """The path of an executable holding ``script`` (a wrapper of ``target``), written once under the temp dir
    (named by ``kind`` and a hash of ``target``) and reused while its content is the same."""
    tag = hashlib.sha256(target.encode()).hexdigest()[:12]
    directory = os.path.join(tempfile.gettempdir(), f"sparza-python-{os.getuid()}")
    path = os.path.join(directory, f"{kind}-{tag}")
    try:
        with open(path, encoding="utf-8") as existing:
            if existing.read() == script and os.access(path, os.X_OK):
                return path
    except OSError:
        pass
    os.makedirs(directory, mode=0o700, exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as out:
        out.write(script)
    os.chmod(partial, 0o755)
    os.replace(partial, path)  # atomic: a concurrent session sees the old file or the new one, never half of one
    return path


@contextlib.contextmanager
def local_python() -> Iterator[None]:
    """While a local session is built: ``PYSPARK_PYTHON`` is the :func:`launcher` of this interpreter (SparkContext
    reads it once, at its start); the previous value comes back after."""
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = launcher()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def _main(args: list[str]) -> None:
    from sparza.sparkdaemon import prefer_installed_pyspark

    # The JVM sparza starts ignores SIGTERM (sparza.runtime.driver.session), and an ignored signal stays ignored
    # across exec: the processes it starts take the default back, so Spark's destroy() still ends them.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if len(args) < 2 or args[0] != "-m":  # not how Spark starts Python: run it unchanged
        os.execv(sys.executable, [sys.executable, *args])
    sys.path[:] = prefer_installed_pyspark(sys.path)
    sys.modules.pop(args[1], None)  # the daemon's own module, imported just now: run afresh, as `python -m` would
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
