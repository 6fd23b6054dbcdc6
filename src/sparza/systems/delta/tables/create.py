"""Opening or creating a typed table and bringing its schema up to the declared one (new nullable columns
are added; anything else that differs is refused, naming what differs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparza.systems.delta.errors import TableError
from sparza.systems.delta.settings import StreamLocation
from sparza.systems.delta.storage import ensure_container, storage_errors
from sparza.systems.delta.tables.spec import KEY_PROPERTY, MODE_PROPERTY, TableSpec

__all__ = ["ensure_table"]


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
        ensure_container(config, system, location.uri)
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
