"""Serdes: how keys and messages become bytes and back.

``bytes`` (no-op), ``string`` (UTF-8), ``json``, ``avro`` (fastavro, schemaless binary with a
known schema) and Samza's fixed-width ``integer``, ``long`` and ``double`` (big-endian, as Samza's
IntegerSerde, LongSerde and DoubleSerde write them, so state and streams stay readable by both).
An Avro record that carries its own schema is an :class:`AvroRecord`. Every failure
raises :class:`~sparza.errors.SerdeError` saying what was wrong with the input.
"""

from __future__ import annotations

import copy
import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec

from sparza.errors import ConfigError, SerdeError, payload_preview

_JSON_ENCODE = msgspec.json.Encoder().encode
_JSON_DECODE = msgspec.json.Decoder().decode
_JSON_FAST_ERRORS = (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError)

__all__ = [
    "AvroRecord",
    "AvroSerde",
    "BytesSerde",
    "JsonSerde",
    "NumberSerde",
    "Serde",
    "SerdeError",
    "StringSerde",
    "conform_to_schema",
    "is_utf8",
    "load_avro_schema",
    "parse_avro_schema",
    "partition_key_bytes",
    "plain_json_encoder",
    "serde_from_name",
    "serialize",
]


@runtime_checkable
class Serde(Protocol):
    """Turns objects into bytes and back. Implementations must be picklable (they travel to executors)."""

    name: str

    def to_bytes(self, obj: Any) -> bytes:
        """Serialize ``obj``; raises :class:`SerdeError` if it cannot."""
        ...

    def from_bytes(self, data: bytes) -> Any:
        """Deserialize ``data``; raises :class:`SerdeError` if it is malformed."""
        ...


class BytesSerde:
    """Passes bytes through unchanged (``bytearray``/``memoryview`` are copied to ``bytes``)."""

    name = "bytes"

    def to_bytes(self, obj: Any) -> bytes:
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, bytearray | memoryview):
            return bytes(obj)
        raise SerdeError(f"bytes serde needs bytes, got {type(obj).__name__}; configure a string/json/avro serde")

    def from_bytes(self, data: bytes) -> Any:
        return bytes(data)


class StringSerde:
    """Text in an encoding (UTF-8 by default)."""

    name = "string"

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def to_bytes(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise SerdeError(f"string serde needs str, got {type(obj).__name__}")
        return obj.encode(self.encoding)

    def from_bytes(self, data: bytes) -> Any:
        try:
            return bytes(data).decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise SerdeError(f"not valid {self.encoding} text at byte {exc.start}: {payload_preview(data)}") from exc


def is_utf8(serde: Serde) -> bool:
    """True for a string serde in UTF-8: ``str.encode()`` is then its ``to_bytes`` of a str (a producer encodes a
    str key in place, with no serde call per message)."""
    return type(serde) is StringSerde and serde.encoding.replace("-", "").lower() == "utf8"


def plain_json_encoder(serde: Serde) -> Callable[[Any], bytes] | None:
    """msgspec's encoder when ``serde`` is a :class:`JsonSerde` without a schema, else None. Its bytes are what
    ``serde.to_bytes`` returns whenever they hold no ``null`` (a null may be a NaN: then call ``to_bytes``, as for
    anything it raises on). Producers call it inline on dict messages: one Python call less per message."""
    return _JSON_ENCODE if type(serde) is JsonSerde and serde.schema is None else None


class JsonSerde:
    """JSON text in UTF-8, compact separators, keys in insertion order.

    Encoded and decoded with msgspec (about 20x faster than the standard library on small
    messages, which matters per message). Anything msgspec refuses, and any object holding NaN or
    an infinity (msgspec would write ``null``), is encoded by ``json`` as before (``NaN``,
    ``Infinity``); decoding falls back to ``json`` the same way, so both read what they wrote.
    Differences from ``json.dumps``: floats with large or small exponents are spelled shortest
    (``1e16``, ``0.00001`` rather than ``1e+16``, ``1e-05``: the same numbers), and types ``json``
    refuses are accepted the msgspec way (bytes as base64 text, sets as arrays, dataclasses as
    objects, datetimes, UUIDs and decimals as strings).

    With a declared ``schema`` (an Avro schema: what a store's ``stores.<st>.msg.schema`` says of its JSON
    values) every value written is first made to fit it, as an Avro writer would: a missing field gets its
    default, numbers of ``float``/``double`` fields become floats, and a value that does not fit (a missing
    field without a default, a field the schema does not have, a wrong type) raises :class:`SerdeError`
    naming the field. Reads are not checked: the values were checked when written.
    """

    name = "json"

    def __init__(self, schema: Any = None) -> None:
        self.schema = schema
        self._parsed: Any = None

    def to_bytes(self, obj: Any) -> bytes:
        if self.schema is not None:
            if self._parsed is None:
                self._parsed = _parse_schema(self.schema)
            obj = conform_to_schema(obj, self._parsed)
        try:
            out = _JSON_ENCODE(obj)
            # find, not ``in``: bytes.__contains__ first tries its argument as an int, and that failed attempt
            # cost twice the encoding of a small message (this runs once per message sent).
            if out.find(b"null") < 0 or obj is None:
                return out
            # The null may be a NaN or an infinity msgspec wrote as null: let json decide.
        except _JSON_FAST_ERRORS:
            pass
        try:
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SerdeError(f"cannot encode {type(obj).__name__} as JSON: {exc}") from exc

    def from_bytes(self, data: bytes) -> Any:
        try:
            return _JSON_DECODE(data)
        except _JSON_FAST_ERRORS:
            pass
        try:
            return json.loads(bytes(data))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SerdeError(f"not valid JSON ({exc}): {payload_preview(data)}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.schema = state.get("schema")
        self._parsed = None


@dataclass(frozen=True, slots=True)
class AvroRecord:
    """An Avro datum together with its schema (a parsed JSON schema dict or schema JSON text)."""

    schema: Any
    datum: Any

    def parsed_schema(self) -> Any:
        """The schema parsed by fastavro (cached per schema text)."""
        return _parse_schema(self.schema)


_SCHEMA_CACHE: dict[str, Any] = {}


def _schema_key(schema: Any) -> str:
    return schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True)


def _parse_schema(schema: Any) -> Any:
    import fastavro

    key = _schema_key(schema)
    parsed = _SCHEMA_CACHE.get(key)
    if parsed is None:
        raw = json.loads(schema) if isinstance(schema, str) else schema
        try:
            parsed = fastavro.parse_schema(raw)
        except Exception as exc:
            raise SerdeError(f"invalid Avro schema: {exc}") from exc
        _SCHEMA_CACHE[key] = parsed
    return parsed


def parse_avro_schema(schema: Any) -> Any:
    """``schema`` (a JSON value or JSON text) parsed by fastavro, cached; :class:`SerdeError` when it is not a valid
    Avro schema."""
    return _parse_schema(schema)


def load_avro_schema(text_or_path: str) -> Any:
    """An Avro schema from JSON text or from the path of a file holding it."""
    stripped = text_or_path.strip()
    if stripped.startswith(("{", "[", '"')):
        return json.loads(stripped)
    path = Path(stripped)
    if not path.is_file():
        raise SerdeError(f"Avro schema is neither JSON text nor an existing file: {stripped[:80]!r}")
    return json.loads(path.read_text(encoding="utf-8"))


class AvroSerde:
    """Avro binary (no container header) with a fixed schema.

    ``to_bytes`` takes a dict matching the schema or an :class:`AvroRecord` with the same schema;
    ``from_bytes`` returns a dict. ``writer_schema``, when given, is the schema the bytes it reads were
    written with: they are resolved into ``schema`` by Avro's rules (a field added with a default gets it,
    a removed field is skipped, an ``int`` is read as a ``long``...), which is how a store's values written
    under an older schema are read.
    """

    name = "avro"

    def __init__(self, schema: Any, writer_schema: Any = None) -> None:
        if schema is None:
            raise SerdeError("avro serde needs a schema (set it in config or pass AvroRecord values)")
        self.schema = schema
        self.writer_schema = writer_schema
        self._parsed: Any = None  # parsed once per serde object: parsing (or keying the cache) per message costs more
        #                           than the encoding itself
        self._parsed_writer: Any = None

    def _schema(self) -> Any:
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = _parse_schema(self.schema)
        return parsed

    def _writer(self) -> Any:
        parsed = self._parsed_writer
        if parsed is None:
            parsed = self._parsed_writer = _parse_schema(self.writer_schema)
        return parsed

    def to_bytes(self, obj: Any) -> bytes:
        import fastavro

        parsed = self._schema()
        datum = obj
        if isinstance(obj, AvroRecord):
            if _schema_key(obj.schema) != _schema_key(self.schema):
                raise SerdeError("AvroRecord schema differs from the serde's schema")
            datum = obj.datum
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, parsed, datum)
        except Exception as exc:
            raise SerdeError(f"record does not match the Avro schema: {exc}") from exc
        return buf.getvalue()

    def from_bytes(self, data: bytes) -> Any:
        import fastavro

        try:
            if self.writer_schema is None:
                return fastavro.schemaless_reader(io.BytesIO(data), self._schema(), None)
            return fastavro.schemaless_reader(io.BytesIO(data), self._writer(), self._schema())
        except Exception as exc:
            raise SerdeError(f"bytes are not Avro of the configured schema: {exc}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema, "writer_schema": self.writer_schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.schema = state["schema"]
        self.writer_schema = state.get("writer_schema")
        self._parsed = None
        self._parsed_writer = None


_INT_RANGES = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}


def conform_to_schema(datum: Any, parsed_schema: Any) -> Any:
    """``datum`` made to fit Avro schema ``parsed_schema`` (parsed by fastavro), as a JSON value: missing record
    fields get their defaults, ``float``/``double`` values become floats; a value that cannot fit raises
    :class:`SerdeError` naming the field. What a JSON serde with a declared schema writes."""
    named = parsed_schema.get("__named_schemas", {}) if isinstance(parsed_schema, dict) else {}
    return _conform(datum, parsed_schema, named, "")


def _conform(datum: Any, schema: Any, named: dict[str, Any], path: str) -> Any:
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    if isinstance(schema, list):
        problems = []
        for branch in schema:
            try:
                return _conform(datum, branch, named, path)
            except SerdeError as exc:
                problems.append(str(exc))
        raise SerdeError(f"{_at(path)}fits no branch of the union: " + "; ".join(problems))
    kind = schema if isinstance(schema, str) else schema["type"]
    if isinstance(kind, dict | list):
        return _conform(datum, kind, named, path)
    ok = True
    if kind == "null":
        ok = datum is None
    elif kind == "boolean":
        ok = isinstance(datum, bool)
    elif kind in ("int", "long"):
        low, high = _INT_RANGES[kind]
        ok = isinstance(datum, int) and not isinstance(datum, bool) and low <= datum <= high
    elif kind in ("float", "double"):
        if isinstance(datum, int | float) and not isinstance(datum, bool):
            return float(datum)
        ok = False
    elif kind in ("string", "bytes", "fixed"):
        ok = isinstance(datum, str)  # JSON has no bytes: bytes and fixed fields hold text
    elif kind == "enum":
        ok = isinstance(datum, str) and datum in schema["symbols"]
    elif kind == "array":
        if isinstance(datum, list | tuple):
            return [_conform(item, schema["items"], named, f"{path}[{i}]") for i, item in enumerate(datum)]
        ok = False
    elif kind == "map":
        if isinstance(datum, Mapping) and all(isinstance(k, str) for k in datum):
            return {k: _conform(v, schema["values"], named, f"{path}{{{k}}}") for k, v in datum.items()}
        ok = False
    elif kind in ("record", "error"):
        return _conform_record(datum, schema, named, path)
    else:
        raise SerdeError(f"{_at(path)}unknown Avro type {kind!r} in the schema")
    if not ok:
        raise SerdeError(f"{_at(path)}{payload_preview(datum)} is not a {kind}")
    return datum


def _conform_record(datum: Any, schema: Any, named: dict[str, Any], path: str) -> dict[str, Any]:
    if not isinstance(datum, Mapping):
        raise SerdeError(f"{_at(path)}{payload_preview(datum)} is not a record {schema['name']} (a dict)")
    fields = schema["fields"]
    unknown = set(datum) - {f["name"] for f in fields}
    if unknown:
        raise SerdeError(f"{_at(path)}field(s) {', '.join(sorted(map(str, unknown)))} are not in record "
                         f"{schema['name']} of the schema (add them to the schema, or leave them out)")
    out: dict[str, Any] = {}
    for field in fields:
        name = field["name"]
        sub = f"{path}.{name}" if path else name
        if name in datum:
            out[name] = _conform(datum[name], field["type"], named, sub)
        elif "default" in field:
            out[name] = _conform(copy.deepcopy(field["default"]), field["type"], named, sub)
        else:
            raise SerdeError(f"field '{sub}' is missing and has no default in the schema")
    return out


def _at(path: str) -> str:
    return f"field '{path}': " if path else ""


class NumberSerde:
    """A fixed-width big-endian number: ``integer`` (4 bytes), ``long`` (8) or ``double`` (8), the byte
    layout of Samza's IntegerSerde, LongSerde and DoubleSerde."""

    _FORMATS = {"integer": (">i", int), "long": (">q", int), "double": (">d", float)}

    def __init__(self, name: str) -> None:
        self.name = name
        self._format, self._type = self._FORMATS[name]

    def to_bytes(self, obj: Any) -> bytes:
        if isinstance(obj, bool) or not isinstance(obj, self._type | int):
            raise SerdeError(f"{self.name} serde needs a number, got {type(obj).__name__}")
        try:
            return struct.pack(self._format, obj)
        except struct.error as exc:
            raise SerdeError(f"{self.name} serde cannot hold {payload_preview(obj)}: {exc}") from exc

    def from_bytes(self, data: bytes) -> Any:
        try:
            return struct.unpack(self._format, data)[0]
        except struct.error as exc:
            raise SerdeError(f"{self.name} serde needs {struct.calcsize(self._format)} bytes, got {len(data)}") \
                from exc


_NAMES = ("bytes", "string", "json", "avro", "integer", "long", "double")


def serde_from_name(name: str | None, *, key: str = "serde", schema: Any = None,
                    config: Mapping[str, str] | None = None) -> Serde:
    """The serde called ``name`` (``bytes``, ``string``, ``json``, ``avro``, ``integer``, ``long``,
    ``double``; None means bytes).

    ``avro`` needs ``schema`` (or ``config['serializers.registry.<name>.schema']``); ``key`` is the
    config key reported in errors.
    """
    chosen = (name or "bytes").strip().lower()
    if chosen in ("bytes", "byte", "noop"):
        return BytesSerde()
    if chosen in ("string", "str", "utf8"):
        return StringSerde()
    if chosen == "json":
        return JsonSerde()
    if chosen in ("integer", "int", "long", "double"):
        return NumberSerde("integer" if chosen == "int" else chosen)
    if chosen == "avro":
        if schema is None:
            raise ConfigError(key, name, "an Avro schema to go with the avro serde")
        return AvroSerde(load_avro_schema(schema) if isinstance(schema, str) else schema)
    raise ConfigError(key, name, "one of " + ", ".join(_NAMES))


def serialize(obj: Any, serde: Serde) -> bytes | None:
    """``obj`` as a stream stores it: None stays None, bytes as they are, anything else through ``serde``."""
    if obj is None:
        return None
    if isinstance(obj, bytes):
        return obj
    if isinstance(obj, bytearray | memoryview):
        return bytes(obj)
    return serde.to_bytes(obj)


def partition_key_bytes(key: Any, serde: Serde) -> bytes:
    """The bytes a producer hashes to pick the partition of a message with partition key ``key``: bytes as
    they are, ``str`` as UTF-8 (as Kafka's StringSerializer), ``int`` as its decimal ASCII digits, anything
    else through the stream's key serde. Every system's producer encodes partition keys this way."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, bytearray | memoryview):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode("ascii")
    return serde.to_bytes(key)
