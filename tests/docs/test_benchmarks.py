"""The benchmark suite's smoke test (cheap): every benchmark imports and takes --scale, and
docs/benchmarks.md is built from the committed sections.

The whole ``bench/run_all.py --scale small`` takes longer than a CI smoke test should on the
2-core machine (minutes: Azurite, Spark and multi-process rounds), so CI runs ``--check``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_benchmark_script_imports_and_takes_scale() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--check"], capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("streams", "azureblob", "state_backup", "coordination", "runtime", "control", "adjunct", "tables",
                 "connect", "plots"):
        assert f"== {name}: ok" in result.stdout


def test_benchmarks_page_holds_every_committed_section() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    sections = sorted((ROOT / "docs" / "bench").glob("*.md"))
    assert sections
    for section in sections:
        text = section.read_text(encoding="utf-8")
        title = text.splitlines()[0]
        assert title.startswith("## ") and title in page, section.name
        assert "Command: `" in text, section.name
