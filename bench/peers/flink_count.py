"""The peer benchmark's keyed count in PyFlink 2.3 (DataStream API, local mini-cluster, parallelism 2).

Kafka source → the JSON key → ``key_by`` → a ``KeyedProcessFunction`` with a ``ValueState`` (EmbeddedRocksDB state
backend, checkpoints in a local dir) → a Kafka sink with ``DeliveryGuarantee.EXACTLY_ONCE`` (transactions
committed when a checkpoint completes). Flink checkpoints only when told to: ``--commit-ms default`` uses 1 s
(its exactly-once sink would never commit without checkpoints). Run in its own venv (``bench/peers/run.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.common.serialization import SimpleStringSchema
from pyflink.datastream import CheckpointingMode, KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from pyflink.datastream.state import ValueStateDescriptor


class Count(KeyedProcessFunction):
    """The running count of each key in a value state; one JSON output per input."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: str, ctx: Any) -> Iterator[str]:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield json.dumps({"key": value, "count": n})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--commit-ms", default="default")
    parser.add_argument("--jar", required=True)
    args = parser.parse_args()
    interval = 1000 if args.commit_ms == "default" else int(args.commit_ms)
    config = Configuration()
    config.set_string("state.backend.type", "rocksdb")
    config.set_string("execution.checkpointing.dir", f"file://{args.work}/checkpoints")
    config.set_string("execution.checkpointing.incremental", "true")
    config.set_string("pipeline.jars", f"file://{args.jar}")
    config.set_string("python.executable", sys.executable)  # the workers' Python: this venv's, not PATH's
    config.set_string("restart-strategy.type", "none")  # a failure ends the run (the harness reports it)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(2)
    env.enable_checkpointing(interval, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap).set_topics(args.input)
              .set_group_id(args.group).set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(SimpleStringSchema()).set_property("isolation.level", "read_committed")
              .build())
    sink = (KafkaSink.builder().set_bootstrap_servers(args.bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(args.output)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix(args.group)
            .set_property("transaction.timeout.ms", "600000").build())
    (env.from_source(source, WatermarkStrategy.no_watermarks(), "input")
     .map(lambda s: json.loads(s)["key"], output_type=Types.STRING())
     .key_by(lambda k: k, key_type=Types.STRING())
     .process(Count(), output_type=Types.STRING())
     .sink_to(sink))
    env.execute("peers-flink-count")


if __name__ == "__main__":
    main()
