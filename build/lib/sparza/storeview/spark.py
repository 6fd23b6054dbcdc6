"""``format("sparza-state")``: a job's store as its tasks last committed it, as a Spark DataFrame.

::

    from sparza.storeview.spark import register
    register(spark)
    counts = (spark.read.format("sparza-state")
              .option("config", "examples/keyed_count/job.yaml").option("store", "counts").load())
    counts.createOrReplaceTempView("counts")
    spark.sql("SELECT key, SUM(value) AS total FROM counts GROUP BY key ORDER BY total DESC").show()

Columns: ``task`` (string), ``key`` and ``value`` typed by the store's serdes: ``string`` → string, ``integer`` →
int, ``long`` → bigint, ``double`` → double, ``bytes`` → binary, ``avro`` → the schema's Spark type (a record
becomes a struct: ``value.field`` in SQL), ``json`` → the JSON text, or a struct when the option
``valueSchema`` / ``keySchema`` gives its Spark DDL (``"count BIGINT, last STRING"``).

Options: ``config`` (path of the job config, readable where the executors run), ``store``, ``stage`` (an
application's stage, when several have the store), ``task`` (one task), ``checkpoint`` (as ``sparza store``).
The driver pins each task's committed snapshot when it plans the read, so one DataFrame is one consistent
set of task checkpoints; each Spark partition is one task, read on an executor from a private copy of its
snapshot. The running job is not touched (see :mod:`sparza.storeview.reader`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from sparza.storeview.reader import CommittedStores, StoreViewError, TaskSnapshot

__all__ = ["FORMAT", "StateDataSource", "StateReader", "avro_to_spark", "register", "serde_type"]

FORMAT = "sparza-state"
"""The format name: ``spark.read.format("sparza-state")``."""

_PRIMITIVES: dict[str, DataType] = {"string": StringType(), "int": IntegerType(), "long": LongType(),
                                    "float": FloatType(), "double": DoubleType(), "boolean": BooleanType(),
                                    "bytes": BinaryType(), "enum": StringType(), "fixed": BinaryType()}


def avro_to_spark(schema: Any) -> DataType:
    """The Spark type of values of Avro ``schema`` (parsed JSON): records become structs, ``["null", T]`` T."""
    if isinstance(schema, str):
        return _PRIMITIVES.get(schema, StringType())
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        return avro_to_spark(branches[0]) if len(branches) == 1 else StringType()
    kind = schema.get("type")
    if kind == "record":
        return StructType([StructField(f["name"], avro_to_spark(f["type"]), True) for f in schema["fields"]])
    if kind == "array":
        return ArrayType(avro_to_spark(schema["items"]), True)
    if kind == "map":
        return MapType(StringType(), avro_to_spark(schema["values"]), True)
    if isinstance(kind, str | list | dict) and kind not in _PRIMITIVES and kind not in ("enum", "fixed"):
        return avro_to_spark(kind)
    return _PRIMITIVES.get(str(kind), StringType())


def serde_type(serde: Any, ddl: str | None) -> str:
    """The column type (Spark DDL) of a store's key or value serde; ``ddl`` is the type a JSON serde's values
    have: a type (``bigint``, ``struct<count:bigint>``) or a field list (``count BIGINT, last STRING``).

    DDL text, not a DataType: the data source's ``schema`` runs in a Python worker without a Spark context
    to parse with, and Spark parses the text itself.
    """
    name = getattr(serde, "name", "bytes")
    if name == "json" and ddl:
        text = ddl.strip()
        single = " " not in text and "," not in text
        return text if single or text.lower().startswith(("struct<", "array<", "map<")) else f"struct<{text}>"
    if name == "avro":
        schema = serde.schema if not isinstance(serde.schema, str) else json.loads(serde.schema)
        return str(avro_to_spark(schema).simpleString())
    return {"string": "string", "integer": "int", "long": "bigint", "double": "double", "json": "string"}.get(
        name, "binary")


def _convert(value: Any, kind: DataType) -> Any:
    """A deserialized value as Spark wants it for ``kind`` (structs as tuples in field order)."""
    if value is None:
        return None
    if isinstance(kind, StructType):
        if not isinstance(value, dict):
            raise StoreViewError(f"expected an object for {kind.simpleString()}, got {type(value).__name__}")
        return tuple(_convert(value.get(f.name), f.dataType) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return [_convert(v, kind.elementType) for v in value]
    if isinstance(kind, MapType):
        return {str(k): _convert(v, kind.valueType) for k, v in value.items()}
    if isinstance(kind, StringType) and not isinstance(value, str):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(kind, BinaryType) and isinstance(value, str):
        return value.encode()
    return value


@dataclass
class _TaskPartition(InputPartition):  # type: ignore[misc]
    """One task's pinned snapshot."""

    snapshot: str


class StateReader(DataSourceReader):  # type: ignore[misc]
    """Plans one partition per task (its committed snapshot, pinned on the driver) and reads it on an executor."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def _stores(self) -> tuple[CommittedStores, Any]:
        stores = CommittedStores(_required(self.options, "config"))
        return stores, stores.store(_required(self.options, "store"), stage=self.options.get("stage"))

    def partitions(self) -> list[_TaskPartition]:
        """The tasks' committed snapshots now (``checkpoint`` picks another one)."""
        stores, ref = self._stores()
        checkpoint = self.options.get("checkpoint")
        return [_TaskPartition(stores.pick(ref, s, checkpoint).to_json())
                for s in stores.snapshots(ref, task=self.options.get("task"))]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Runs on an executor: every entry of the task's snapshot as ``(task, key, value)``."""
        assert isinstance(partition, _TaskPartition)
        stores, ref = self._stores()
        snapshot = TaskSnapshot.from_json(partition.snapshot)
        key_type, value_type = self.schema["key"].dataType, self.schema["value"].dataType
        with stores.open(ref, snapshot) as store:
            for key, value in store.all():
                yield snapshot.task, _convert(key, key_type), _convert(value, value_type)


class StateDataSource(DataSource):  # type: ignore[misc]
    """``format("sparza-state")`` (see the module docstring for its options and columns)."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def schema(self) -> str:
        """``task``, ``key`` and ``value``, typed by the store's serdes (Spark DDL)."""
        options = dict(self.options)
        stores = CommittedStores(_required(options, "config"))
        ref = stores.store(_required(options, "store"), stage=options.get("stage"))
        key = serde_type(stores.key_serde(ref), _option(options, "keySchema"))
        value = serde_type(stores.msg_serde(ref), _option(options, "valueSchema"))
        return f"task string, key {key}, value {value}"

    def reader(self, schema: StructType) -> StateReader:
        """The reader."""
        return StateReader(dict(self.options), schema)


def _option(options: dict[str, str], name: str) -> str | None:
    # Spark passes options case-insensitively (lower-cased keys in some versions).
    return options.get(name) or options.get(name.lower())


def _required(options: dict[str, str], name: str) -> str:
    value = _option(options, name)
    if not value:
        raise StoreViewError(f"format({FORMAT!r}) needs .option({name!r}, ...): config is the path of the job's "
                             "config, store the store's name")
    return value


def register(spark: Any) -> None:
    """Make ``format("sparza-state")`` known to ``spark``."""
    spark.dataSource.register(StateDataSource)
