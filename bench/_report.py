"""Shared by every benchmark: print a result table and record it in ``docs/benchmarks.md``.

The page is a report: the goals and where each stands (``docs/bench/notes/summary.md``, by hand), then one
section per benchmark in this shape: what it measures, the command, the machine, the latest table with the
baseline measured in the same run, and, where a goal is unmet, one paragraph on why
(``docs/bench/notes/<name>.md``, by hand, so a re-run does not erase it). Each benchmark writes its own
section to ``docs/bench/<name>.md`` (so benchmarks can run alone) and the page is rebuilt from all of them.
Run history belongs to git, so a section holds the latest run only: no dates of earlier runs, no commit
hashes, no load averages.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# SPARZA_BENCH_OUT redirects the report (smoke runs must not overwrite the committed full results).
_OUT = Path(os.environ["SPARZA_BENCH_OUT"]) if os.environ.get("SPARZA_BENCH_OUT") else ROOT / "docs"
SECTIONS = _OUT / "bench"
NOTES = ROOT / "docs" / "bench" / "notes"
REPORT = _OUT / "benchmarks.md"


def machine() -> str:
    """One line describing the machine and versions the figures come from."""
    versions = []
    for mod in ("pyspark", "pyarrow", "deltalake", "rocksdict", "fastavro"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except Exception:
            pass
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            + ", ".join(versions))


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def record(name: str, title: str, command: str, body: str, *, measures: str) -> None:
    """Print ``body`` and save it as the section ``name`` of docs/benchmarks.md; ``measures`` says in a
    sentence or two what the benchmark measures and against which baseline."""
    print(body)
    SECTIONS.mkdir(parents=True, exist_ok=True)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    text = (f"## {title}\n\n{measures.strip()}\n\nCommand: `{command}`  \nMeasured {day} on {machine()}.\n\n"
            f"{body.strip()}\n")
    (SECTIONS / f"{name}.md").write_text(text, encoding="utf-8")
    rebuild()


def rebuild() -> None:
    """Rebuild docs/benchmarks.md from the goals summary and every section with its notes."""
    parts = ["# Benchmarks\n",
             "What each benchmark measures, the command that measures it, and its latest figures next to a "
             "baseline measured in the same run on this project's 2-core development machine. "
             "`bench/run_all.py` re-runs them all.\n"]
    summary = NOTES / "summary.md"  # written by hand: the goals across sections, kept by every rebuild
    if summary.exists():
        parts.append(summary.read_text(encoding="utf-8"))
    for section in sorted(SECTIONS.glob("*.md")):
        parts.append(section.read_text(encoding="utf-8"))
        notes = NOTES / section.name
        if notes.exists():
            parts.append(notes.read_text(encoding="utf-8"))
    REPORT.write_text("\n".join(parts), encoding="utf-8")


if __name__ == "__main__":
    rebuild()
    sys.exit(0)
