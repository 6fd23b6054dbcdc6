"""The row format of a stream table and of the Arrow batches consumers return."""

from __future__ import annotations

import pyarrow as pa

from sparza.systems.rows import READ_SCHEMA

__all__ = ["FILE_COLUMNS", "FILE_SCHEMA", "PARTITION_COLUMN", "PARTITION_COUNT_PROPERTY", "READ_SCHEMA",
           "TABLE_SCHEMA"]

PARTITION_COLUMN = "partition"
"""The Delta partition column: rows of partition N live under ``partition=N/``."""

PARTITION_COUNT_PROPERTY = "sparza.partitions"
"""Table property holding the stream's partition count."""

FILE_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("timestamp", pa.int64()),
    pa.field("type", pa.int8()),
    pa.field("producer", pa.string()),
])
"""Columns stored in each data file (the partition column lives in the path, as Delta does)."""

FILE_COLUMNS = FILE_SCHEMA.names

TABLE_SCHEMA = pa.schema([pa.field(PARTITION_COLUMN, pa.int32()), *FILE_SCHEMA])
"""The Delta table's schema: ``partition, key, value, timestamp, type, producer``."""

assert pa.schema([pa.field("offset", pa.string()), *TABLE_SCHEMA]) == READ_SCHEMA  # every system reads this layout
