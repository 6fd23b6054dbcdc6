"""The job's upsert tables, and emptying them for a rewind whose state starts empty.

An upsert table (``systems.<s>.streams.<x>.delta.table.mode: upsert``, :mod:`sparza.systems.delta.tables`)
holds one row per key: the last value the job wrote for it. After a rewind that resets every task's state, the
re-run writes every key it meets again, but a key it never meets (all its messages were before the rewind's
time) would keep the row of the old run. Emptying the table first (one Delta delete commit; its history and
app transactions stay, so versions keep increasing) makes it hold exactly what the re-run writes.
"""

from __future__ import annotations

import re

from sparza.engine.jobconfig import JobConfig
from sparza.systems import get_system_factory

__all__ = ["empty_upsert_tables", "upsert_tables"]

_MODE = re.compile(r"^systems\.([^.]+)\.streams\.(.+)\.delta\.table\.mode$")


def upsert_tables(job: JobConfig) -> list[str]:
    """``system.stream`` of every upsert table the job's config declares, sorted."""
    found = []
    for key, value in job.config.items():
        match = _MODE.match(key)
        if match and str(value).strip().lower() == "upsert":
            found.append(f"{match.group(1)}.{match.group(2)}")
    return sorted(found)


def empty_upsert_tables(job: JobConfig, tables: list[str]) -> list[str]:
    """Delete every row of each table (``system.stream``) that exists; returns those emptied."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    emptied = []
    for name in tables:
        system, stream = name.split(".", 1)
        admin = get_system_factory(job.config, system).get_admin(system, job.config)
        location = admin.location(stream)  # type: ignore[attr-defined]
        try:
            table = DeltaTable(location.uri, storage_options=location.storage_options)
        except TableNotFoundError:
            continue  # never written: nothing to empty
        table.delete()
        emptied.append(name)
    return emptied
