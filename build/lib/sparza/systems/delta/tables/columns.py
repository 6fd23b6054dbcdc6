"""A typed table's columns as declared in config: text, a Delta schema JSON or an Avro record, parsed into an
Arrow schema in Delta's types (and written back as Delta schema JSON for the planner)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparza.systems.delta.errors import TableError

__all__ = ["arrow_schema_to_text", "avro_to_arrow", "parse_schema"]

_RESERVED_PREFIX = "__sparza"
"""Column names sparza keeps for itself (the writer's merge marks deletions with one)."""

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
