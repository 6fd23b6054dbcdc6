"""Fixtures for the high-level API tests: a fake task context over real stores, a collecting
collector, and an in-process pipeline driver that runs a plan's stages the way the runtime does
(TaskControl around StageTask, batch by batch) over in-memory partitioned streams. The Spark/Delta
end-to-end tests live in test_e2e_spark.py."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sparza.api import ApplicationPlan, StageTask
from sparza.config import Config
from sparza.control import TaskControl
from sparza.metrics import MetricsRegistry
from sparza.state.kv import KeyValueStore, open_store
from sparza.streams import (
    IncomingMessageEnvelope,
    MessageType,
    OutgoingMessageEnvelope,
    SystemStream,
    SystemStreamPartition,
)

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the operator tests' applications are imported by dotted path (tests.api.*)
    sys.path.insert(0, str(REPO))


class Collector:
    """Keeps what a task sent."""

    def __init__(self) -> None:
        self.sent: list[OutgoingMessageEnvelope] = []

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        self.sent.append(envelope)


class Coordinator:
    def __init__(self) -> None:
        self.commits = 0
        self.shutdowns = 0

    def commit(self) -> None:
        self.commits += 1

    def shutdown(self) -> None:
        self.shutdowns += 1


@dataclass
class Context:
    task_name: str
    config: Config
    input_ssps: list[SystemStreamPartition]
    base_dir: Path
    metrics: MetricsRegistry = field(default_factory=MetricsRegistry)
    stores: dict[str, KeyValueStore] = field(default_factory=dict)

    def get_store(self, name: str) -> KeyValueStore:
        if name not in self.stores:
            self.stores[name] = open_store(name, self.config, self.task_name, self.base_dir)
        return self.stores[name]


@pytest.fixture
def make_context(tmp_path: Path) -> Callable[..., Context]:
    def make(config: Config, task_name: str = "Partition 0", ssps: list[SystemStreamPartition] | None = None,
             base_dir: Path | None = None) -> Context:
        return Context(task_name, config, ssps or [], base_dir or tmp_path / "stores")
    return make


@dataclass
class Row:
    key: Any
    value: Any
    timestamp: int | None
    type: MessageType = MessageType.USER
    producer: str | None = None


class MemoryStreams:
    """Partitioned in-memory streams: ``{stream: [[Row, ...] per partition]}``."""

    def __init__(self) -> None:
        self.data: dict[SystemStream, list[list[Row]]] = {}

    def create(self, stream: SystemStream, partitions: int) -> None:
        self.data.setdefault(stream, [[] for _ in range(partitions)])

    def append(self, stream: SystemStream, env: OutgoingMessageEnvelope, producer: str) -> None:
        parts = self.data.setdefault(stream, [[]])
        if env.partition is not None:
            p = env.partition
        else:
            key = env.partition_key if env.partition_key is not None else env.key
            p = zlib.crc32(key if isinstance(key, bytes) else str(key).encode()) % len(parts) if key else 0
        parts[p].append(Row(env.key, env.message, env.timestamp, env.type, producer))

    def user_rows(self, stream: SystemStream) -> list[Row]:
        return [r for part in self.data.get(stream, []) for r in part if r.type == MessageType.USER]


class TaskRun:
    """One task of one stage: TaskControl + StageTask + read offsets, checkpointed as JSON."""

    def __init__(self, stage_config: Config, task_name: str, task_count: int, ssps: list[SystemStreamPartition],
                 base_dir: Path, bounded: set[SystemStream], checkpoint: dict[str, Any] | None = None) -> None:
        self.config = stage_config
        self.task_name = task_name
        self.ssps = ssps
        self.bounded = bounded
        cp = checkpoint or {}
        self.offsets: dict[SystemStreamPartition, int] = {s: cp.get("offsets", {}).get(str(s), 0) for s in ssps}
        self.control = TaskControl.restore(cp.get("control"), task_name, task_count, ssps, stage_config)
        self.eos_done = bool(cp.get("eos_done", False))
        self.context = Context(task_name, stage_config, ssps, base_dir)
        self.task = StageTask()
        self.task.init(self.context)
        self.collector = Collector()
        self.coordinator = Coordinator()

    def checkpoint(self) -> dict[str, Any]:
        return {"offsets": {str(s): o for s, o in self.offsets.items()}, "control": self.control.snapshot(),
                "eos_done": self.eos_done}

    def run_batch(self, streams: MemoryStreams, now_ms: int, max_rows: int,
                  partitions: dict[SystemStream, int]) -> list[OutgoingMessageEnvelope]:
        self.collector = Collector()
        for ssp in self.ssps:
            part = streams.data.get(ssp.system_stream, [])
            rows = part[ssp.partition] if ssp.partition < len(part) else []
            start = self.offsets[ssp]
            for i in range(start, min(len(rows), start + max_rows)):
                row = rows[i]
                env = IncomingMessageEnvelope(ssp, str(i), row.key, row.value, row.timestamp, type=row.type)
                self.offsets[ssp] = i + 1
                if self.control.on_envelope(env):
                    continue
                if self.control.is_late(env):
                    routed = self.control.on_late(env)
                    if routed is not None:
                        self.collector.send(routed)
                    continue
                self.task.process(env, self.collector, self.coordinator)
            if ssp.system_stream in self.bounded and self.offsets[ssp] >= len(rows) and not self.control.is_ended(ssp):
                self.control.on_ssp_exhausted(ssp)
        wm = self.control.advance(now_ms)
        if wm is not None:
            self.task.on_watermark(wm, self.collector, self.coordinator)
        if self.control.all_ended() and not self.eos_done:
            self.task.on_end_of_stream(self.collector, self.coordinator)
            self.eos_done = True
        return [*self.collector.sent, *self.control.outgoing(now_ms, partitions)]


class Pipeline:
    """Runs every stage of a plan over MemoryStreams until all tasks ended (or a round limit)."""

    def __init__(self, plan: ApplicationPlan, streams: MemoryStreams, base_dir: Path, bounded: set[SystemStream],
                 max_rows: int = 3) -> None:
        self.plan = plan
        self.streams = streams
        self.base_dir = base_dir
        self.bounded = bounded
        self.max_rows = max_rows
        for stream, n in plan.intermediate_partitions.items():
            streams.create(stream, n)
        self.checkpoints: dict[tuple[str, str], dict[str, Any]] = {}
        self.runs: dict[tuple[str, str], TaskRun] = {}
        self.now = 0
        self.stages = [s.name for s in plan.stages]

    def task_names(self, stage_name: str) -> list[tuple[str, list[SystemStreamPartition], int]]:
        stage = self.plan.stage(stage_name)
        count = max(len(self.streams.data[s]) for s in stage.inputs)
        out = []
        for p in range(count):
            ssps = [s.partition(p) for s in stage.inputs if p < len(self.streams.data[s])]
            out.append((f"Partition {p}", ssps, count))
        return out

    def restart(self) -> None:
        """Forget every in-memory task (a crash): tasks come back from their last checkpoint."""
        for run in self.runs.values():
            for store in run.context.stores.values():
                store.close()
        self.runs.clear()

    def run_round(self, stage_names: list[str] | None = None) -> None:
        self.now += 100
        for stage_name in stage_names or self.stages:
            stage = self.plan.stage(stage_name)
            parts = {s: len(self.streams.data[s]) for s in stage.intermediate_outputs}
            for task_name, ssps, count in self.task_names(stage_name):
                key = (stage_name, task_name)
                if key not in self.runs:
                    self.runs[key] = TaskRun(stage.config, task_name, count, ssps,
                                             self.base_dir / stage_name, self.bounded, self.checkpoints.get(key))
                run = self.runs[key]
                out = run.run_batch(self.streams, self.now, self.max_rows, parts)
                for env in out:
                    self.streams.append(env.system_stream, env, task_name)
                for store in run.context.stores.values():
                    store.flush()
                self.checkpoints[key] = run.checkpoint()

    def done(self, stage_names: list[str] | None = None) -> bool:
        return all(self.checkpoints.get((s, t), {}).get("eos_done", False)
                   for s in stage_names or self.stages for t, _, _ in self.task_names(s))

    def run(self, max_rounds: int = 200, stage_names: list[str] | None = None) -> int:
        for i in range(max_rounds):
            if self.done(stage_names):
                return i
            self.run_round(stage_names)
        raise AssertionError(f"pipeline did not end within {max_rounds} rounds")


@pytest.fixture
def memory_streams() -> MemoryStreams:
    return MemoryStreams()


@pytest.fixture
def pipeline_cls() -> type[Pipeline]:
    return Pipeline


@pytest.fixture
def row_cls() -> type[Row]:
    return Row


@pytest.fixture
def collector() -> Collector:
    return Collector()


@pytest.fixture
def coordinator() -> Coordinator:
    return Coordinator()
