"""What `pip install sparza` brings is what the shipped package imports: no declared dependency that nothing
imports, no hand pin of what pyspark[connect] brings, and no development-only package imported by the product
except behind an ImportError guard that says what to install."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

CHECKOUT_ONLY = {"examples": "sparza demo runs the demo application of a checkout's examples/ (not packaged)"}
"""Modules the product imports that no distribution provides, with why."""


def _name(requirement: str) -> str:
    return Requirement(requirement).name.lower().replace("_", "-")


def _core() -> dict[str, Requirement]:
    return {_name(r): Requirement(r) for r in PYPROJECT["project"]["dependencies"]}


def _brought_by_pyspark() -> set[str]:
    connect = [Requirement(r) for r in requires("pyspark") or []]
    return {_name(str(r)) for r in connect if r.marker is not None and r.marker.evaluate({"extra": "connect"})}


def _is_import_error(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Name) and node.id in ("ImportError", "ModuleNotFoundError")


def _guards_imports(node: ast.AST) -> bool:
    """``try: ... except ImportError`` or ``with contextlib.suppress(ImportError):``."""
    if isinstance(node, ast.Try):
        return any(_is_import_error(h.type) for h in node.handlers)
    if isinstance(node, ast.With):
        return any(isinstance(item.context_expr, ast.Call) and any(_is_import_error(a) for a in item.context_expr.args)
                   for item in node.items)
    return False


def _imports() -> list[tuple[str, str, bool]]:
    """(top-level module, file, guarded by an ImportError handler) of every import in src/sparza."""
    found = []
    for path in sorted((ROOT / "src" / "sparza").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if _guards_imports(node):
                guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))  # type: ignore[attr-defined]
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "sparza":
                    found.append((top, str(path.relative_to(ROOT)), id(node) in guarded))
    return found


def test_pyspark_connect_brings_its_own_dependencies() -> None:
    core = _core()
    assert "connect" in core["pyspark"].extras
    hand_pinned = {"protobuf", "grpcio", "grpcio-status", "googleapis-common-protos", "zstandard"} & set(core)
    assert not hand_pinned, f"pyspark[connect] brings these, at the versions PySpark needs: {hand_pinned}"
    # The one cap kept on what it brings: PySpark 4.3 warns that it does not fully support pandas 3.
    assert "pandas" in _brought_by_pyspark()
    assert core["pandas"].specifier.contains("2.3.3") and not core["pandas"].specifier.contains("3.0.0")


def test_every_declared_dependency_is_imported_by_the_product() -> None:
    by_module = packages_distributions()
    imported = {_name(dist) for top, _, _ in _imports() for dist in by_module.get(top, [])}
    unused = set(_core()) - imported - {"pandas"}  # pandas: only a cap on what pyspark[connect] brings
    assert not unused, f"declared dependencies nothing in src/sparza imports: {sorted(unused)}"


def test_the_product_imports_only_what_pip_install_sparza_brings() -> None:
    core = set(_core()) | _brought_by_pyspark()
    dev = {_name(r) for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra}
    by_module = packages_distributions()
    problems = []
    for top, path, guarded in _imports():
        if top in CHECKOUT_ONLY:
            continue
        dists = {_name(d) for d in by_module.get(top, [])}
        assert dists, f"{path} imports {top}, which no installed distribution provides"
        if dists & core:
            continue
        if not guarded:
            extras = sorted(dists & dev)
            problems.append(f"{path} imports {top} ({', '.join(sorted(dists))}"
                            f"{', an extra: ' + ', '.join(extras) if extras else ''}) without an ImportError guard")
    assert not problems, "\n".join(problems)


def test_extras_are_explicit() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(extras) == {"dev", "bench"}
    dev = {_name(r) for r in extras["dev"]}
    assert "sparza" in dev, "dev includes the bench extra"
    for package in ("pytest", "duckdb", "polars"):
        assert package in dev and package not in _core()
    bench = {_name(r) for r in extras["bench"]}
    assert {"matplotlib", "py-spy"} <= bench
