"""What a store's bytes are: the serde (and schema) its keys and values were written with, kept with the store.

A store's directory (the live RocksDB dir, every checkpoint of it, and so every snapshot in the blob store,
where it is one more small file) holds ``STORE-FORMAT.json``::

    {"format-version": 1, "store": "counts",
     "key": {"serde": "string"},
     "msg": {"serde": "avro", "schema": {"type": "record", "name": "Count", "fields": [...]}}}

A new version of a job, on this host or on another one restoring from the blob store, reads it to know how
the values it finds were written, before it reads any: :mod:`sparza.state.kv.migration` compares it with the
config (``stores.<st>.key.serde`` / ``msg.serde``, ``key.schema`` / ``msg.schema``) and reads, converts or
refuses. While a store is being converted the file also names the format it is converted to
(``migrating-to``): a store left so by a crash holds values of both formats and is refused until it is rebuilt
from its last snapshot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.config import ConfigKey, OptionalKey, define_key
from sparza.errors import ConfigError
from sparza.serde import AvroSerde, JsonSerde, Serde, SerdeError, load_avro_schema, parse_avro_schema, serde_from_name

__all__ = [
    "FORMAT_FILE",
    "FORMAT_VERSION",
    "RecordedFormat",
    "StoreFormat",
    "StoreFormatError",
    "ValueFormat",
    "configured_format",
    "declared_migration",
    "parse_format",
    "read_format",
    "write_format",
]

_PKG = "sparza.state.kv"
FORMAT_FILE = "STORE-FORMAT.json"
"""The file in a store's directory (and its checkpoints and snapshots) that records the store's format."""
FORMAT_VERSION = 1

KEY_SERDE = define_key("stores.<store>.key.serde", "bytes", "serde of the store's keys: bytes, string, json, avro, "
                       "integer, long, double or a serializers.registry name", _PKG)
MSG_SERDE = define_key("stores.<store>.msg.serde", "bytes", "serde of the store's values: bytes, string, json, avro, "
                       "integer, long, double or a serializers.registry name", _PKG)
KEY_SCHEMA = define_key("stores.<store>.key.schema", None, "Avro schema (JSON or a file path) of the keys when "
                        "key.serde is avro (or the schema json keys must fit); a changed one must be able to read the "
                        "old keys (docs/state.md)", _PKG)
MSG_SCHEMA = define_key("stores.<store>.msg.schema", None, "Avro schema (JSON or a file path) of the values when "
                        "msg.serde is avro (or the schema json values must fit); a changed one must be able to read "
                        "the old values: fields added with a default, removed, renamed with an alias, types widened "
                        "(docs/state.md)", _PKG)


_MIGRATE_FROM = ("the serde the store's {what} were written with when it differs from stores.<store>.{which}.serde "
                 "(say json when moving from json to avro): every one of them is read with it and rewritten with the "
                 "new serde when the store opens, once. Without it a changed serde is refused at start")
_MIGRATE_FROM_SCHEMA = ("with {which}.migrate.from: the Avro schema (JSON or a file path) the {what} were written "
                        "with, for a store written before sparza recorded store formats (STORE-FORMAT.json)")
KEY_MIGRATE_FROM = define_key("stores.<store>.key.migrate.from", None,
                              _MIGRATE_FROM.format(what="keys", which="key"), _PKG)
KEY_MIGRATE_FROM_SCHEMA = define_key("stores.<store>.key.migrate.from.schema", None,
                                     _MIGRATE_FROM_SCHEMA.format(what="keys", which="key"), _PKG)
MSG_MIGRATE_FROM = define_key("stores.<store>.msg.migrate.from", None,
                              _MIGRATE_FROM.format(what="values", which="msg"), _PKG)
MSG_MIGRATE_FROM_SCHEMA = define_key("stores.<store>.msg.migrate.from.schema", None,
                                     _MIGRATE_FROM_SCHEMA.format(what="values", which="msg"), _PKG)


class StoreFormatError(ConfigError):
    """A store's recorded format and its config disagree in a way sparza will not resolve by itself (a serde
    changed without a declared migration, an incompatible schema change), or a value could not be converted.
    ``store`` names the store, ``field`` the field concerned when there is one. A config error: never retried."""

    def __init__(self, store: str, key: str, message: str, *, field: str | None = None) -> None:
        self.store = store
        self.field = field
        super().__init__(key, None, "", message=f"store '{store}': {message}")


def _canonical_schema(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ValueFormat:
    """How one side of a store (its keys or its values) is encoded: a serde name (``bytes``, ``string``,
    ``json``, ``avro``, ``integer``, ``long``, ``double``) and, for ``avro`` and for ``json`` with a declared
    schema, the Avro schema as a JSON value."""

    serde: str
    schema: Any = None

    def describe(self) -> str:
        """The format as an error shows it: ``avro (record Count)``, ``json``, ``json with a schema``."""
        if self.schema is None:
            return self.serde
        name = self.schema.get("name") if isinstance(self.schema, dict) else None
        shown = f"record {name}" if name else "a schema"
        return f"avro ({shown})" if self.serde == "avro" else f"{self.serde} with {shown}"

    def same_as(self, other: ValueFormat) -> bool:
        """True when both are the same serde with the same schema (as JSON, key order aside)."""
        return self.serde == other.serde and _canonical_schema(self.schema) == _canonical_schema(other.schema)

    def serde_object(self, *, writer: ValueFormat | None = None) -> Serde:
        """The serde that writes this format; ``writer`` (an Avro format) makes it read what ``writer`` wrote,
        resolved into this schema."""
        if self.serde == "avro":
            return AvroSerde(self.schema, writer.schema if writer is not None else None)
        if self.serde == "json" and self.schema is not None:
            return JsonSerde(self.schema)
        return serde_from_name(self.serde)

    def to_json(self) -> dict[str, Any]:
        """The JSON form kept in ``STORE-FORMAT.json``."""
        return {"serde": self.serde} if self.schema is None else {"serde": self.serde, "schema": self.schema}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ValueFormat:
        """Parse :meth:`to_json`'s output."""
        return cls(str(body["serde"]), body.get("schema"))


@dataclass(frozen=True, slots=True)
class StoreFormat:
    """The formats of a store's keys and values."""

    key: ValueFormat
    msg: ValueFormat

    def side(self, which: str) -> ValueFormat:
        """``key`` or ``msg``."""
        return self.key if which == "key" else self.msg

    def same_as(self, other: StoreFormat) -> bool:
        """True when keys and values are in the same formats."""
        return self.key.same_as(other.key) and self.msg.same_as(other.msg)

    def to_json(self) -> dict[str, Any]:
        """The JSON form kept in ``STORE-FORMAT.json``."""
        return {"key": self.key.to_json(), "msg": self.msg.to_json()}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> StoreFormat:
        """Parse :meth:`to_json`'s output."""
        return cls(ValueFormat.from_json(body["key"]), ValueFormat.from_json(body["msg"]))


@dataclass(frozen=True, slots=True)
class RecordedFormat:
    """What ``STORE-FORMAT.json`` holds: the format of the store's values and, while they are being converted,
    the format they are converted to."""

    format: StoreFormat
    migrating_to: StoreFormat | None = None


def read_format(directory: str | Path, store: str) -> RecordedFormat | None:
    """The format recorded in ``directory`` (None when it has none: an empty store, or one written before sparza
    recorded formats). A file that cannot be parsed raises :class:`StoreFormatError`."""
    path = Path(directory) / FORMAT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    return parse_format(text, store, where=str(path))


def parse_format(text: str | bytes, store: str, *, where: str = FORMAT_FILE) -> RecordedFormat:
    """Parse the text of a ``STORE-FORMAT.json`` (read from a snapshot with
    :meth:`sparza.state.backup.StateBackup.read_file`, say); ``where`` names it in errors."""
    path = where
    try:
        body = json.loads(text)
        version = int(body.get("format-version", FORMAT_VERSION))
        if version > FORMAT_VERSION:
            raise StoreFormatError(store, f"stores.{store}.msg.serde",
                                   f"{path} has format version {version}, newer than this sparza understands "
                                   f"({FORMAT_VERSION}): upgrade sparza")
        target = body.get("migrating-to")
        return RecordedFormat(StoreFormat.from_json(body),
                              StoreFormat.from_json(target) if target is not None else None)
    except StoreFormatError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreFormatError(store, f"stores.{store}.msg.serde",
                               f"{path} is not a store format record ({exc}): it was damaged; restore the store "
                               "from its snapshot") from exc


def write_format(directory: str | Path, store: str, fmt: StoreFormat, *, migrating_to: StoreFormat | None = None,
                 fsync: bool = True) -> None:
    """Record ``fmt`` in ``directory`` (atomically: a temp file renamed into place)."""
    target = Path(directory)
    body: dict[str, Any] = {"format-version": FORMAT_VERSION, "store": store, **fmt.to_json()}
    if migrating_to is not None:
        body["migrating-to"] = migrating_to.to_json()
    tmp = target / f".sparza-tmp-{FORMAT_FILE}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(body, sort_keys=True, separators=(",", ":")))
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, target / FORMAT_FILE)


def _side(config: Mapping[str, str], store: str, serde_key: ConfigKey[str], schema_key: OptionalKey[str], *,
          schema_optional: bool = False) -> ValueFormat:
    """The format keys ``serde_key`` and ``schema_key`` of store ``store`` name; ``schema_optional``: an avro serde
    may come without a schema (a declared migration of a store whose record has it)."""
    key = serde_key.name(store=store)
    name = serde_key.raw(config, store=store) or None
    schema_text = schema_key.get(config, store=store) or None
    if schema_optional and schema_text is None and (name or "").strip().lower() == "avro":
        return ValueFormat("avro")
    serde = serde_from_name(name, key=key, schema=schema_text, config=config)
    schema: Any = None
    if isinstance(serde, AvroSerde):
        schema = serde.schema
    elif serde.name == "json" and schema_text is not None:
        try:
            schema = load_avro_schema(schema_text)
        except (ValueError, OSError) as exc:
            raise ConfigError(schema_key.name(store=store), schema_text,
                              f"an Avro schema as JSON text or a file ({exc})") from exc
    if schema is not None:
        try:
            parse_avro_schema(schema)
        except SerdeError as exc:
            raise ConfigError(schema_key.name(store=store), schema_text, f"a valid Avro schema ({exc})") from exc
    return ValueFormat(serde.name, schema)


def configured_format(store: str, config: Mapping[str, str]) -> StoreFormat:
    """The format ``stores.<store>.*`` asks for (``key.serde``, ``key.schema``, ``msg.serde``, ``msg.schema``)."""
    return StoreFormat(_side(config, store, KEY_SERDE, KEY_SCHEMA), _side(config, store, MSG_SERDE, MSG_SCHEMA))


def declared_migration(store: str, config: Mapping[str, str]) -> dict[str, ValueFormat]:
    """The formats ``stores.<store>.key.migrate.from`` / ``msg.migrate.from`` (with their ``.schema``) declare the
    store's keys / values were written with: ``{"key": ..., "msg": ...}``, only the sides declared."""
    out: dict[str, ValueFormat] = {}
    for which, serde_key, schema_key in (("key", KEY_MIGRATE_FROM, KEY_MIGRATE_FROM_SCHEMA),
                                         ("msg", MSG_MIGRATE_FROM, MSG_MIGRATE_FROM_SCHEMA)):
        if serde_key.get(config, store=store):
            out[which] = _side(config, store, serde_key, schema_key, schema_optional=True)
    return out
