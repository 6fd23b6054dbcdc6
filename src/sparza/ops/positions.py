"""Where a rewind sets a task's inputs: at a time, at the oldest or newest offsets, or at offsets from a file.

**At a time** means, per partition, the first offset whose message has an event time at or after the
timestamp: Kafka's offsets-for-times rule (the first offset in offset order, so messages after it with an
older timestamp are read again too), applied to the event time sparza delivers to the task
(:attr:`~sparza.streams.IncomingMessageEnvelope.timestamp`: the Delta stream's ``timestamp`` column, a Kafka
record's sparza event-time header or else its record timestamp). One rule for every system, and the time the
task code and its windows see, rather than Delta's commit time or a broker's append time, which say when a
message was written, not what it is about. It is found by reading the partition up to the first such message
(control messages are not messages: they are skipped), from where the system says the time starts when it can
(:class:`~sparza.systems.SupportsOffsetsForTimes`: Kafka's ListOffsets by timestamp; a broker that answers a
lower offset than the first at that time is still right, only slower), else from the oldest offset; a
partition with none is set to its upcoming offset (nothing to read again).

**Oldest** is each partition's oldest readable offset, **newest** its upcoming offset (only messages written
from now on are read: Kafka Streams' ``--to-latest``). **A file** gives offsets per SSP (``system.stream#N``),
either flat (``{"kafka.events#0": "120"}``) or per task as ``sparza checkpoints show --json`` prints them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparza.engine.jobconfig import JobConfig
from sparza.errors import SparzaError
from sparza.streams import MessageType, SystemStreamPartition
from sparza.systems import (
    SupportsArrowRead,
    SupportsOffsetsForTimes,
    SystemAdmin,
    SystemStreamPartitionMetadata,
    get_system_factory,
)

__all__ = ["RewindTarget", "parse_time", "read_offsets_file", "resolve_positions"]


@dataclass(frozen=True)
class RewindTarget:
    """Where to set the inputs: ``kind`` is ``time`` (with ``time_ms``), ``oldest``, ``newest`` or ``offsets``
    (with ``offsets``: SSP → offset)."""

    kind: str
    time_ms: int | None = None
    offsets: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("time", "oldest", "newest", "offsets"):
            raise ValueError(f"rewind target {self.kind!r}: one of time, oldest, newest, offsets")
        if self.kind == "time" and self.time_ms is None:
            raise ValueError("a time target needs time_ms")
        if self.kind == "offsets" and self.offsets is None:
            raise ValueError("an offsets target needs offsets")

    @classmethod
    def at_time(cls, time_ms: int) -> RewindTarget:
        """The first offset at or after ``time_ms`` (epoch ms of event time) in each partition."""
        return cls("time", time_ms=int(time_ms))

    def describe(self) -> str:
        """``time 2026-05-01T09:00:00.000Z (1777626000000)``, ``oldest``, ``newest``, ``offsets (4 SSPs)``."""
        if self.kind == "time":
            assert self.time_ms is not None
            iso = dt.datetime.fromtimestamp(self.time_ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
            return f"time {iso.replace('+00:00', 'Z')} ({self.time_ms})"
        if self.kind == "offsets":
            return f"offsets ({len(self.offsets or {})} SSPs)"
        return self.kind


_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(text: str, *, now_ms: int | None = None) -> int:
    """Epoch ms from ``text``: epoch milliseconds, ISO-8601 (naive means UTC), or ``-90m`` / ``-1h`` / ``-2d``
    before now. Raises :class:`ValueError` naming the accepted forms."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    relative = _RELATIVE.match(value)
    if relative:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return now - int(float(relative.group(1)) * _UNITS_MS[relative.group(2)])
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"time {text!r}: give epoch milliseconds, an ISO-8601 time (2026-05-01T09:00:00Z) or a "
                         "duration before now (-1h, -90m, -2d)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def read_offsets_file(path: str | Path) -> dict[str, str]:
    """SSP → offset from a JSON file: flat, or per task (``{"Partition 0": {"offsets": {...}}, ...}``, what
    ``sparza checkpoints show --json`` prints). Raises :class:`SparzaError` naming the file and the problem."""
    try:
        body = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SparzaError(f"offsets file {path}: {exc}") from exc
    if not isinstance(body, dict):
        raise SparzaError(f"offsets file {path}: a JSON object of SSP → offset, or of task → {{\"offsets\": ...}}")
    out: dict[str, str] = {}
    for key, value in body.items():
        if isinstance(value, dict):
            for ssp, offset in (value.get("offsets") or {}).items():
                out[str(ssp)] = str(offset)
        else:
            out[str(key)] = str(value)
    for ssp in out:
        try:
            SystemStreamPartition.parse(ssp)
        except ValueError as exc:
            raise SparzaError(f"offsets file {path}: {ssp!r} is not an SSP (system.stream#partition)") from exc
    return out


def resolve_positions(job: JobConfig, ssps: Iterable[SystemStreamPartition], target: RewindTarget,
                      metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata]) -> dict[str, str]:
    """The offset each of ``ssps`` is set to for ``target``; ``metadata``: their current oldest/upcoming
    offsets. An offsets file must name every SSP and stay within ``[oldest, upcoming]``."""
    wanted = sorted(set(ssps), key=str)
    out: dict[str, str] = {}
    if target.kind in ("oldest", "newest"):
        for ssp in wanted:
            meta = metadata[ssp]
            out[str(ssp)] = meta.upcoming if target.kind == "newest" or meta.oldest is None else meta.oldest
        return out
    admins: dict[str, Any] = {}

    def admin(system: str) -> Any:
        if system not in admins:
            admins[system] = get_system_factory(job.config, system).get_admin(system, job.config)
        return admins[system]

    if target.kind == "offsets":
        given = dict(target.offsets or {})
        missing = [str(s) for s in wanted if str(s) not in given]
        if missing:
            raise SparzaError(f"the offsets given name no offset for {', '.join(missing)}: give one for every "
                              "input partition of the tasks rewound (or choose the tasks with --task)")
        for ssp in wanted:
            offset, meta = given[str(ssp)], metadata[ssp]
            compare = admin(ssp.system).offset_comparator
            low = meta.oldest if meta.oldest is not None else meta.upcoming
            try:
                outside = compare(offset, low) < 0 or compare(offset, meta.upcoming) > 0
            except Exception as exc:
                raise SparzaError(f"offset {offset!r} of {ssp} is not an offset of {ssp.system} ({exc})") from exc
            if outside:
                raise SparzaError(f"offset {offset} of {ssp} is outside what the stream holds ({low} to "
                                  f"{meta.upcoming}, the next offset to be written)")
            out[str(ssp)] = offset
        return out
    assert target.time_ms is not None
    by_system: dict[str, list[SystemStreamPartition]] = {}
    for ssp in wanted:
        by_system.setdefault(ssp.system, []).append(ssp)
    for system, group in sorted(by_system.items()):
        consumer = get_system_factory(job.config, system).get_consumer(system, job.config)
        if not isinstance(consumer, SupportsArrowRead):
            raise SparzaError(f"system {system} cannot be read as Arrow batches: rewind it to offsets instead")
        starts = _scan_starts(admin(system), group, target.time_ms, metadata)
        consumer.start()
        try:
            for ssp in group:
                out[str(ssp)] = first_offset_at(consumer, ssp, target.time_ms, metadata[ssp], start=starts.get(ssp))
        finally:
            consumer.stop()
    return out


def _scan_starts(admin: Any, ssps: list[SystemStreamPartition], time_ms: int,
                 metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata]) -> dict[
                     SystemStreamPartition, str]:
    """Where to start reading for the time, per SSP, when the admin can tell (Kafka's offsets-for-times): its
    answer when it lies within the partition; else (no answer, or none: a partition without such a record is
    read whole, the answer is not trusted to say nothing is there) the oldest offset."""
    if not isinstance(admin, SupportsOffsetsForTimes):
        return {}
    compare = admin.offset_comparator if isinstance(admin, SystemAdmin) else None
    out: dict[SystemStreamPartition, str] = {}
    for ssp, hint in admin.offsets_for_times(ssps, time_ms).items():
        meta = metadata[ssp]
        if hint is not None and meta.oldest is not None and compare is not None and compare(hint, meta.oldest) >= 0 \
                and compare(hint, meta.upcoming) <= 0:
            out[ssp] = hint
    return out


def first_offset_at(consumer: SupportsArrowRead, ssp: SystemStreamPartition, time_ms: int,
                    meta: SystemStreamPartitionMetadata, *, start: str | None = None) -> str:
    """The offset of the first message of ``ssp`` (in offset order) whose event time is ``>= time_ms``, read from
    ``start`` (default: the oldest offset; a later start must not lie after that message); the upcoming offset
    when there is none."""
    if meta.oldest is None:
        return meta.upcoming
    for batch in consumer.read_arrow(ssp, start or meta.oldest, meta.upcoming, False, bounded=False):
        hits = pc.and_(pc.greater_equal(batch.column("timestamp"), pa.scalar(time_ms, pa.int64())),
                       pc.equal(batch.column("type"), pa.scalar(int(MessageType.USER), pa.int8())))
        found = pc.index(hits, True).as_py()
        if found is not None and found >= 0:
            return str(batch.column("offset")[found].as_py())
    return meta.upcoming
