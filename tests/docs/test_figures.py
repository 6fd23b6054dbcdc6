"""Every measured figure a docs page quotes is one docs/benchmarks.md records.

A figure is what reads as a measurement: a rate (``183 k msg/s``, ``125 MiB/s``, ``131 k puts/s``), a percentage
(``9.7%`` of a ceiling, ``61-83 %``), a ratio written on its number (``5.35x`` or with the multiplication sign; a
range ``0.9-3.2x`` is two figures) or a latency named by its percentile (``p50 46 ms``, ``p99 4.5 s``, ``max 76
ms``). A bound is not a figure (``≥ 4x``, ``p99 ≤ 150 ms``: a goal), nor a multiple spelled out (``three times the
timeout``). Each figure must be, at the precision the page quotes it,
one of the figures of the same kind in docs/benchmarks.md (its goals table and sections, a table cell under a
header that names the unit, or a number written with its unit): ``183 k msg/s`` matches a recorded 183,012, ``4.5
s`` a recorded 4,515 ms. Other measurements in prose (a profile's µs per record) are not checked; pages quote
benchmark figures with a link to their section, which says when and how they were measured.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
PAGES = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p != BENCHMARKS)]

_TIMES, _DASH = "\u00d7", "\u2013"  # the multiplication sign and the en dash pages write
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_RATE = r"msg/s|messages/s|records/s|puts/s|lookups/s|MiB/s|MB/s"
_FIGURE = re.compile(
    rf"(?P<guard>[≥≤<>~]\s?)?(?:"
    rf"(?:(?P<rlo>{_NUM})\s?[{_DASH}-]\s?)?(?P<rv>{_NUM})\s?(?P<rk>k|M)?\s?(?:{_RATE})\b"
    rf"|(?:(?P<xlo>{_NUM})\s?[{_DASH}-]\s?)?(?P<xv>{_NUM})[{_TIMES}x](?!\w)"
    rf"|(?<![\d.,])(?:(?P<clo>{_NUM})\s?[{_DASH}-]\s?)?(?P<cv>{_NUM})\s?%"
    rf"|\b(?:p50|p95|p99(?:\.9)?|max)\s(?P<pv>{_NUM})\s?(?P<pu>ms|s)?\b)")
_SCALE = {"k": 1e3, "M": 1e6, None: 1.0}


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def figures(text: str) -> Iterator[tuple[str, str, str, float]]:
    """(what the page says, kind, the number as written, its unit's scale to the kind's base unit) of each figure;
    kinds: ``rate`` (per second), ``ratio``, ``percent``, ``time`` (ms)."""
    for found in _FIGURE.finditer(text):
        if found.group("guard"):
            continue
        said = found.group(0)
        if found.group("rv"):
            scale = _SCALE[found.group("rk")]
            for number in (found.group("rlo"), found.group("rv")):
                if number:
                    yield said, "rate", number, scale
        elif found.group("xv"):
            for number in (found.group("xlo"), found.group("xv")):
                if number:
                    yield said, "ratio", number, 1.0
        elif found.group("cv"):
            for number in (found.group("clo"), found.group("cv")):
                if number:
                    yield said, "percent", number, 1.0
        else:
            unit = found.group("pu")
            if unit is None:  # "p50 53 / p99 127 ms": the unit that follows
                after = re.match(r"[^.;\n]{0,40}?\b(ms|s)\b", text[found.end():])
                unit = after.group(1) if after else "ms"
            yield said, "time", found.group("pv"), 1000.0 if unit == "s" else 1.0


_HEADER_KINDS = ((re.compile(rf"{_RATE}|/s\b"), "rate", 1.0), (re.compile(r"\bms\b"), "time", 1.0),
                 (re.compile(r"\b(s|seconds)\b"), "time", 1000.0))


def recorded() -> set[tuple[str, float]]:
    """(kind, value in the kind's base unit) of every figure docs/benchmarks.md records."""
    text = BENCHMARKS.read_text(encoding="utf-8")
    found = {(kind, _value(number) * scale) for _, kind, number, scale in figures(text)}
    found |= {("time", _value(m.group(1)) * (1000.0 if m.group(2) == "s" else 1.0))
              for m in re.finditer(rf"({_NUM})\s?(ms|s)\b", text)}
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if not (line.startswith("|") and re.match(r"^\|[-| :]+\|$", lines[i + 1])):
            continue
        headers = [cell.strip() for cell in line.strip("|").split("|")]
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            for header, cell in zip(headers, (c.strip() for c in row.strip("|").split("|")), strict=False):
                kind_scale = next(((kind, scale) for rx, kind, scale in _HEADER_KINDS if rx.search(header)), None)
                if kind_scale is not None:
                    found |= {(kind_scale[0], _value(n) * kind_scale[1]) for n in re.findall(_NUM, cell)}
    return found


def _is_recorded(kind: str, number: str, scale: float, known: set[tuple[str, float]]) -> bool:
    value, places = _value(number), _decimals(number)
    return any(k == kind and round(v / scale, places) == value for k, v in known)


def test_every_quoted_figure_is_recorded_in_benchmarks() -> None:
    known = recorded()
    stray = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for said, kind, number, scale in figures(text):
            if not _is_recorded(kind, number, scale, known):
                stray.append(f"{page.relative_to(ROOT)}: {said!r}")
    assert stray == [], "quote only figures docs/benchmarks.md records (or measure them there first)"


def test_the_check_finds_figures_and_tells_them_apart() -> None:
    text = (f"p50 46 ms, p99 4.5 s; 183 k msg/s; 0.9{_DASH}3.2{_TIMES} and 5.35x; goal ≥ 4{_TIMES} and p99 ≤ 150 ms; "
            "three times the timeout; p50 53 / p99 127 ms; 9.7% of it, ≥ 25 %")
    got = [(kind, number) for _, kind, number, _ in figures(text)]
    assert got == [("time", "46"), ("time", "4.5"), ("rate", "183"), ("ratio", "0.9"), ("ratio", "3.2"),
                   ("ratio", "5.35"), ("time", "53"), ("time", "127"), ("percent", "9.7")]
    known = {("time", 4515.0), ("rate", 183_012.0), ("ratio", 5.35)}
    assert _is_recorded("time", "4.5", 1000.0, known) and _is_recorded("rate", "183", 1e3, known)
    assert not _is_recorded("time", "4.6", 1000.0, known) and not _is_recorded("ratio", "5.36", 1.0, known)
