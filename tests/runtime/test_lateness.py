"""Event-time lateness only means something to event-time operators: nothing else drops a message for it.

An application without windows delivers every message whatever the order of event times; an
application with windows drops (or routes) only messages whose every window already fired, and
says so: in the batch status line, the end-of-run summary and the metrics.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from tests.runtime.helpers import run_sparza, write_config

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

pytestmark = pytest.mark.spark


def _config(work_dir: Path, app: str, **extra: str) -> Config:
    return Config({
        "job.name": "late", "app.class": app, "app.example.partitions": "3",
        "job.logged.store.base.dir": str(work_dir / "state"), "task.commit.ms": "0",
        "task.max.batch.messages": "700",
        "systems.delta.samza.factory": "delta", "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work_dir / "streams"), "systems.delta.streams.events.bounded": "true",
        "blob.store.local.root": str(work_dir / "blobstore"),
        "metrics.reporter.jsonl.path": str(work_dir / "metrics.jsonl"), **extra,
    })


def _load(config: Config, messages: list[tuple[str, int, int]]) -> None:
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("events", 2))
    admin.create_stream(StreamSpec("out", 2))
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    for i, (key, n, ts) in enumerate(messages):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"),
                                                      json.dumps({"key": key, "n": n}).encode(), key=key.encode(),
                                                      partition=i % 2, timestamp=ts))
        if i % 2000 == 1999:
            producer.flush("test")  # several Delta versions: several batches, a moving watermark
    producer.flush("test")


def _output(work_dir: Path) -> list[dict]:
    table = DeltaTable(str(work_dir / "streams" / "out")).to_pyarrow_table(columns=["value", "type"])
    return [json.loads(v) for v, t in zip(table.column("value").to_pylist(), table.column("type").to_pylist(),
                                          strict=True) if t == 0]


def _shuffled(count: int, seed: int) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    times = [1_000_000 + i * 10 for i in range(count)]
    rng.shuffle(times)
    return [(f"k{rng.randrange(13)}", rng.randrange(-2, 50), ts) for ts in times]


def test_an_application_without_windows_delivers_every_message_whatever_the_event_time_order(work_dir):
    config = _config(work_dir, "sparza.api.examples.RepartitionCount")
    messages = _shuffled(20_000, 7)
    _load(config, messages)
    result = run_sparza("run", "--config", str(write_config(config, work_dir / "job.yaml")), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _output(work_dir)
    # The oracle: the filter keeps n >= 0; nothing else may vanish.
    assert Counter(r["key"] for r in rows) == Counter(k for k, n, _ in messages if n >= 0)
    assert "late message" not in result.stderr  # nothing dropped, nothing to report


def test_windows_drop_only_messages_whose_windows_fired_and_say_so(work_dir):
    config = _config(work_dir, "sparza.api.examples.WindowedCount", **{"app.example.window.ms": "5000"})
    messages = _shuffled(6_000, 11)
    _load(config, messages)
    result = run_sparza("run", "--config", str(write_config(config, work_dir / "job.yaml")), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    panes = _output(work_dir)
    counted = sum(p["count"] for p in panes)
    late = len(messages) - counted
    assert late > 0  # shuffled over the whole run: some windows fire before all their messages came
    # Every message is either in its window's pane or counted as late: nothing vanishes unaccounted.
    last: dict[str, int] = {}  # each stage reports its own cumulative aggregate
    for line in (work_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        last[record["source"]] = record["metrics"].get("aggregate", {}).get("late-messages", 0)
    assert sum(last.values()) == late
    # Control (SEP-004): every stage task's watermark and late count are metrics of that task.
    records = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    finals = {r["source"]: r["metrics"] for r in records}  # each stage's last line
    watermarks = {g: m["task-watermark"] for metrics in finals.values() for g, m in metrics.items()
                  if g.endswith(":control") and "task-watermark" in m}
    assert len(watermarks) >= 3 and max(watermarks.values()) > 1_000_000, watermarks
    per_task = sum(m.get("late-messages", 0) for metrics in finals.values() for g, m in metrics.items()
                   if g.endswith(":control"))
    assert per_task == late
    assert f"{late} late message(s) dropped" in result.stderr  # the end-of-run summary
    assert "watermark.lateness.ms" in result.stderr and "task.late.messages.policy" in result.stderr
    assert any("late" in line for line in result.stderr.splitlines() if line.startswith("batch "))
