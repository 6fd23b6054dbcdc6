"""Typed result tables: a delta stream configured with a schema is written as a plain Delta table.

A stream ``x`` of a delta system becomes a *typed table* when ``systems.<s>.streams.<x>.delta.table.schema``
or ``...delta.table.mode`` is set. Each message (a dict, a dataclass, JSON or Avro bytes) becomes one row
with real columns; there is no ``partition``/``key``/``value`` layout and no control row, so Spark SQL,
DuckDB, Polars and BI tools read the table directly. Two modes:

- ``append``: every message is a new row. One flush is one ``write_deltalake`` commit.
- ``upsert``: rows are identified by the key columns (``delta.table.key``); a flush merges the source's
  latest row per key (a ``None`` message deletes the key) in one Delta ``MERGE`` commit.

Both commit with the batch's app transaction ``(app_id, version)`` in the same commit as the data, and skip
a transaction the table already records (delta-rs records app transactions but does not skip replays by
itself), so a replayed batch adds and changes nothing. Concurrent merges from other tasks make a commit
fail ("a concurrent transaction added new data"); the merge is then re-run on the new snapshot, which is
safe because each task's rows replace whole rows by key (see docs/tables.md for what this means when two
tasks write the same key).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparza.errors import ConfigError, SerdeError, SparzaError, payload_preview
from sparza.serde import AvroRecord, BytesSerde, Serde
from sparza.streams import MessageType, OutgoingMessageEnvelope
from sparza.systems import Transaction
from sparza.systems.delta.settings import StreamLocation
from sparza.systems.delta.storage import ensure_container, storage_errors

__all__ = [
    "MODES",
    "OptimizeResult",
    "TableError",
    "TableSpec",
    "TypedTable",
    "arrow_schema_to_text",
    "ensure_table",
    "optimize_table",
    "parse_schema",
    "table_spec_from_config",
]

MODES = ("append", "upsert")
"""The write modes of a typed table."""

MODE_PROPERTY = "sparza.table.mode"
KEY_PROPERTY = "sparza.table.key"
_DELETE = "__sparza_delete"
_RESERVED_PREFIX = "__sparza"


class TableError(SparzaError, ValueError):
    """A message does not fit its typed table, or the table cannot take the declared schema."""


# --- schemas -----------------------------------------------------------------------------------

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "str": pa.string(), "text": pa.string(),
    "long": pa.int64(), "bigint": pa.int64(), "int64": pa.int64(),
    "int": pa.int32(), "integer": pa.int32(), "int32": pa.int32(),
    "short": pa.int16(), "smallint": pa.int16(), "int16": pa.int16(),
    "byte": pa.int8(), "tinyint": pa.int8(), "int8": pa.int8(),
    "double": pa.float64(), "float64": pa.float64(),
    "float": pa.float32(), "float32": pa.float32(),
    "boolean": pa.bool_(), "bool": pa.bool_(),
    "binary": pa.binary(), "bytes": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[:\s]\s*([A-Za-z_0-9]+(?:\(\s*\d+\s*,\s*\d+\s*\))?)"
                    r"(\s+not\s+null)?\s*$", re.IGNORECASE)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$", re.IGNORECASE)


def _simple_type(name: str, where: str) -> pa.DataType:
    match = _DECIMAL.match(name)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    found = _SIMPLE_TYPES.get(name.lower())
    if found is None:
        raise TableError(f"{where}: unknown column type {name!r}; use one of "
                         f"{', '.join(sorted(set(_SIMPLE_TYPES)))} or decimal(p,s)")
    return found


def _split_fields(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


_AVRO_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(), "float": pa.float32(),
    "boolean": pa.bool_(), "bytes": pa.binary(),
}


def _avro_field_type(avro: Any, where: str) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of an Avro field type; unions with null make the column nullable."""
    nullable = False
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        nullable = len(branches) < len(avro)
        if len(branches) != 1:
            raise TableError(f"{where}: Avro unions other than [null, T] have no column type")
        avro = branches[0]
    logical = None
    if isinstance(avro, dict):
        logical = avro.get("logicalType")
        base = avro.get("type")
        if logical in ("timestamp-millis", "timestamp-micros"):
            return pa.timestamp("us", tz="UTC"), nullable
        if logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return pa.timestamp("us"), nullable
        if logical == "date":
            return pa.date32(), nullable
        if logical == "decimal":
            return pa.decimal128(int(avro["precision"]), int(avro.get("scale", 0))), nullable
        avro = base
    if isinstance(avro, str) and avro in _AVRO_TYPES:
        return _AVRO_TYPES[avro], nullable
    raise TableError(f"{where}: Avro type {avro!r} has no column type (records, arrays, maps and enums are not "
                     f"supported in typed tables)")


def avro_to_arrow(schema: Any) -> pa.Schema:
    """The Arrow schema of an Avro record schema (one column per field; ``[null, T]`` is nullable)."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise TableError("an Avro schema for a typed table must be a record")
    fields = []
    for item in schema.get("fields", []):
        arrow_type, nullable = _avro_field_type(item["type"], f"Avro field {item.get('name')!r}")
        fields.append(pa.field(item["name"], arrow_type, nullable=nullable))
    return pa.schema(fields)


def parse_schema(text: Any, where: str = "schema") -> pa.Schema:
    """A typed table's schema from config text, a file path, an Avro record dict or a pyarrow schema.

    Text forms: ``"page string not null, window_start timestamp, views long"`` (``name:type`` works too),
    a Delta schema JSON (``{"type": "struct", "fields": [...]}``) or an Avro record schema JSON.
    """
    if isinstance(text, pa.Schema):
        schema = text
    elif isinstance(text, dict):
        schema = _schema_from_json(text, where)
    else:
        raw = str(text).strip()
        if not raw:
            raise TableError(f"{where}: empty schema")
        if not raw.startswith("{") and ("/" in raw or raw.endswith((".json", ".avsc"))) and Path(raw).is_file():
            raw = Path(raw).read_text(encoding="utf-8").strip()
        if raw.startswith("{"):
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise TableError(f"{where}: not valid JSON ({exc})") from exc
            schema = _schema_from_json(data, where)
        else:
            fields = []
            for part in _split_fields(raw):
                match = _FIELD.match(part)
                if not match:
                    raise TableError(f"{where}: cannot read column {part.strip()!r}; write 'name type' or "
                                     f"'name type not null', separated by commas")
                fields.append(pa.field(match.group(1), _simple_type(match.group(2), f"{where} column "
                                                                    f"{match.group(1)!r}"),
                                       nullable=not match.group(3)))
            schema = pa.schema(fields)
    names = [f.name for f in schema]
    if not names:
        raise TableError(f"{where}: a typed table needs at least one column")
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise TableError(f"{where}: column {name!r} is declared twice")
        if name.startswith(_RESERVED_PREFIX):
            raise TableError(f"{where}: column names starting with {_RESERVED_PREFIX!r} are reserved ({name!r})")
        seen.add(name.lower())
    return _normalized(schema)


def _schema_from_json(data: Any, where: str) -> pa.Schema:
    if isinstance(data, dict) and data.get("type") == "record":
        return avro_to_arrow(data)
    if isinstance(data, dict) and data.get("type") == "struct":
        from deltalake import Schema

        try:
            return pa.schema(Schema.from_json(json.dumps(data)).to_arrow())
        except Exception as exc:
            raise TableError(f"{where}: not a valid Delta schema ({exc})") from exc
    raise TableError(f"{where}: JSON schema must be a Delta struct ({{\"type\": \"struct\", ...}}) or an Avro record")


def _normalized(schema: pa.Schema) -> pa.Schema:
    """Timestamps in microseconds (Delta's unit), strings and binaries in their plain Arrow types."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz="UTC" if t.tz else None)
        elif pa.types.is_large_string(t) or pa.types.is_string_view(t):
            t = pa.string()
        elif pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            t = pa.binary()
        elif pa.types.is_date64(t):
            t = pa.date32()
        fields.append(pa.field(f.name, t, nullable=f.nullable))
    return pa.schema(fields)


def arrow_schema_to_text(schema: pa.Schema) -> str:
    """The Delta schema JSON of ``schema``: how the planner writes a high-level output's schema into config."""
    from deltalake import Schema

    return str(Schema.from_arrow(_normalized(schema)).to_json())


# --- the spec ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TableSpec:
    """How one stream is written as a typed table (built from ``systems.<s>.streams.<x>.delta.table.*``)."""

    stream: str
    schema: pa.Schema
    mode: str = "append"
    key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    timestamp_column: str | None = None
    message_key_column: str | None = None

    def __post_init__(self) -> None:
        names = set(self.schema.names)
        where = f"typed table {self.stream!r}"
        if self.mode not in MODES:
            raise TableError(f"{where}: mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode == "upsert" and not self.key:
            raise TableError(f"{where}: upsert needs key columns (delta.table.key)")
        for role, columns in (("key", self.key), ("partition", self.partition_by)):
            for column in columns:
                if column not in names:
                    raise TableError(f"{where}: {role} column {column!r} is not in the schema "
                                     f"({', '.join(self.schema.names)})")
        for role, column in (("timestamp", self.timestamp_column), ("message key", self.message_key_column)):
            if column is not None and column not in names:
                raise TableError(f"{where}: {role} column {column!r} is not in the schema "
                                 f"({', '.join(self.schema.names)})")

    @property
    def table_properties(self) -> dict[str, str]:
        """The properties a new table records (mode and key columns are checked on every later start)."""
        return {MODE_PROPERTY: self.mode, KEY_PROPERTY: ",".join(self.key)}


# --- table creation and evolution ------------------------------------------------------------------

def _delta_types(schema: Any) -> dict[str, tuple[str, bool]]:
    """Column name → (Delta type text, nullable) of a ``deltalake.Schema``."""
    out = {}
    for f in schema.fields:
        out[f.name] = (f.type.to_json() if hasattr(f.type, "to_json") else str(f.type), f.nullable)
    return out


def _type_text(delta_type: str) -> str:
    try:
        value = json.loads(delta_type)
    except ValueError:
        return delta_type
    return value if isinstance(value, str) else delta_type


def ensure_table(location: StreamLocation, spec: TableSpec, *, config: Any = None, system: str = "",
                 log_retention: str | None = None) -> Any:
    """Open (or create) the table of ``spec`` and bring its schema up to the declared one.

    New nullable columns are added without rewriting data (Delta ``ALTER TABLE ADD COLUMNS``). A declared
    column whose type or nullability differs from the table's, a missing table column, a non-null new
    column, other partition columns, another mode or other key columns are refused with a
    :class:`TableError` naming what differs.
    """
    from deltalake import DeltaTable, Field, Schema

    if location.is_remote and config is not None:
        ensure_container(config, f"systems.{system}.delta.", location.uri)
    with storage_errors(location.uri):
        exists = DeltaTable.is_deltatable(location.uri, storage_options=location.storage_options)
    if not exists:
        properties = {**spec.table_properties, "sparza.system": system,
                      "sparza.createdAt": str(int(time.time() * 1000))}
        if log_retention:
            properties["delta.logRetentionDuration"] = log_retention
        if not location.is_remote:
            Path(location.uri).mkdir(parents=True, exist_ok=True)
        try:
            with storage_errors(location.uri):
                DeltaTable.create(location.uri, Schema.from_arrow(spec.schema), mode="error",
                                  partition_by=list(spec.partition_by) or None, name=spec.stream,
                                  configuration=properties, storage_options=location.storage_options,
                                  raise_if_key_not_exists=False)
        except Exception:
            # Another task may have created it first: then check it like any existing table.
            if not DeltaTable.is_deltatable(location.uri, storage_options=location.storage_options):
                raise
    for _attempt in range(20):
        with storage_errors(location.uri):
            table = DeltaTable(location.uri, storage_options=location.storage_options)
        missing = _check_existing(table, spec, location)
        if not missing:
            return table
        try:
            with storage_errors(location.uri):
                table.alter.add_columns([Field(f.name, Schema.from_arrow(pa.schema([f])).fields[0].type,
                                               nullable=True) for f in missing])
        except Exception as exc:
            # A concurrent task may have added them: re-read and check again.
            if "already exists" not in str(exc).lower() and "concurrent" not in str(exc).lower():
                raise TableError(f"typed table {spec.stream!r}: adding columns "
                                 f"{', '.join(f.name for f in missing)} failed: {exc}") from exc
    raise TableError(f"typed table {spec.stream!r}: could not add columns after 20 attempts (concurrent changes)")


def _check_existing(table: Any, spec: TableSpec, location: StreamLocation) -> list[pa.Field]:
    """Refuse incompatible tables; return the declared nullable columns the table still lacks."""
    from deltalake import Schema

    where = f"typed table {spec.stream!r} at {location.uri}"
    config = dict(table.metadata().configuration)
    if "sparza.partitions" in config:
        raise TableError(f"{where} is a sparza stream (partition/key/value rows), not a typed table; give the "
                         f"typed table its own location (delta.location)")
    mode = config.get(MODE_PROPERTY)
    if mode is not None and mode != spec.mode:
        raise TableError(f"{where} was created in mode {mode!r}, the config says {spec.mode!r}; write to a new "
                         f"table or change delta.table.mode back")
    key = config.get(KEY_PROPERTY)
    if mode == "upsert" and key is not None and key != ",".join(spec.key):
        raise TableError(f"{where} is keyed by {key!r}, the config says {','.join(spec.key)!r}")
    partitions = list(table.metadata().partition_columns)
    if partitions != list(spec.partition_by):
        raise TableError(f"{where} is partitioned by {partitions or 'nothing'}, the config says "
                         f"{list(spec.partition_by) or 'nothing'} (delta.table.partition.by)")
    current = _delta_types(table.schema())
    declared = _delta_types(Schema.from_arrow(spec.schema))
    for name in current:
        if name not in declared:
            raise TableError(f"{where}: column {name!r} is in the table but not in the declared schema; declare "
                             f"it again (columns cannot be dropped without rewriting the table)")
    missing = []
    for f in spec.schema:
        if f.name not in current:
            if not f.nullable:
                raise TableError(f"{where}: new column {f.name!r} is declared NOT NULL; a column added to an "
                                 f"existing table must be nullable (its old rows have no value)")
            missing.append(f)
            continue
        have_type, have_null = current[f.name]
        want_type, want_null = declared[f.name]
        if have_type != want_type:
            raise TableError(f"{where}: column {f.name!r} is {_type_text(have_type)} in the table but declared "
                             f"{_type_text(want_type)}; changing a column's type needs a rewrite of the table")
        if have_null and not want_null:
            raise TableError(f"{where}: column {f.name!r} is nullable in the table but declared NOT NULL")
    return missing


# --- rows --------------------------------------------------------------------------------------

def _as_mapping(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, AvroRecord):
        return _as_mapping(obj.datum)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    asdict = getattr(obj, "_asdict", None)  # NamedTuple
    if callable(asdict):
        return dict(asdict())
    return None


@dataclass
class _Buffer:
    """What one source sent to one table since its last flush."""

    rows: list[dict[str, Any]] = field(default_factory=list)          # append
    latest: dict[tuple[Any, ...], dict[str, Any] | None] = field(default_factory=dict)  # upsert: key -> row/None

    def __len__(self) -> int:
        return len(self.rows) + len(self.latest)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


class TypedTable:
    """Buffers rows per source for one typed table and commits them per flush (see the module docstring)."""

    def __init__(self, spec: TableSpec, location: StreamLocation, msg_serde: Serde, key_serde: Serde, *,
                 commit_retries: int = 100, config: Any = None, system: str = "",
                 log_retention: str | None = None) -> None:
        self.spec = spec
        self.location = location
        self.msg_serde = msg_serde
        self.key_serde = key_serde
        self.commit_retries = commit_retries
        self._config = config
        self._system = system
        self._log_retention = log_retention
        self._table: Any = None
        self._buffers: dict[str, _Buffer] = {}
        self._names = set(spec.schema.names)
        self._input_schema = pa.schema([pa.field(f.name, pa.timestamp("ms", tz=f.type.tz)
                                                 if pa.types.is_timestamp(f.type) else f.type, f.nullable)
                                        for f in spec.schema])
        self.stats = {"commits": 0, "rows": 0, "skipped": 0, "conflicts": 0}

    # --- sending -------------------------------------------------------------------------------
    def _row(self, message: Any) -> dict[str, Any]:
        if isinstance(message, bytes | bytearray | memoryview):
            if isinstance(self.msg_serde, BytesSerde):
                raise TableError(f"typed table {self.spec.stream!r} got bytes but its samza.msg.serde is bytes; "
                                 f"send dicts, or set systems.<s>.streams.{self.spec.stream}.samza.msg.serde "
                                 f"to json or avro")
            try:
                message = self.msg_serde.from_bytes(bytes(message))
            except SerdeError as exc:
                raise TableError(f"typed table {self.spec.stream!r}: message is not {self.msg_serde.name}: "
                                 f"{exc}") from exc
        row = _as_mapping(message)
        if row is None:
            raise TableError(f"typed table {self.spec.stream!r} takes dicts, dataclasses, named tuples or "
                             f"{self.msg_serde.name} bytes; got {type(message).__name__}")
        unknown = [name for name in row if name not in self._names]
        if unknown:
            raise TableError(f"typed table {self.spec.stream!r} has no column {unknown[0]!r} (columns: "
                             f"{', '.join(self.spec.schema.names)}); declare it in delta.table.schema "
                             f"(a new nullable column is added to the table without rewriting it)")
        return dict(row)

    def _key_value(self, key: Any) -> Any:
        if isinstance(key, bytes | bytearray | memoryview):
            if not isinstance(self.key_serde, BytesSerde):
                return self.key_serde.from_bytes(bytes(key))
            try:
                return bytes(key).decode("utf-8")
            except UnicodeDecodeError:
                return bytes(key)
        return key

    def _fill_from_key(self, row: dict[str, Any], key: Any) -> None:
        """Key columns the row lacks are taken from the envelope's key (a dict, a sequence or a scalar)."""
        columns = self.spec.key
        if key is None:
            return
        value = self._key_value(key)
        if isinstance(value, dict):
            for column in columns:
                if column in value:
                    row.setdefault(column, value[column])
        elif isinstance(value, list | tuple) and len(columns) > 1:
            if len(value) != len(columns):
                raise TableError(f"typed table {self.spec.stream!r}: a key of {len(value)} values for "
                                 f"{len(columns)} key columns ({', '.join(columns)})")
            for column, item in zip(columns, value, strict=True):
                row.setdefault(column, item)
        elif len(columns) == 1:
            row.setdefault(columns[0], value)

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Buffer one message as a row (or, in upsert mode, a ``None`` message as the deletion of its key)."""
        if envelope.type != MessageType.USER:
            raise TableError(f"typed table {self.spec.stream!r} got a {MessageType(envelope.type).name} control "
                             f"message; intermediate streams (partition_by) cannot be typed tables")
        buffer = self._buffers.get(source)
        if buffer is None:
            buffer = self._buffers[source] = _Buffer()
        spec = self.spec
        if envelope.message is None:
            if spec.mode != "upsert":
                raise TableError(f"typed table {spec.stream!r} is append-only: a None message (a deletion) needs "
                                 f"delta.table.mode: upsert")
            row: dict[str, Any] = {}
            self._fill_from_key(row, envelope.key)
            buffer.latest[self._key_of(row)] = None
            return
        row = self._row(envelope.message)
        if spec.timestamp_column is not None and row.get(spec.timestamp_column) is None:
            row[spec.timestamp_column] = envelope.timestamp  # None stays null: a row never gets the wall clock
        if spec.message_key_column is not None and row.get(spec.message_key_column) is None \
                and envelope.key is not None:
            row[spec.message_key_column] = self._key_value(envelope.key)
        if spec.mode == "upsert":
            self._fill_from_key(row, envelope.key)
            buffer.latest[self._key_of(row)] = row
        else:
            buffer.rows.append(row)

    def _key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        values = []
        for column in self.spec.key:
            value = row.get(column)
            if value is None:
                raise TableError(f"typed table {self.spec.stream!r}: key column {column!r} has no value; give it "
                                 f"in the message or as the message key")
            values.append(_hashable(value))
        return tuple(values)

    def pending(self, source: str) -> int:
        """Rows (or upsert keys) ``source`` buffered since its last flush."""
        buffer = self._buffers.get(source)
        return len(buffer) if buffer is not None else 0

    def abandon(self, source: str) -> None:
        """Forget what ``source`` buffered."""
        self._buffers.pop(source, None)

    # --- building Arrow data ----------------------------------------------------------------
    def _arrow(self, rows: list[dict[str, Any]], deleted: list[bool] | None = None) -> pa.Table:
        """The rows as Arrow in the table's types; a clear error names the first column a value does not fit.

        ``deleted`` marks deletions of a merge: they carry only their key, so NOT NULL is checked on the
        other rows and the result's columns are all nullable.
        """
        columns = []
        for f in self._input_schema:
            values = [r.get(f.name) for r in rows]
            if (pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)) and any(isinstance(v, str) for v in values):
                values = [_parse_time(v, f) if isinstance(v, str) else v for v in values]
            try:
                array = pa.array(values, type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                bad = next((v for v in values if not _fits(v, f.type)), None)
                raise TableError(f"typed table {self.spec.stream!r}: column {f.name!r} ({f.type}) cannot hold "
                                 f"a {type(bad).__name__} {payload_preview(bad)} ({type(exc).__name__})") from exc
            if not f.nullable and array.null_count:
                missing = array.null_count if deleted is None else sum(
                    1 for v, d in zip(values, deleted, strict=True) if v is None and not d)
                if missing:
                    raise TableError(f"typed table {self.spec.stream!r}: column {f.name!r} is NOT NULL but "
                                     f"{missing} of {len(values)} rows have no value for it")
            columns.append(array)
        if deleted is None:
            return pa.Table.from_arrays(columns, schema=self._input_schema).cast(self.spec.schema)
        relaxed = pa.schema([pa.field(f.name, f.type, True) for f in self._input_schema])
        target = pa.schema([pa.field(f.name, f.type, True) for f in self.spec.schema])
        return pa.Table.from_arrays(columns, schema=relaxed).cast(target)

    # --- flushing ------------------------------------------------------------------------------
    def _open(self) -> Any:
        if self._table is None:
            self._table = ensure_table(self.location, self.spec, config=self._config, system=self._system,
                                       log_retention=self._log_retention)
        else:
            with storage_errors(self.location.uri):
                self._table.update_incremental()
        return self._table

    def flush(self, source: str, transaction: Transaction | None) -> None:
        """Commit what ``source`` buffered: one append or one merge, carrying ``transaction`` when given.

        Nothing is committed for a transaction the table already records (a replay). The buffer is kept
        when the commit fails, so a later flush may try again.
        """
        buffer = self._buffers.get(source)
        if buffer is None or not len(buffer):
            self._buffers.pop(source, None)
            return
        from deltalake.exceptions import CommitFailedError

        attempts = 0
        while True:
            table = self._open()
            if transaction is not None:
                done = table.transaction_version(transaction.app_id)
                if done is not None and done >= transaction.version:
                    self.stats["skipped"] += 1
                    break
            try:
                if self.spec.mode == "append":
                    self._append(table, buffer.rows, source, transaction)
                else:
                    self._merge(table, buffer.latest, source, transaction)
                break
            except CommitFailedError:
                # Another writer committed first (a concurrent merge, or this very transaction): re-read, check
                # the transaction again and re-run the commit on the new snapshot.
                attempts += 1
                self.stats["conflicts"] += 1
                if attempts > self.commit_retries:
                    raise
                time.sleep(min(0.05 * attempts, 1.0))
        self._buffers.pop(source, None)

    def _properties(self, source: str, transaction: Transaction | None) -> Any:
        from deltalake.transaction import CommitProperties
        from deltalake.transaction import Transaction as DeltaTransaction

        return CommitProperties(
            max_commit_retries=self.commit_retries,
            app_transactions=[DeltaTransaction(transaction.app_id, transaction.version)] if transaction else None,
            custom_metadata={"sparza.producer": source})

    def _append(self, table: Any, rows: list[dict[str, Any]], source: str, transaction: Transaction | None) -> None:
        from deltalake import write_deltalake

        data = self._arrow(rows)
        with storage_errors(self.location.uri):
            write_deltalake(table, data, mode="append", commit_properties=self._properties(source, transaction))
        self.stats["commits"] += 1
        self.stats["rows"] += data.num_rows

    def _merge(self, table: Any, latest: dict[tuple[Any, ...], dict[str, Any] | None], source: str,
               transaction: Transaction | None) -> None:
        rows: list[dict[str, Any]] = []
        deleted: list[bool] = []
        for key, row in latest.items():
            if row is None:
                rows.append(dict(zip(self.spec.key, key, strict=True)))
                deleted.append(True)
            else:
                rows.append(row)
                deleted.append(False)
        data = self._arrow(rows, deleted if any(deleted) else None)
        data = data.append_column(pa.field(_DELETE, pa.bool_(), nullable=False), pa.array(deleted, pa.bool_()))
        names = self.spec.schema.names
        predicate = " AND ".join(f't."{c}" = s."{c}"' for c in self.spec.key)
        values = {f'"{c}"': f's."{c}"' for c in names}
        with storage_errors(self.location.uri):
            (table.merge(data, predicate, source_alias="s", target_alias="t",
                         commit_properties=self._properties(source, transaction))
             .when_matched_delete(predicate=f's."{_DELETE}"')
             .when_matched_update(updates=values)
             .when_not_matched_insert(updates=values, predicate=f'NOT s."{_DELETE}"')
             .execute())
        self.stats["commits"] += 1
        self.stats["rows"] += len(rows)



def _parse_time(text: str, f: pa.Field) -> Any:
    """ISO-8601 text (what JSON carries) for a date or timestamp column; naive times are UTC."""
    import datetime as dt

    try:
        if pa.types.is_date(f.type):
            return dt.date.fromisoformat(text.strip()[:10])
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise TableError(f"column {f.name!r} ({f.type}) cannot hold {text!r}: not an ISO-8601 date/time") from exc
    if f.type.tz is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed


def _fits(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        pa.array([value], type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return False
    return True


def table_spec_from_config(settings: Any, stream: str) -> TableSpec | None:
    """The :class:`TableSpec` of ``stream`` from its ``delta.table.*`` keys (None: a plain stream)."""
    config = settings.config
    schema_key = settings.stream_key(stream, "delta.table.schema")
    mode_key = settings.stream_key(stream, "delta.table.mode")
    schema_text = config.get_str(schema_key, None)
    mode = config.get_choice(mode_key, MODES, None)
    if schema_text is None and mode is None:
        return None
    try:
        if schema_text is not None:
            schema = parse_schema(schema_text, schema_key)
        else:
            schema = _schema_from_serde(settings, stream)
        return TableSpec(
            stream=stream, schema=schema, mode=mode or "append",
            key=tuple(config.get_list(settings.stream_key(stream, "delta.table.key"), [])),
            partition_by=tuple(config.get_list(settings.stream_key(stream, "delta.table.partition.by"), [])),
            timestamp_column=config.get_str(settings.stream_key(stream, "delta.table.timestamp.column"), None),
            message_key_column=config.get_str(settings.stream_key(stream, "delta.table.message.key.column"), None))
    except TableError as exc:
        raise ConfigError(schema_key if schema_text is not None else mode_key,
                          schema_text if schema_text is not None else mode, f"a valid typed table ({exc})") from exc


def _schema_from_serde(settings: Any, stream: str) -> pa.Schema:
    serde = settings.msg_serde(stream)
    schema = getattr(serde, "schema", None)
    if schema is None:
        raise TableError(f"typed table {stream!r} has no schema: set "
                         f"{settings.stream_key(stream, 'delta.table.schema')} or use an avro msg serde with "
                         f"{settings.stream_key(stream, 'samza.msg.schema')}")
    return avro_to_arrow(schema)



# --- maintenance -------------------------------------------------------------------------------

MIN_VACUUM_RETENTION_HOURS = 1
"""Vacuum never deletes files tombstoned less than this long ago: a merge that started from an older
snapshot may still be reading them (it would fail and be retried, but need not)."""


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """What ``optimize`` did: files compacted, the compaction's version, and files vacuumed."""

    files_removed: int
    files_added: int
    version: int | None
    vacuumed: int | None


def optimize_table(location: StreamLocation, *, target_size: int = 128 << 20, vacuum_retention_hours: float | None
                   = None, min_retention_hours: float = MIN_VACUUM_RETENTION_HOURS) -> OptimizeResult:
    """Compact a typed table's small files, then optionally vacuum files tombstoned more than
    ``vacuum_retention_hours`` ago.

    A running job's replay never needs old files: whether a batch was committed is decided by the app
    transaction in the log, which neither compaction nor vacuum removes (tables are created without
    ``delta.setTransactionRetentionDuration``, so delta-rs keeps every transaction; a table that sets it is
    refused). Stream tables are refused: their offsets point at the original files (use ``truncate``).
    """
    from deltalake import DeltaTable

    with storage_errors(location.uri):
        table = DeltaTable(location.uri, storage_options=location.storage_options)
    config = dict(table.metadata().configuration)
    if "sparza.partitions" in config:
        raise TableError(f"{location.uri} is a sparza stream: its offsets point at the original files, so it is "
                         f"compacted with 'sparza stream compact' and trimmed with 'sparza stream truncate', "
                         f"never vacuumed")
    if config.get("delta.setTransactionRetentionDuration"):
        raise TableError(f"{location.uri} sets delta.setTransactionRetentionDuration: expired app transactions "
                         f"would let a replayed batch commit twice; remove the property first")
    if vacuum_retention_hours is not None and vacuum_retention_hours < min_retention_hours:
        raise TableError(f"vacuum retention {vacuum_retention_hours}h is below {min_retention_hours}h: files a "
                         f"running merge may still read would be deleted")
    with storage_errors(location.uri):
        metrics = table.optimize.compact(target_size=target_size)
    added, removed = int(metrics.get("numFilesAdded", 0)), int(metrics.get("numFilesRemoved", 0))
    table.update_incremental()
    version = table.version() if added or removed else None
    vacuumed = None
    if vacuum_retention_hours is not None:
        with storage_errors(location.uri):
            vacuumed = len(table.vacuum(retention_hours=int(vacuum_retention_hours), dry_run=False,
                                        enforce_retention_duration=False))
    return OptimizeResult(removed, added, version, vacuumed)
