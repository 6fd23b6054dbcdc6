"""Faults injected between commit steps: what tests and the guarantees harness use to prove retries exact.

:class:`ConfigFaults` is a :class:`~sparza.engine.commit.CommitListener` installed from the outside, through the
runtime's public seam ``task.commit.listeners`` (:func:`fault_keys`, :func:`with_faults`): production code holds
no fault injection and knows none of these keys.

- ``task.testing.fail.once.file`` / ``task.testing.fail.once.at``: the first task to create the file fails
  once, right after the named step (across processes and hosts that share the file);
  ``task.testing.fail.once.after.commits``: only after that many of the task's commits in this process (a
  container hosts a task for a whole epoch: the failure then comes in its middle);
- ``task.testing.fault.hook``: the id of an in-process hook (:func:`register_fault_hook`) called at every
  step; :class:`sparza.testing.TestRunner` fails a chosen task and batch this way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from sparza.config import Choice, Config, Int, define_key
from sparza.config.registry import BOOL
from sparza.engine.commit import COMMIT_LISTENERS, CommitStep

__all__ = ["LISTENER", "ConfigFaults", "FaultHook", "InjectedFault", "fault_keys", "register_fault_hook",
           "unregister_fault_hook", "with_faults"]

_PKG = "testing"
FAIL_ONCE_FILE = define_key("task.testing.fail.once.file", None,
                            "Testing only (with sparza.testing.faults.ConfigFaults in task.commit.listeners): the "
                            "first task to create this file fails once at task.testing.fail.once.at (proves retries "
                            "and restarts are exact).", _PKG)
FAULT_HOOK = define_key("task.testing.fault.hook", None,
                        "Testing only: id of an in-process fault hook (sparza.testing.faults.register_fault_hook) "
                        "called at every commit step; sparza.testing.TestRunner uses it to fail a chosen task and "
                        "batch between two steps.", _PKG)
FAIL_AFTER_COMMITS = define_key("task.testing.fail.once.after.commits", 0,
                                "Testing only: how many of a task's commits in the same process go by before the "
                                "injected failure (a failure while its container runs on).", _PKG,
                                kind=Int(min_value=0))
FAIL_AT = define_key("task.testing.fail.once.at", CommitStep.AFTER_FLUSH.value,
                     "Testing only: the commit step after which the injected failure happens: after-intent, "
                     "after-flush, after-adjunct, after-snapshot, after-checkpoint or during-cleanup.", _PKG,
                     kind=Choice(*(s.value for s in CommitStep)))

FAIL_STICKY = define_key("task.testing.fail.once.sticky", False,
                         "Testing only: the task that created task.testing.fail.once.file fails at that step again in "
                         "every later attempt while the file names it (Spark's task retries then cannot complete its "
                         "batch: a batch interrupted after the other tasks committed).", _PKG, kind=BOOL)

LISTENER = "sparza.testing.faults.ConfigFaults"
"""The dotted name of :class:`ConfigFaults` for ``task.commit.listeners``."""


def with_faults(config: Mapping[str, str], **keys: str) -> dict[str, str]:
    """``config`` with :class:`ConfigFaults` added to its ``task.commit.listeners`` and the config keys ``keys``
    (passed as ``**{"task.testing.fault.hook": ...}``) set; :func:`fault_keys` builds the usual ones."""
    listeners = [p for p in COMMIT_LISTENERS.get(config) if p]
    if LISTENER not in listeners:
        listeners.append(LISTENER)
    return {**config, COMMIT_LISTENERS.key: ",".join(listeners), **keys}


def fault_keys(marker: str | Path, at: str = CommitStep.AFTER_FLUSH.value, after_commits: int = 0,
               listeners: str = "") -> dict[str, str]:
    """The config keys of a one-time failure at ``at`` (the first task to create ``marker`` fails), with
    :class:`ConfigFaults` installed; ``listeners``: the job's own ``task.commit.listeners`` to keep."""
    return with_faults({COMMIT_LISTENERS.key: listeners}, **{
        FAIL_ONCE_FILE.key: str(marker), FAIL_AT.key: at, FAIL_AFTER_COMMITS.key: str(after_commits)})


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


def _names(path: str, task: str) -> bool:
    """True when the fault file ``path`` names ``task`` (the task that created it)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() == task
    except OSError:
        return False


class ConfigFaults:
    """The commit listener of the ``task.testing.*`` keys (see the module docstring)."""

    def __init__(self, config: Config) -> None:
        self.file = FAIL_ONCE_FILE.get(config) or None
        self.at = FAIL_AT.get(config)
        self.after_commits = FAIL_AFTER_COMMITS.get(config)
        self.hook_id = FAULT_HOOK.get(config) or ""
        self.sticky = FAIL_STICKY.get(config)
        self._seen: dict[str, int] = {}  # task -> times it reached the step in this process

    def on_step(self, task: str, step: CommitStep, batch: int) -> None:
        """Fail here when the config or the registered hook asks for it."""
        if self.file and step.value == self.at and self._count(task) > self.after_commits:
            try:
                fd = os.open(self.file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if self.sticky and _names(self.file, task):
                    raise InjectedFault(f"injected failure in task '{task}' {step.value.replace('-', ' ')}, "
                                        "again") from None
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
