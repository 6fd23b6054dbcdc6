"""docs/architecture.md's picture is generated from the imports in src/, and no package depends on itself
through other packages, at any level (a cycle makes the layers of the picture meaningless)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("architecture", ROOT / "scripts" / "architecture.py")
assert _spec is not None and _spec.loader is not None
architecture = importlib.util.module_from_spec(_spec)
sys.modules["architecture"] = architecture
_spec.loader.exec_module(architecture)


def test_no_package_imports_itself_through_others() -> None:
    assert architecture.package_cycles(architecture.import_graph()) == []


def test_the_picture_is_the_code_s() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert architecture.updated_page(page, architecture.render()) == page, (
        "docs/architecture.md is stale: run 'make docs' (python scripts/architecture.py --write)")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_cycle_between_packages_is_found_at_any_level(tmp_path: Path) -> None:
    # No module cycle (a.x -> b.y -> a.z), yet package a needs b and b needs a; and inside c, c.p <-> c.q
    # through a lazy import in a function; the package's own __init__ re-exporting its children is no cycle.
    src = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg.a.x import X\n",
        "pkg/a/__init__.py": "", "pkg/a/x.py": "from pkg.b.y import Y\nX = Y\n", "pkg/a/z.py": "Z = 1\n",
        "pkg/b/__init__.py": "", "pkg/b/y.py": "from pkg.a.z import Z\nY = Z\n",
        "pkg/c/__init__.py": "from pkg.c import p, q\n",
        "pkg/c/p.py": "def f():\n    from pkg.c.q import g\n    return g\n",
        "pkg/c/q.py": "from pkg.c.r import h\n", "pkg/c/r.py": "import pkg.c.p\nh = 1\n",
        "pkg/d.py": "from . import e\n", "pkg/e.py": "",
    })
    cycles = architecture.package_cycles(architecture.import_graph(src))
    assert len(cycles) == 2
    assert cycles[0].startswith("cycle in pkg: pkg.a <-> pkg.b;")
    assert "pkg.a -> pkg.b (pkg.a.x imports pkg.b.y)" in cycles[0]
    assert cycles[1].startswith("cycle in pkg.c: pkg.c.p <-> pkg.c.q <-> pkg.c.r;")
    clean = architecture.package_cycles(architecture.import_graph(_tree(tmp_path / "ok", {
        "pkg/__init__.py": "from pkg.a import x\n", "pkg/a/__init__.py": "from pkg.a.x import X\n",
        "pkg/a/x.py": "from pkg.b import Y\nX = Y\n", "pkg/b/__init__.py": "Y = 1\n"})))
    assert clean == []
