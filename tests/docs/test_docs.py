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
