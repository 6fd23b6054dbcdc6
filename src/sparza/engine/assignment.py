"""Which container runs which task: a pure function of where containers are and where tasks were.

:func:`place_tasks` is what a host's container manager asks whenever something changes (a job joins, a container
starts, is lost, or a task is released): it keeps every task where it runs as long as that container has room,
puts a task without a container at the container whose state dir holds its state (host affinity, Samza's
``job.host-affinity.enabled``), and the rest on the least-loaded containers. A task moves only when its container
is gone or over its share (a new container joined): moves are what :func:`place_tasks` returns for tasks whose
container differs from the current one.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["place_tasks"]


def place_tasks(tasks: list[str], containers: Mapping[int, str], current: Mapping[str, int | None],
                last_location: Mapping[str, str], *, affinity: bool = True) -> dict[str, int]:
    """``{task: container}`` for every task, given the containers that can run the job (index → their location for
    it), the container each task runs in now (absent or None: none, or gone) and where each task last committed.

    Each container takes at most ``ceil(tasks / containers)`` tasks. Tasks keep their current container while it
    has room (in task order); the others go to a container at their last location that has room (with
    ``affinity``), else to the least-loaded container (lowest index first). Raises ``ValueError`` without containers.
    """
    if not containers:
        raise ValueError("no container can run the job's tasks")
    indexes = sorted(containers)
    capacity = -(-len(tasks) // len(indexes))
    load = dict.fromkeys(indexes, 0)
    out: dict[str, int] = {}
    ordered = sorted(tasks, key=_task_order)
    for task in ordered:
        now = current.get(task)
        if now is not None and now in load and load[now] < capacity:
            out[task] = now
            load[now] += 1
    if affinity:
        at: dict[str, list[int]] = {}
        for index in indexes:
            at.setdefault(containers[index], []).append(index)
        for task in ordered:
            if task in out:
                continue
            last = last_location.get(task)
            free = [i for i in at.get(last, []) if load[i] < capacity] if last is not None else []
            if free:
                chosen = min(free, key=lambda i: (load[i], i))
                out[task] = chosen
                load[chosen] += 1
    for task in ordered:
        if task not in out:
            chosen = min(indexes, key=lambda i: (load[i], i))
            out[task] = chosen
            load[chosen] += 1
    return out


def _task_order(task: str) -> tuple[int, str]:
    """``Partition 10`` after ``Partition 9``."""
    head, _, tail = task.rpartition(" ")
    return (int(tail), head) if tail.isdigit() else (1 << 30, task)
