"""The generated job's config keys that do not depend on where it runs: its class, shape, stores, join,
windows, late-message routing and output serdes or table. Each engine adds where its streams, state and
checkpoints live (:mod:`~sparza.testing.harness.spark`, :mod:`~sparza.testing.harness.inprocess`)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from sparza.testing.jobs import TABLE_SCHEMA
from sparza.testing.scenario import Profile, Scenario, operator_config

__all__ = ["LATE_STREAM", "PROFILES_STREAM", "job_config", "poison_id", "profile_partition"]

LATE_STREAM = "delta.late"
"""Where windows route late messages (``task.late.messages.stream``)."""

PROFILES_STREAM = "delta.profiles"
"""The change-capture stream of the join table (``stores.profiles.adstore.input``)."""


def job_config(s: Scenario, *, input_stream: str, output_stream: str) -> dict[str, Any]:
    """The keys that make ``s``'s job, reading ``input_stream`` and writing ``output_stream`` (``system.stream``)."""
    v: dict[str, Any] = {
        "job.name": "harness",
        "task.max.batch.messages": s.max_batch,
        "task.commit.ms": 0,
        "app.harness.kind": s.kind,
        "task.testing.fail.once.file": "",
        "app.harness.poison.ids": "",
        "app.harness.input": input_stream,
        "app.harness.output": output_stream,
        "job.execution.mode": s.execution,
    }
    if s.epoch_ms:
        v["job.container.epoch.ms"] = s.epoch_ms
    if s.grow_to:
        v["job.partition.expansion"] = s.grow_policy   # partition-growth: what the run after it does
    in_system, in_name = input_stream.split(".", 1)
    if s.bounded:
        v[f"systems.{in_system}.streams.{in_name}.bounded"] = "true"
    if s.api == "task":
        v["task.class"] = ("sparza.testing.jobs.HarnessBatchTask" if s.task_api == "batch"
                           else "sparza.testing.jobs.HarnessTask")
        v["task.inputs"] = input_stream
        v["app.harness.output.partition"] = s.blob_partition
    else:
        v["app.class"] = "sparza.testing.jobs.HarnessApp"
        v["app.harness.partitions"] = s.stage2_partitions
        v["app.harness.flatmap"] = str(s.flatmap).lower()
        v["app.harness.join"] = str(s.join != "none").lower()
        v["app.window.store.factory"] = s.store if s.store == "rocksdb" else "memory"
        if s.backup:
            v["app.window.store.backup.factories"] = "blobstore"
        if s.kind == "window":
            v["app.harness.window.size.ms"] = s.window_size_ms
            v["app.harness.window.slide.ms"] = s.window_slide_ms
        v.update(operator_config(s))   # joins, sessions, triggers (scenario.OPERATORS_SALT)
        # Without late data nothing may be late: the lateness spans every event time.
        v[f"systems.{in_system}.streams.{in_name}.watermark.lateness.ms"] = 0 if s.late else 10**12
        v["task.late.messages.policy"] = "route"
        v["task.late.messages.stream"] = LATE_STREAM
        if s.intermediate != "default":
            v["job.intermediate.system"] = s.intermediate
    if s.kind == "count":
        v["stores.counts.factory"] = s.store
        v["stores.counts.key.serde"] = "string"
        v["stores.counts.msg.serde"] = "json"
        if s.backup:
            v["stores.counts.backup.factories"] = "blobstore"
    if s.join != "none":
        profiles_system, profiles_name = PROFILES_STREAM.split(".", 1)
        v["stores.profiles.adstore.input"] = PROFILES_STREAM
        v["stores.profiles.key.serde"] = "string"
        v["stores.profiles.msg.serde"] = "json"
        if s.backup:
            v["stores.profiles.backup.factories"] = "blobstore"
        v[f"systems.{profiles_system}.streams.{profiles_name}.bounded"] = "true"
        v[f"systems.{profiles_system}.streams.{profiles_name}.samza.bootstrap"] = "true"
        if s.join == "broadcast":
            v["task.broadcast.inputs"] = f"{PROFILES_STREAM}#0"
    out_system, out_name = output_stream.split(".", 1)
    if s.output in ("delta", "kafka", "table-append", "table-upsert"):
        v[f"systems.{out_system}.streams.{out_name}.samza.key.serde"] = "string"
        v[f"systems.{out_system}.streams.{out_name}.samza.msg.serde"] = "json"
    if s.output.startswith("table-"):
        mode = s.output.removeprefix("table-")
        key = ("key,aux" if s.kind == "count" else "key,id") if mode == "upsert" else ""
        if s.kind == "count" and mode == "upsert":
            v["app.harness.count.aux"] = "partition"      # one row per (key, task): its current count
        if s.api == "app":
            # The high-level API declares the table: app.output(schema=…, mode=…, key=…).
            v["app.harness.table.mode"] = mode
            v["app.harness.table.key"] = key
        else:
            v[f"systems.{out_system}.streams.{out_name}.delta.table.schema"] = TABLE_SCHEMA
            v[f"systems.{out_system}.streams.{out_name}.delta.table.mode"] = mode
            if key:
                v[f"systems.{out_system}.streams.{out_name}.delta.table.key"] = key
    if s.output == "blob":
        v["app.harness.output.avro"] = str(s.blob_format == "avro").lower()
    return v


def profile_partition(profile: Profile, s: Scenario) -> int:
    """The partition of the profiles stream a change record goes to: the drawn one of a broadcast table's
    single partition, else the partition of its key in the joining stage (CRC-32 of the JSON key, as the
    stage's ``partition_by`` picks it)."""
    if s.join == "broadcast":
        return profile.partition
    key = json.dumps(profile.key, sort_keys=True, separators=(",", ":")).encode()
    return zlib.crc32(key) % s.stage2_partitions


def poison_id(s: Scenario, phase: int) -> int | None:
    """The message the poison fault of ``phase`` makes the job raise on (``app.harness.poison.ids``): the middle
    one of the phase's input; None when the phase has no input."""
    ids = [m.id for m in s.messages if m.chunk == phase]
    return ids[len(ids) // 2] if ids else None
