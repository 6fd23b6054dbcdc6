"""Balanced, sticky assignment of tasks to processors: as few tasks move as possible.

With *n* tasks and *p* processors every processor gets ⌊n/p⌋ or ⌈n/p⌉ tasks. Surviving processors
keep what they had up to their share (the ones holding most get the larger shares, so fewer tasks
move); tasks of departed processors, new tasks and any surplus go to the least-loaded processors.
The result is deterministic for the same inputs, whoever computes it.

Tasks of several jobs sharing one membership (the stages of an application) are named
``<group>/<task>`` (:func:`group_task`); each group is balanced on its own, its larger shares going
to the processors with the fewest tasks so far, so every processor gets a share of every stage and
the totals stay balanced too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["GROUP_SEPARATOR", "assign_tasks", "group_task", "split_group_task", "task_sort_key"]

GROUP_SEPARATOR = "/"
"""Between a task's group (a stage's job key) and its name in a membership shared by several jobs."""


def group_task(group: str, task: str) -> str:
    """The name of ``task`` of ``group`` in a shared membership."""
    return f"{group}{GROUP_SEPARATOR}{task}"


def split_group_task(name: str) -> tuple[str, str]:
    """``(group, task)`` of a name made by :func:`group_task`; ``("", name)`` for a task of no group."""
    group, sep, task = name.partition(GROUP_SEPARATOR)
    return (group, task) if sep else ("", name)


def task_sort_key(task: str) -> tuple[object, ...]:
    """Natural order: ``Partition 2`` before ``Partition 10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", task))


def assign_tasks(tasks: Iterable[str], processors: Iterable[str],
                 previous: Mapping[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Assign every task to exactly one processor, balanced (within each group of :func:`group_task`, and in
    total) and sticky to ``previous``.

    Returns an entry for every processor (possibly empty). With no processors, returns ``{}``.
    """
    procs = sorted(set(processors))
    if not procs:
        return {}
    groups: dict[str, list[str]] = {}
    for task in set(tasks):
        groups.setdefault(split_group_task(task)[0], []).append(task)
    prev = previous or {}
    load = dict.fromkeys(procs, 0)
    out: dict[str, list[str]] = {pid: [] for pid in procs}
    for group in sorted(groups):
        members = set(groups[group])
        part = _assign(groups[group], procs, {pid: [t for t in ts if t in members] for pid, ts in prev.items()}, load)
        for pid, mine in part.items():
            out[pid].extend(mine)
            load[pid] += len(mine)
    return {pid: sorted(out[pid], key=task_sort_key) for pid in procs}


def _assign(tasks: list[str], procs: list[str], prev: Mapping[str, list[str]],
            load: Mapping[str, int]) -> dict[str, list[str]]:
    """One group: balanced and sticky; ``load`` (tasks of earlier groups) breaks ties for the larger shares."""
    all_tasks = sorted(tasks, key=task_sort_key)
    task_set = set(all_tasks)
    kept: dict[str, list[str]] = {}
    claimed: set[str] = set()
    for pid in procs:
        mine = [t for t in sorted(prev.get(pid, []), key=task_sort_key) if t in task_set and t not in claimed]
        kept[pid] = mine
        claimed.update(mine)
    base, extra = divmod(len(all_tasks), len(procs))
    # Larger shares go to the processors that already hold the most, so fewer tasks have to move; among equals, to
    # those with the fewest tasks of other groups, so the totals stay balanced.
    by_load = sorted(procs, key=lambda p: (-len(kept[p]), load[p], p))
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
    return kept
