"""``job.partition.expansion``: what a job does when an input's partition count changed (see
:mod:`sparza.engine.partitions`), parsed where the job config is validated."""

from __future__ import annotations

from sparza.config import Choice, Config, define_key
from sparza.errors import ConfigError

__all__ = ["EXPANSION", "expansion_policy", "has_stores"]

EXPANSION = define_key(
    "job.partition.expansion", "auto",
    "What a job does when an input stream's partition count changed (Samza's SEP-5): fail (stop naming the stream, "
    "the counts and these choices), group (SEP-5: a new partition p joins the task of p % the first count; keyed "
    "state stays valid for hash % count producers), new-tasks (each new partition a task of its own; jobs without "
    "stores), auto (fail with stores, new-tasks without).", "runtime",
    kind=Choice("auto", "fail", "group", "new-tasks"))

def has_stores(config: Config) -> bool:
    """True when the job declares a store (``stores.<name>.factory``): its tasks hold keyed state."""
    for key in config:
        parts = key.split(".")
        if len(parts) >= 3 and parts[0] == "stores" and parts[-1] == "factory":
            return True
    return False


def expansion_policy(config: Config) -> str:
    """``job.partition.expansion`` with ``auto`` decided: ``fail`` for a job with stores, ``new-tasks`` without."""
    policy = EXPANSION.get(config)
    if policy == "auto":
        return "fail" if has_stores(config) else "new-tasks"
    if policy == "new-tasks" and has_stores(config):
        raise ConfigError(EXPANSION.key, policy, "fail or group for a job with stores: new tasks for new partitions "
                          "would move keys away from their state; group keeps them (SEP-5)")
    return str(policy)
