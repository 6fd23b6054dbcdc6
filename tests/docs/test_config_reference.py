"""docs/config-reference.md is generated from the keys the code declares; it must not drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_committed_config_reference_is_what_the_code_declares() -> None:
    # A fresh interpreter: keys declared by test helpers in this process must not leak into the page.
    generated = subprocess.run([sys.executable, "-m", "sparza.config.reference"], capture_output=True, text=True,
                               check=True, timeout=120).stdout
    committed = (DOCS / "config-reference.md").read_text(encoding="utf-8")
    assert committed == generated, ("docs/config-reference.md is out of date: regenerate it with 'make docs' "
                                    "(python -m sparza.config.reference > docs/config-reference.md)")


def test_every_package_has_a_section() -> None:
    text = (DOCS / "config-reference.md").read_text(encoding="utf-8")
    for package in ("runtime", "api", "control"):
        assert f"## `{package}`" in text
    assert text.count("| `") > 50
