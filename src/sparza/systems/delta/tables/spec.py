"""How one stream is written as a typed table: :class:`TableSpec`, built from its ``delta.table.*`` keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparza.errors import ConfigError
from sparza.serde import AvroSerde
from sparza.systems.delta.errors import TableError
from sparza.systems.delta.settings import (
    TABLE_KEY,
    TABLE_MESSAGE_KEY_COLUMN,
    TABLE_MODE,
    TABLE_PARTITION_BY,
    TABLE_SCHEMA,
    TABLE_TIMESTAMP_COLUMN,
)
from sparza.systems.delta.tables.columns import avro_to_arrow, parse_schema

__all__ = ["KEY_PROPERTY", "MODES", "MODE_PROPERTY", "TableSpec", "table_spec_from_config"]

MODES = ("append", "upsert")
"""The write modes of a typed table."""

MODE_PROPERTY = "sparza.table.mode"
"""Table property recording the mode a typed table was created in."""
KEY_PROPERTY = "sparza.table.key"
"""Table property recording the key columns of an upsert table."""


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
        for role, named in (("timestamp", self.timestamp_column), ("message key", self.message_key_column)):
            if named is not None and named not in names:
                raise TableError(f"{where}: {role} column {named!r} is not in the schema "
                                 f"({', '.join(self.schema.names)})")

    @property
    def table_properties(self) -> dict[str, str]:
        """The properties a new table records (mode and key columns are checked on every later start)."""
        return {MODE_PROPERTY: self.mode, KEY_PROPERTY: ",".join(self.key)}


def table_spec_from_config(settings: Any, stream: str) -> TableSpec | None:
    """The :class:`TableSpec` of ``stream`` from its ``delta.table.*`` keys (None: a plain stream)."""
    config, names = settings.config, {"system": settings.system, "stream": stream}
    schema_key, mode_key = TABLE_SCHEMA.name(**names), TABLE_MODE.name(**names)
    schema_text = TABLE_SCHEMA.get(config, **names)
    mode = TABLE_MODE.get(config, **names)
    if schema_text is None and mode is None:
        return None
    try:
        if schema_text is not None:
            schema = parse_schema(schema_text, schema_key)
        else:
            schema = _schema_from_serde(settings, stream)
        return TableSpec(
            stream=stream, schema=schema, mode=mode or "append",
            key=TABLE_KEY.get(config, **names), partition_by=TABLE_PARTITION_BY.get(config, **names),
            timestamp_column=TABLE_TIMESTAMP_COLUMN.get(config, **names),
            message_key_column=TABLE_MESSAGE_KEY_COLUMN.get(config, **names))
    except TableError as exc:
        raise ConfigError(schema_key if schema_text is not None else mode_key,
                          schema_text if schema_text is not None else mode, f"a valid typed table ({exc})") from exc


def _schema_from_serde(settings: Any, stream: str) -> pa.Schema:
    serde = settings.msg_serde(stream)
    if not isinstance(serde, AvroSerde):
        raise TableError(f"typed table {stream!r} has no schema: set "
                         f"{settings.stream_key(stream, 'delta.table.schema')} or use an avro msg serde with "
                         f"{settings.stream_key(stream, 'samza.msg.schema')}")
    return avro_to_arrow(serde.schema)
