"""Balanced, sticky assignment of tasks to processors: as few tasks move as possible.

With *n* tasks and *p* processors every processor gets ⌊n/p⌋ or ⌈n/p⌉ tasks. Surviving processors
keep what they had up to their share (the ones holding most get the larger shares, so fewer tasks
move); tasks of departed processors, new tasks and any surplus go to the least-loaded processors.
The result is deterministic for the same inputs, whoever computes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["assign_tasks", "task_sort_key"]


def task_sort_key(task: str) -> tuple[object, ...]:
    """Natural order: ``Partition 2`` before ``Partition 10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", task))


def assign_tasks(tasks: Iterable[str], processors: Iterable[str],
                 previous: Mapping[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Assign every task to exactly one processor, balanced and sticky to ``previous``.

    Returns an entry for every processor (possibly empty). With no processors, returns ``{}``.
    """
    all_tasks = sorted(set(tasks), key=task_sort_key)
    procs = sorted(set(processors))
    if not procs:
        return {}
    task_set = set(all_tasks)
    prev = previous or {}
    kept: dict[str, list[str]] = {}
    claimed: set[str] = set()
    for pid in procs:
        mine = [t for t in sorted(prev.get(pid, []), key=task_sort_key) if t in task_set and t not in claimed]
        kept[pid] = mine
        claimed.update(mine)
    base, extra = divmod(len(all_tasks), len(procs))
    # Larger shares go to the processors that already hold the most, so fewer tasks have to move.
    by_load = sorted(procs, key=lambda p: (-len(kept[p]), p))
    quota = {pid: base + (1 if i < extra else 0) for i, pid in enumerate(by_load)}
    free = [t for t in all_tasks if t not in claimed]
    for pid in procs:
        if len(kept[pid]) > quota[pid]:
            free.extend(kept[pid][quota[pid]:])
            kept[pid] = kept[pid][: quota[pid]]
    free.sort(key=task_sort_key)
    for pid in sorted(procs, key=lambda p: (len(kept[p]) - quota[p], p)):
        while len(kept[pid]) < quota[pid] and free:
            kept[pid].append(free.pop(0))
    return {pid: sorted(kept[pid], key=task_sort_key) for pid in procs}
