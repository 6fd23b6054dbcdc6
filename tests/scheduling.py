"""The order ``make test`` hands the tests to its pytest-xdist workers in: the known-long tests first, spread over the
workers so each starts with the same share of them.

Why: ``--dist worksteal`` (pytest-xdist 3.8, ``xdist/scheduler/worksteal.py``) gives worker ``i`` the ``i``-th
contiguous chunk of the collection order (sizes ``remaining // workers_left``), each worker runs its chunk from the
front, and an idle worker steals the *back* half of the longest queue. A long test near the end of a chunk is
therefore met last, with nothing left to balance it: the other worker idles for its whole length (simulated on the
suite's durations, 59 s of a 3,790 s loaded run; the longest tests take 100-280 s). Placed at the front of the
chunks, they are balanced greedily (longest first onto the least-loaded worker) and the short tests behind them are
what gets stolen, which evens the workers out to within a few seconds.

The durations come from ``tests/slow_tests.txt`` (seconds and node id, from a full run's JUnit XML); a test missing
from it keeps its place among the short ones. Nothing is run differently, only in another order: every test still
runs, and a module's other tests keep their order. Only an xdist worker of ``--dist worksteal`` reorders (its
controller schedules the worker's collection, which every worker computes identically from the same file).
``python tests/scheduling.py suite.xml`` prints a new ``slow_tests.txt`` from a JUnit XML.
"""

from __future__ import annotations

import itertools
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parents[1]
SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")
THRESHOLD_S = 10.0  # below it a test is one of the many short ones stealing evens out

T = TypeVar("T")


def read_durations(path: Path = SLOW_TESTS) -> dict[str, float]:
    """``node id -> seconds`` from a ``slow_tests.txt`` (``#`` starts a comment line)."""
    out: dict[str, float] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            seconds, nodeid = line.split(" ", 1)
            out[nodeid] = float(seconds)
    return out


def chunk_sizes(count: int, workers: int) -> list[int]:
    """The sizes of the chunks worksteal's first distribution gives each worker (``len(pending) // nodes_left``)."""
    sizes = []
    for i in range(workers):
        size = count // (workers - i)
        sizes.append(size)
        count -= size
    return sizes


def arrange(ids: Sequence[str], items: Sequence[T], durations: dict[str, float], workers: int) -> list[T]:
    """``items`` (with node ids ``ids``) reordered so each worker's chunk starts with its greedy share of the long
    tests (longest first); the short tests fill the chunks in their collection order."""
    if workers < 2:
        return list(items)
    long = sorted((i for i, nid in enumerate(ids) if durations.get(nid, 0.0) >= THRESHOLD_S),
                  key=lambda i: (-durations[ids[i]], i))
    if not long:
        return list(items)
    bins: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in long:
        w = load.index(min(load))
        bins[w].append(i)
        load[w] += durations[ids[i]]
    chosen = set(long)
    short = iter([i for i in range(len(items)) if i not in chosen])
    order: list[int] = []
    for w, size in enumerate(chunk_sizes(len(items), workers)):
        order.extend(bins[w])
        order.extend(itertools.islice(short, max(0, size - len(bins[w]))))
    order.extend(short)  # only if a bin outgrew its chunk (more long tests than a chunk holds)
    return [items[i] for i in order]


def junit_durations(xml: Path) -> list[tuple[float, str]]:
    """(seconds, node id) of every test case of a JUnit XML (pytest's), longest first."""
    rows = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        if parts and parts[-1].startswith("Test"):
            nodeid = "/".join(parts[:-1]) + ".py::" + parts[-1] + "::" + (case.get("name") or "")
        else:
            nodeid = "/".join(parts) + ".py::" + (case.get("name") or "")
        rows.append((float(case.get("time") or 0.0), nodeid))
    return sorted(rows, reverse=True)


if __name__ == "__main__":
    print("# Seconds and node id of the tests that took >= 10 s in a full `make test` (from its JUnit XML; only the"
          "\n# ranking matters). tests/scheduling.py starts them first.")
    for seconds, nodeid in junit_durations(Path(sys.argv[1])):
        if seconds >= THRESHOLD_S:
            print(f"{seconds:.1f} {nodeid}")
