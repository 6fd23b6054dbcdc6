"""The runnable examples of docs/api.md (blocks after ``<!-- runnable -->``) run as written and print what their
trailing comments say (a comment line is the printed line, then optionally two spaces and a remark)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCKS = re.findall(r"<!-- runnable -->\n```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _expected(block: str) -> list[str]:
    lines = block.rstrip().splitlines()
    out: list[str] = []
    while lines and lines[-1].strip().startswith("# "):
        out.insert(0, re.split(r"\s{2,}", lines.pop().strip()[2:], maxsplit=1)[0])
    return out


def test_the_doc_has_a_runnable_example_of_each_operator() -> None:
    text = "\n".join(BLOCKS)
    assert len(BLOCKS) >= 4 and ".join(payments" in text and "Windows.session(" in text and "early=every(" in text
    assert "runner.drain()" in text


@pytest.mark.parametrize("block", BLOCKS, ids=[f"example-{i}" for i in range(len(BLOCKS))])
def test_runnable_example_prints_what_the_doc_says(block: str) -> None:
    done = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == _expected(block)
