"""Shared by the benchmarks that run a job from another checkout beside this one (the same-run baseline of
``--baseline-tree``, in ``bench/executor_loss.py`` and ``bench/handover_latency.py``): that tree's interpreter, an
executor Python of it and its job package (``tests.runtime.helpers.start_sparza(..., python=python_of(tree))`` starts
its ``sparza run``).

Each function takes the tree (or its interpreter) instead of using this process's, because the baseline's sparza
and dependencies are the ones its own ``.venv`` holds, not this tree's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["build_package", "executor_python", "python_of"]


def python_of(tree: Path) -> str:
    """The interpreter of ``tree``'s virtualenv (``.venv/bin/python``)."""
    return str(tree / ".venv" / "bin" / "python")


def executor_python(directory: Path, python: str) -> str:
    """As :func:`sparza.devservers.spark.executor_python`, for another tree's interpreter: only its installed
    dependencies, no editable install (sparza reaches the executors through job.py.files)."""
    site = subprocess.run([python, "-c", "import os, sysconfig; p = sysconfig.get_paths(); "
                           "print(os.pathsep.join(dict.fromkeys([p['purelib'], p['platlib']])))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    script = directory / "executor-python"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/bin/sh\n"
                      f"export PYTHONPATH=\"${{PYTHONPATH:+$PYTHONPATH{os.pathsep}}}{site}\"\n"
                      f"exec {python} -S \"$@\"\n", encoding="utf-8")
    script.chmod(0o755)
    return str(script)


def build_package(tree: Path, python: str, package: Path) -> None:
    """Build ``tree``'s job package (its sparza and ``examples``) at ``package`` with ``tree``'s interpreter."""
    subprocess.run([python, "-c", "import sys; sys.path.insert(0, sys.argv[2]); "
                    "from sparza.runtime.driver.packaging import build_package; "
                    "build_package(sys.argv[1], ['examples'])", str(package), str(tree)],
                   cwd=tree, check=True, capture_output=True, timeout=300)
