"""The peer benchmark's keyed count in Spark Structured Streaming with its Kafka connector (local[2]).

``--mode tws``: ``transformWithStateInPandas`` with a value state per key (RocksDB state store provider), one
output row per input message, each with its running count. ``--mode count``: the built-in
``groupBy(key).count()`` in update mode, for reference (one row per key and batch, not per message). Spark's Kafka
sink is at least once: a batch that runs again writes its rows again.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import LongType, StructField, StructType


class CountProcessor(StatefulProcessor):
    """A running count per key in a value state; each input row gets its own output row."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", StructType([StructField("count", LongType())]))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        seen = self.count.get()
        n = int(seen[0]) if seen else 0
        for frame in rows:
            size = len(frame)
            yield pd.DataFrame({"key": [key[0]] * size, "count": range(n + 1, n + size + 1)})
            n += size
        self.count.update((n,))

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("tws", "count"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--commit-ms", default="default", help="a processing-time trigger (default: none)")
    parser.add_argument("--max-offsets", type=int, default=0, help="maxOffsetsPerTrigger (0: no cap)")
    parser.add_argument("--jars", required=True)
    args = parser.parse_args()
    spark = (SparkSession.builder.master("local[2]").appName(f"peers-spark-{args.mode}")
             .config("spark.jars", args.jars)
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed"))
    if args.max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets))
    keys = reader.load().select(F.get_json_object(F.col("value").cast("string"), "$.key").alias("key"))
    if args.mode == "tws":
        counts = keys.groupBy("key").transformWithStateInPandas(
            statefulProcessor=CountProcessor(), outputStructType="key string, count long", outputMode="Append",
            timeMode="None")
        mode = "append"
    else:
        counts = keys.groupBy("key").count()
        mode = "update"
    out = counts.select(F.col("key"), F.to_json(F.struct("key", "count")).alias("value"))
    writer = (out.writeStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output).option("checkpointLocation", args.checkpoint).outputMode(mode))
    if args.commit_ms != "default":
        writer = writer.trigger(processingTime=f"{int(args.commit_ms)} milliseconds")
    query = writer.start()
    query.awaitTermination()


if __name__ == "__main__":
    main()
