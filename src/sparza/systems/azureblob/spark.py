"""The Spark sink ``format("azureblob")`` (Python Data Source API), built on the producer's writers.

Executors stage blocks; only the driver commits block lists, in ``commit(messages, batchId)``.
Usage::

    register_azureblob_sink(spark)
    (df.writeStream.format("azureblob")
       .option("container", "results").option("stream", "counts")
       .option("connectionString", conn)            # or account.name / account.key / endpoint
       .option("partitionColumn", "country")        # optional: one blob per value
       .option("timestampColumn", "window_end")     # optional: names' time (deterministic replays)
       .option("checkpointLocation", ckpt).start())

Every other option is a producer key without its prefix (``compression.type``, ``writer.format``,
``maxFlushThresholdSize``, ``maxBlobSize``, ``maxMessagesPerBlob``, ``threadPoolCount``, ...).

Exactly-once per micro-batch:

* blob names, block ids and Avro sync markers come from the transaction (sink id, batch id), the
  Spark partition, the stream, the partition value and the blob's sequence; the sink id is the
  streaming query's id (stable across restarts from one checkpoint) unless ``sinkId`` is set;
* the driver first records the batch's block lists in a manifest blob
  ``_sparza/sinks/<sink id>/<batch id>.json`` (created only if absent), then commits them. A replayed
  batch whose manifest exists re-commits exactly the manifest's block lists, so it never adds blobs,
  even when names carry wall-clock time (no ``timestampColumn``); with a ``timestampColumn`` the names
  themselves are deterministic too;
* a failed or aborted batch commits nothing: its staged blocks stay invisible and Azure discards
  uncommitted blocks after 7 days.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from sparza.config import Config
from sparza.errors import ConfigError
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.azureblob.client import BlobStorage
from sparza.systems.azureblob.naming import MANIFEST_PREFIX
from sparza.systems.azureblob.upload import PreparedBlob

__all__ = [
    "AzureBlobCommitMessage",
    "AzureBlobDataSource",
    "SinkOptions",
    "avro_schema_for",
    "register_azureblob_sink",
]

_PRODUCER_KEYS = ("account.name", "account.key", "sensitive.account.key", "endpoint", "proxy.use",
                  "proxy.hostname", "proxy.port", "compression.type", "maxFlushThresholdSize", "maxBlobSize",
                  "maxMessagesPerBlob", "threadPoolCount", "blockingQueueSize", "flushTimeoutMs", "closeTimeoutMs",
                  "writer.format", "maxBufferedBytes", "metadataPropertiesGeneratorFactory")
_SINK_KEYS = ("container", "stream", "partitionColumn", "timestampColumn", "sinkId", "connectionString")


def register_azureblob_sink(spark: Any) -> None:
    """Register ``format("azureblob")`` with ``spark`` (Python data sources are registered per session)."""
    spark.dataSource.register(AzureBlobDataSource)


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options, validated on the driver; picklable (shipped to executors)."""

    container: str
    stream: str
    partition_column: str | None
    timestamp_column: str | None
    sink_id: str | None
    config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Map Spark's (case-insensitive) options to producer config keys."""
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        container = lowered.get("container")
        if not container:
            raise ConfigError("container", None, "the option container (the Azure container = system name)")
        prefix = f"systems.{container}.azureblob."
        config: dict[str, str] = {}
        for key in _PRODUCER_KEYS:
            if key.lower() in lowered:
                config[prefix + key] = lowered[key.lower()]
        known = {k.lower() for k in _PRODUCER_KEYS + _SINK_KEYS} | {"path", "checkpointlocation", "queryname"}
        unknown = sorted(k for k in lowered if k not in known and not k.startswith("metadatageneratorconfig."))
        if unknown:
            raise ConfigError(unknown[0], lowered[unknown[0]], "an azureblob sink option: "
                              + ", ".join(_SINK_KEYS + _PRODUCER_KEYS))
        for key, value in lowered.items():
            if key.startswith("metadatageneratorconfig."):
                config[prefix + "metadataGeneratorConfig." + key.split(".", 1)[1]] = value
        if lowered.get("connectionstring"):
            config["azure.storage.connect"] = lowered["connectionstring"]
        return cls(container, lowered.get("stream") or lowered.get("path") or "out",
                   _column(options, "partitionColumn"), _column(options, "timestampColumn"),
                   lowered.get("sinkid"), config)

    def producer_config(self, avro_schema: dict[str, Any] | None) -> Config:
        """The producer config, with the stream's Avro schema when the format is avro."""
        values = dict(self.config)
        if avro_schema is not None:
            values[f"systems.{self.container}.streams.{self.stream}.avro.schema"] = json.dumps(avro_schema)
        return Config(values)

    def storage(self) -> BlobStorage:
        """A client for the container (driver side)."""
        from sparza.azure import resolve_storage_account
        from sparza.systems.azureblob.settings import ACCOUNT_KEYS

        account = resolve_storage_account(self.config, ACCOUNT_KEYS, names={"container": self.container})
        return BlobStorage(account.blob_service_client(), self.container)


def _column(options: Mapping[str, str], name: str) -> str | None:
    for key, value in options.items():
        if str(key).lower() == name.lower():
            return str(value) or None
    return None


# --- Spark schema -> Avro schema ---------------------------------------------------------------------
def avro_schema_for(schema: Any, name: str = "Row", namespace: str = "sparza") -> dict[str, Any]:
    """An Avro record schema for a Spark ``StructType`` (nullable fields become ``["null", T]``)."""
    counter = [0]

    def record(struct: Any, rec_name: str) -> dict[str, Any]:
        fields = []
        for f in struct.fields:
            avro_type = convert(f.dataType, f.name)
            if f.nullable:
                fields.append({"name": f.name, "type": ["null", avro_type], "default": None})
            else:
                fields.append({"name": f.name, "type": avro_type})
        return {"type": "record", "name": rec_name, "namespace": namespace, "fields": fields}

    def convert(data_type: Any, field_name: str) -> Any:
        from pyspark.sql import types as T

        simple = {T.BooleanType: "boolean", T.ByteType: "int", T.ShortType: "int", T.IntegerType: "int",
                  T.LongType: "long", T.FloatType: "float", T.DoubleType: "double", T.StringType: "string",
                  T.BinaryType: "bytes"}
        for spark_type, avro in simple.items():
            if isinstance(data_type, spark_type):
                return avro
        if isinstance(data_type, T.DateType):
            return {"type": "int", "logicalType": "date"}
        if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
            return {"type": "long", "logicalType": "timestamp-micros"}
        if isinstance(data_type, T.DecimalType):
            return {"type": "bytes", "logicalType": "decimal", "precision": data_type.precision,
                    "scale": data_type.scale}
        if isinstance(data_type, T.ArrayType):
            items = convert(data_type.elementType, field_name)
            return {"type": "array", "items": ["null", items] if data_type.containsNull else items}
        if isinstance(data_type, T.MapType):
            values = convert(data_type.valueType, field_name)
            return {"type": "map", "values": ["null", values] if data_type.valueContainsNull else values}
        if isinstance(data_type, T.StructType):
            counter[0] += 1
            return record(data_type, f"{field_name[:1].upper()}{field_name[1:]}_{counter[0]}")
        raise ConfigError("schema", str(data_type), "column types Avro can hold (no intervals, variants, ...)")

    return record(schema, name)


def _plain(value: Any) -> Any:
    """Arrow's Python values made Avro/JSON friendly (maps come as lists of pairs)."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return {str(k): _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(type(value).__name__)


def _epoch_ms(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return int(dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp() * 1000)
    return int(value)


# --- commit messages and the shared write path ---------------------------------------------------------
@dataclass
class AzureBlobCommitMessage(WriterCommitMessage):
    """What one Spark task staged: its partition, the sink id it used, and its uncommitted blobs."""

    partition_id: int
    sink_id: str
    blobs: list[PreparedBlob]
    rows: int


def _write_partition(options: SinkOptions, avro_schema: dict[str, Any] | None, writer_format: str,
                     batches: Iterator[Any], app_id_suffix: str | None) -> AzureBlobCommitMessage:
    from pyspark import TaskContext

    from sparza.systems.azureblob.producer import AzureBlobSystemProducer

    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    batch_prop = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
    sink_id = options.sink_id or query_id or f"{options.container}/{options.stream}"
    app_id = sink_id if app_id_suffix is None else f"{sink_id}/{app_id_suffix}"
    transaction = (app_id, int(batch_prop) if batch_prop is not None else 0)
    producer = AzureBlobSystemProducer(options.container, options.producer_config(avro_schema))
    source = f"part-{partition_id:05d}"
    producer.start()
    rows = 0
    try:
        producer.begin(source, transaction)
        system_stream = SystemStream(options.container, options.stream)
        now_ms = int(time.time() * 1000)
        for batch in batches:
            for row in batch.to_pylist():
                rows += 1
                pkey = row.get(options.partition_column) if options.partition_column else None
                ts = _epoch_ms(row.get(options.timestamp_column)) if options.timestamp_column else now_ms
                if writer_format == "avro":
                    message: Any = AvroRecord(avro_schema, _plain(row))
                elif writer_format == "jsonl":
                    message = json.dumps(_plain(row), default=_json_default, separators=(",", ":")).encode()
                else:
                    message = row.get("value")
                producer.send(source, OutgoingMessageEnvelope(system_stream, message, partition_key=pkey,
                                                              timestamp=ts if ts is not None else now_ms))
        blobs = producer.prepare(source, transaction=transaction)
    except BaseException:
        producer.abandon()  # never commit from an executor: the driver decides, and this task failed
        raise
    producer.stop()
    return AzureBlobCommitMessage(partition_id, app_id, blobs, rows)


def _commit_blobs(storage: BlobStorage, blobs: list[PreparedBlob]) -> None:
    for blob in blobs:
        storage.commit_block_list(blob.name, blob.block_ids, blob.metadata, content_type=blob.content_type,
                                  owner=blob.owner)


def _manifest_name(sink_id: str, batch_id: int) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in sink_id)
    return f"{MANIFEST_PREFIX}{safe}/{batch_id:020d}.json"


def _encode_manifest(blobs: list[PreparedBlob]) -> bytes:
    return json.dumps([{"name": b.name, "block_ids": list(b.block_ids), "metadata": b.metadata,
                        "content_type": b.content_type, "records": b.records, "raw_size": b.raw_size,
                        "owner": b.owner}
                       for b in blobs]).encode("utf-8")


def _decode_manifest(data: bytes) -> list[PreparedBlob]:
    return [PreparedBlob(d["name"], tuple(d["block_ids"]), d["metadata"], d["content_type"], d["records"],
                         d["raw_size"], d.get("owner")) for d in json.loads(data)]


class _WriterBase:
    def __init__(self, options: SinkOptions, schema: Any) -> None:
        self.options = options
        cfg = options.producer_config(None)
        from sparza.systems.azureblob.settings import WRITER_FORMAT

        self.writer_format = WRITER_FORMAT.get(cfg, container=options.container)
        self.avro_schema = avro_schema_for(schema) if self.writer_format == "avro" else None
        if self.writer_format == "raw" and "value" not in schema.fieldNames():
            raise ConfigError("writer.format", "raw", "a DataFrame with a binary or string column 'value'")
        # validate every producer key now, on the driver, rather than in every task
        from sparza.systems.azureblob.settings import AzureBlobSettings

        AzureBlobSettings.from_config(options.container, options.producer_config(self.avro_schema))


class AzureBlobStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Streaming writer: executors stage, the driver records a manifest and commits per batch id."""

    def write(self, iterator: Iterator[Any]) -> AzureBlobCommitMessage:
        return _write_partition(self.options, self.avro_schema, self.writer_format, iterator, None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m for m in messages if isinstance(m, AzureBlobCommitMessage)]
        blobs = [b for m in staged for b in m.blobs]
        if not blobs:
            return
        storage = self.options.storage()
        manifest = _manifest_name(staged[0].sink_id, batchId)
        if not storage.put_if_absent(manifest, _encode_manifest(blobs)):
            # a replay of a batch already (maybe partly) committed: finish exactly what was decided then
            existing = storage.download(manifest)
            if existing is not None:
                blobs = _decode_manifest(existing)
        _commit_blobs(storage, blobs)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: staged blocks are invisible until committed and Azure drops them after 7 days."""


class AzureBlobBatchWriter(_WriterBase, DataSourceArrowWriter):
    """Batch writer (``df.write``): one write job = one transaction with a fresh id; driver commits."""

    def __init__(self, options: SinkOptions, schema: Any) -> None:
        super().__init__(options, schema)
        self.job_id = uuid.uuid4().hex[:12]  # made on the driver: task retries reuse it (same names)

    def write(self, iterator: Iterator[Any]) -> AzureBlobCommitMessage:
        return _write_partition(self.options, self.avro_schema, self.writer_format, iterator, self.job_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        blobs = [b for m in messages if isinstance(m, AzureBlobCommitMessage) for b in m.blobs]
        if blobs:
            _commit_blobs(self.options.storage(), blobs)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: staged blocks are never visible."""


class AzureBlobDataSource(DataSource):
    """``format("azureblob")``: a write-only data source (batch and streaming)."""

    @classmethod
    def name(cls) -> str:
        return "azureblob"

    def writer(self, schema: Any, overwrite: bool) -> AzureBlobBatchWriter:
        return AzureBlobBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> AzureBlobStreamWriter:
        return AzureBlobStreamWriter(SinkOptions.parse(self.options), schema)
