"""A two-stage application whose intermediate stream is a Kafka topic (``job.intermediate.system``).

The topic is created with the planned partition count; watermarks and end-of-stream cross it
in-band (record headers), so the downstream windows fire exactly once and the bounded pipeline
ends by itself, with the same panes as an independent computation over the input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.control.conftest import E2E, pane_map, windowed_expectation  # noqa: E402

from sparza.api import plan_application  # noqa: E402
from sparza.streams import SystemStreamPartition  # noqa: E402
from sparza.systems.kafka import KafkaSystemAdmin, KafkaSystemConsumer  # noqa: E402

pytestmark = pytest.mark.spark


def test_two_stage_windows_over_a_kafka_intermediate_stream(spark: Any, tmp_path: Path, kafka_bootstrap: str,
                                                             unique_name: str) -> None:
    e2e = E2E(tmp_path, spark)
    events = [(i % 2, f"k{i % 5}", i, i * 7) for i in range(120)]
    cfg = e2e.config("WindowedCount", **{
        "job.name": unique_name, "app.example.window.ms": 100, "app.example.partitions": 3,
        "task.max.batch.messages": 30,
        "job.intermediate.system": "kafka",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.consumer.bootstrap.servers": kafka_bootstrap})
    e2e.load(cfg, events, 2)
    plan = plan_application(cfg)
    [topic] = {s.stream for stage in plan.stages for s in stage.intermediate_outputs}
    outcome = e2e.run_app(cfg)
    assert outcome.exit_code == 0 and outcome.reason == "all inputs ended"
    assert pane_map(e2e.values(cfg)) == windowed_expectation(events, 100)
    # The topic sparza created has the planned partitions and carries control messages in headers.
    admin = KafkaSystemAdmin("kafka", cfg)
    meta = admin.get_system_stream_metadata({topic})[topic]
    assert meta.partition_count == 3
    consumer = KafkaSystemConsumer("kafka", cfg)
    kinds: dict[int, int] = {}
    for p, pm in meta.partitions.items():
        for batch in consumer.read_arrow(SystemStreamPartition("kafka", topic, p), "0", pm.upcoming):
            for kind in batch.column("type").to_pylist():
                kinds[kind] = kinds.get(kind, 0) + 1
    consumer.stop()
    assert kinds.get(0) == 120          # every event crossed exactly once
    assert kinds.get(1, 0) > 0          # watermarks
    assert kinds.get(2) == 3 * 2        # end-of-stream from each of the 2 upstream tasks into each partition
