"""The README and docs point at things that exist, and the README's example job is the real one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_relative_links_resolve() -> None:
    broken = []
    for page in PAGES:
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_readme_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = text.split("```", 2)[1]
    assert "make demo" in first_block and "make test" in first_block


def test_readme_example_is_the_shipped_task() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```python", 1)[1].split("```", 1)[0]
    source = (ROOT / "examples" / "keyed_count" / "task.py").read_text(encoding="utf-8")
    code = [line.strip() for line in block.splitlines() if line.strip()]
    assert 8 <= len(code) <= 25
    missing = [line for line in code if line not in source]
    assert missing == []


def test_every_capability_page_is_linked_from_the_index() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for page in ("concepts", "streams", "azureblob", "state", "coordination", "runtime", "control", "api",
                 "adjunct", "operations", "config-reference", "benchmarks", "comparison"):
        assert f"({page}.md)" in index


_PATH = re.compile(r"`([\w./-]+/[\w.-]+\.py)(?:::(\w+))?")
_NAME = re.compile(r"`(sparza(?:\.\w+)+)")


def _resolves(dotted: str) -> bool:
    """``sparza.a.b.C.m``: the longest importable module prefix, then attributes."""
    import importlib

    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attr in parts[end:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def test_paths_and_names_the_docs_give_exist() -> None:
    """A file path (``engine/commit.py``, ``tests/x/test_y.py::test_z``) or a dotted name of a sparza module
    (``sparza.engine.results.RESULT_SCHEMA``) a page names exists: moves leave no stale cross-reference."""
    src = ROOT / "src" / "sparza"
    modules = {p.stem for p in src.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for path, test in _PATH.findall(text):
            found = next((c for c in (ROOT / path, src / path, ROOT / "src" / path, ROOT / "tests" / path)
                          if c.exists()), None)
            if found is None:
                stale.append(f"{page.name}: {path}")
            elif test and not re.search(rf"def {test}\b", found.read_text(encoding="utf-8")):
                stale.append(f"{page.name}: {path}::{test}")
        for dotted in _NAME.findall(text):
            if dotted.split(".")[1] in modules and not _resolves(dotted):  # sparza.type: a header, not a module
                stale.append(f"{page.name}: {dotted}")
    assert stale == []


def test_guarantees_page_reports_without_a_diary() -> None:
    """docs/guarantees.md says what is proven, how, the counts by engine and mode and the open risks, as a report:
    no run-by-run diary (dated count headings, machine loads, commit ids, branch names)."""
    page = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    report = page.split("## What is proven, how, and the counts", 1)[1]
    for part in ("**What is proven.**", "**How.**", "**The counts.**", "| engine |", "**Open risks.**"):
        assert part in report, part
    for pattern in (r"^#+ .*\d{4}-\d\d-\d\d", r"load average", r"\bload \d", r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
                    r"\bwt-[a-z]+\b", r"\d\d:\d\d UTC"):
        found = re.search(pattern, page, re.IGNORECASE | re.MULTILINE)
        assert found is None, f"{pattern!r}: {page[max(0, found.start() - 60):found.end() + 60]!r}"
