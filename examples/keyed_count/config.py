"""The keyed-count job's config as flat keys rooted in one directory (what ``job.yaml`` says, relocatable).

Tests and ``bench/runtime.py`` build their jobs from this, so the job they run is the example's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["job_values"]


def job_values(root: Path, **overrides: Any) -> dict[str, str]:
    """The example job with streams, state and blob store under ``root``; ``overrides`` win."""
    values: dict[str, Any] = {
        "job.name": "kc",
        "job.id": "1",
        "job.logged.store.base.dir": str(root / "state"),
        "task.class": "examples.keyed_count.task.KeyedCountTask",
        "task.inputs": "delta.events",
        "task.max.batch.messages": "5000",
        "task.commit.ms": "0",
        "systems.delta.samza.factory": "delta",
        "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(root / "streams"),
        "systems.delta.streams.counts.samza.key.serde": "string",
        "systems.delta.streams.counts.samza.msg.serde": "json",
        "stores.counts.factory": "rocksdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "json",
        "stores.counts.backup.factories": "blobstore",
        "blob.store.manager.factory": "local",
        "blob.store.local.root": str(root / "blobstore"),
    }
    values.update(overrides)
    return {k: str(v) for k, v in values.items()}
