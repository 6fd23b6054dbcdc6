"""Faults injected between commit steps: what tests and the guarantees harness use to prove retries exact.

A :class:`~sparza.engine.commit.CommitListener` of the runtime's commit (``task.commit.listeners``): the
runtime adds :class:`ConfigFaults` to a job whose config sets one of the testing keys, so production code
holds no fault injection of its own.

- ``task.testing.fail.once.file`` / ``task.testing.fail.once.at``: the first task to create the file fails
  once, right after the named step (across processes and hosts that share the file);
  ``task.testing.fail.once.after.commits``: only after that many of the task's commits in this process (a
  container hosts a task for a whole epoch: the failure then comes in its middle);
- ``task.testing.fault.hook``: the id of an in-process hook (:func:`register_fault_hook`) called at every
  step; :class:`sparza.testing.TestRunner` fails a chosen task and batch this way.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sparza.config import Config
from sparza.engine.commit import CommitStep

__all__ = ["ConfigFaults", "FaultHook", "InjectedFault", "register_fault_hook", "unregister_fault_hook"]


class InjectedFault(RuntimeError):
    """The failure a test asked for (``task.testing.fail.once.*`` or a fault hook)."""


FaultHook = Callable[[str, CommitStep, int], None]
"""``hook(task, step, batch)``: called right after ``step`` of the commit of output batch ``batch``; raising
there fails the commit at that point."""

_HOOKS: dict[str, FaultHook] = {}


def register_fault_hook(hook_id: str, hook: FaultHook) -> None:
    """Call ``hook`` at every commit step of jobs whose ``task.testing.fault.hook`` is ``hook_id`` (in this
    process only: a Spark executor has its own registry)."""
    _HOOKS[hook_id] = hook


def unregister_fault_hook(hook_id: str) -> None:
    """Remove the hook registered under ``hook_id`` (nothing happens when there is none)."""
    _HOOKS.pop(hook_id, None)


class ConfigFaults:
    """The commit listener of the ``task.testing.*`` keys (see the module docstring)."""

    def __init__(self, config: Config) -> None:
        self.file = config.get_str("task.testing.fail.once.file", None) or None
        self.at = config.get_choice("task.testing.fail.once.at", tuple(s.value for s in CommitStep), "after-flush")
        self.after_commits = config.get_int("task.testing.fail.once.after.commits", 0, min_value=0)
        self.hook_id = config.get_str("task.testing.fault.hook", None) or ""
        self._seen: dict[str, int] = {}  # task -> times it reached the step in this process

    def on_step(self, task: str, step: CommitStep, batch: int) -> None:
        """Fail here when the config or the registered hook asks for it."""
        if self.file and step.value == self.at and self._count(task) > self.after_commits:
            try:
                fd = os.open(self.file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, f"{task}\n".encode())
                os.close(fd)
                raise InjectedFault(f"injected one-time failure in task '{task}' {step.value.replace('-', ' ')}")
        hook = _HOOKS.get(self.hook_id) if self.hook_id else None
        if hook is not None:
            hook(task, step, batch)

    def _count(self, task: str) -> int:
        """How many times ``task`` reached the failure's step in this process, this one included."""
        self._seen[task] = self._seen.get(task, 0) + 1
        return self._seen[task]
