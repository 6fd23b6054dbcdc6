"""The consumer built on Spark executors from a pickled Config, as the runtime's data source does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemConsumer, DeltaSystemProducer

pytestmark = pytest.mark.spark


def test_read_arrow_inside_map_in_arrow(spark: Any, delta_config: Config) -> None:
    DeltaSystemAdmin("d", delta_config).create_stream(StreamSpec("s", 2))
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("t")
    for i in range(50):
        producer.send("t", OutgoingMessageEnvelope(SystemStream("d", "s"), f"m{i}".encode(), partition=i % 2))
        if i % 10 == 9:
            producer.flush("t")
    config = delta_config   # captured by the closure: pickled to the executors

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for partition in batch.column("p").to_pylist():
                consumer = DeltaSystemConsumer("d", config)
                yield from consumer.read_arrow(SystemStreamPartition("d", "s", partition), None)

    schema = ("offset string, partition int, key binary, value binary, timestamp long, type tinyint, "
              "producer string")
    rows = spark.range(2).selectExpr("cast(id as int) as p").repartition(2).mapInArrow(read, schema).collect()
    assert len(rows) == 50
    for p in range(2):
        mine = [r for r in rows if r["partition"] == p]
        assert [bytes(r["value"]) for r in mine] == [f"m{i}".encode() for i in range(p, 50, 2)]
        assert {r["producer"] for r in mine} == {"t"}
