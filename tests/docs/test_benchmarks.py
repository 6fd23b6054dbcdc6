"""The benchmark suite's smoke test (cheap): every benchmark imports and takes --scale, and
docs/benchmarks.md is a report built from the committed sections: per benchmark what it measures, the
command, the latest table, and a paragraph on each unmet goal; no run history.

The whole ``bench/run_all.py --scale small`` takes longer than a CI smoke test should on the
2-core machine (minutes: Azurite, Spark and multi-process rounds), so CI runs ``--check``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_benchmark_script_imports_and_takes_scale() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--check"], capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("streams", "azureblob", "state_backup", "coordination", "runtime", "control", "adjunct", "tables",
                 "connect", "peers", "plots"):
        assert f"== {name}: ok" in result.stdout


def test_benchmarks_page_holds_every_committed_section() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    sections = sorted((ROOT / "docs" / "bench").glob("*.md"))
    assert sections
    for section in sections:
        text = section.read_text(encoding="utf-8")
        title, blank, measures, *_ = text.splitlines()
        assert title.startswith("## ") and title in page, section.name
        assert blank == "" and measures and not measures.startswith(("Command", "|", "#")), section.name
        assert re.search(r"^Command: `[^`]+`  \nMeasured \d{4}-\d\d-\d\d on .+\.$", text, re.MULTILINE), section.name
        assert "|---|" in text or "![" in text, section.name  # the latest table (or plot)


def test_benchmarks_page_reports_without_a_diary() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert page.index("## Goals and where each stands") < page.index("\n## ", page.index("## Goals") + 1)
    for pattern in (r"\bissue \d+", r"#\d+\b", r"load average", r"committed as", r"\b[0-9a-f]{7,40}\b(?<!\d{7})",
                    r"\d{4}-\d\d-\d\d \d\d:\d\d"):
        found = re.search(pattern, page, re.IGNORECASE)
        assert found is None, f"{pattern!r}: {page[max(0, found.start() - 60):found.end() + 60]!r}"
    for notes in sorted((ROOT / "docs" / "bench" / "notes").glob("*.md")):
        assert notes.read_text(encoding="utf-8").startswith("##"), notes.name
