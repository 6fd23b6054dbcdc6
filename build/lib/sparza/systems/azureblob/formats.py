"""Record formats: how messages become the bytes of a blob (Avro container file, JSON lines, raw).

A format instance belongs to one writer, i.e. to the blobs of one stream-partition between two
flushes (they share one schema). ``encode`` turns one message into record bytes (raising before
anything is written when the message does not fit); ``header`` and ``frame`` wrap records into the
file layout. Avro follows the Avro 1.x object container spec: header (magic, ``avro.schema``,
``avro.codec`` = null, sync marker), then data blocks of (count, size, records, sync marker).
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from sparza.serde import AvroRecord, load_avro_schema
from sparza.systems.azureblob.errors import SchemaChangeError, UnsupportedMessageError

__all__ = [
    "AVRO_SYNC_INTERVAL",
    "AvroFormat",
    "JsonLinesFormat",
    "RawFormat",
    "RecordFormat",
    "make_format",
]

AVRO_SYNC_INTERVAL = 64 * 1024
"""Bytes of records per Avro data block (Avro's default sync interval)."""


class RecordFormat(Protocol):
    """One blob's layout. ``encode`` may fix the blob's schema from the first message."""

    content_type: str

    def encode(self, message: Any) -> bytes:
        """The record bytes of ``message``; raises (and changes nothing) when it cannot be written."""
        ...

    def header(self, sync: bytes) -> bytes:
        """Bytes before the first record of a blob (call after the first ``encode``)."""
        ...

    def frame(self, records: Sequence[bytes], size: int, sync: bytes) -> bytes:
        """Records (``size`` bytes in all) laid out as they appear in the blob."""
        ...


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _avro_bytes(data: bytes) -> bytes:
    return _zigzag_varint(len(data)) + data


def _schema_key(schema: Any) -> str:
    raw = json.loads(schema) if isinstance(schema, str) else schema
    return json.dumps(raw, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def _parsed_schema(key: str) -> Any:
    """fastavro's parsed form of a schema (by its canonical text): parsed once per process, not once per
    writer and flush (read-only afterwards, so writers on any thread share it)."""
    import fastavro

    return fastavro.parse_schema(json.loads(key))


def _avro_writer() -> Callable[..., Any]:
    import fastavro

    return fastavro.schemaless_writer


class AvroFormat:
    """An Avro container file. The schema comes from the first :class:`AvroRecord` (or the stream's
    configured schema); later messages may be records of the same schema, dicts (when a schema is
    configured) or pre-encoded bytes (appended as they are: their validity is the sender's duty)."""

    content_type = "avro/binary"

    def __init__(self, stream: str, configured_schema: str | None = None) -> None:
        self.stream = stream
        self._configured = load_avro_schema(configured_schema) if configured_schema else None
        self._schema: Any = None          # the blob's schema as JSON-able data
        self._schema_key: str | None = None
        self._parsed: Any = None
        self._last_schema_obj: Any = None  # identity cache: most senders reuse one schema object
        self._write = _avro_writer()

    @property
    def schema(self) -> Any:
        """The blob's schema, once known."""
        return self._schema

    def _set_schema(self, schema: Any) -> None:
        raw = json.loads(schema) if isinstance(schema, str) else schema
        self._schema_key = _schema_key(raw)
        self._parsed = _parsed_schema(self._schema_key)
        self._schema = raw

    def _check_record_schema(self, schema: Any) -> None:
        if schema is self._last_schema_obj:
            return
        if self._schema is None:
            self._set_schema(schema)
        elif _schema_key(schema) != self._schema_key:
            raise SchemaChangeError(self.stream, self._schema_key or "", _schema_key(schema))
        self._last_schema_obj = schema

    def encode(self, message: Any) -> bytes:
        if isinstance(message, AvroRecord):
            if message.schema is not self._last_schema_obj:
                self._check_record_schema(message.schema)
            datum = message.datum
        elif isinstance(message, bytes | bytearray | memoryview):
            if self._schema is None:
                if self._configured is None:
                    raise UnsupportedMessageError(
                        f"stream {self.stream!r}: pre-encoded Avro bytes need a schema first: send an "
                        f"AvroRecord first after a flush, or configure systems.<container>.streams."
                        f"{self.stream}.avro.schema")
                self._set_schema(self._configured)
            return bytes(message)
        elif isinstance(message, Mapping):
            if self._schema is None:
                if self._configured is None:
                    raise UnsupportedMessageError(
                        f"stream {self.stream!r}: a plain dict needs a configured schema "
                        f"(systems.<container>.streams.{self.stream}.avro.schema) or send AvroRecord(schema, datum)")
                self._set_schema(self._configured)
            datum = message
        else:
            raise UnsupportedMessageError(f"stream {self.stream!r}: avro writer takes AvroRecord, dict or bytes, "
                                          f"not {type(message).__name__}")
        buf = io.BytesIO()
        try:
            self._write(buf, self._parsed, datum)
        except Exception as exc:
            raise UnsupportedMessageError(f"stream {self.stream!r}: record does not match the blob's Avro schema: "
                                          f"{exc}") from exc
        return buf.getvalue()

    def header(self, sync: bytes) -> bytes:
        meta = {"avro.schema": json.dumps(self._schema).encode("utf-8"), "avro.codec": b"null"}
        out = bytearray(b"Obj\x01")
        out += _zigzag_varint(len(meta))
        for key, value in meta.items():
            out += _avro_bytes(key.encode("utf-8")) + _avro_bytes(value)
        out += _zigzag_varint(0)
        out += sync
        return bytes(out)

    def frame(self, records: Sequence[bytes], size: int, sync: bytes) -> bytes:
        return b"".join((_zigzag_varint(len(records)), _zigzag_varint(size), *records, sync))


def _bytes_or_text(message: Any) -> bytes | None:
    """Bytes-likes as bytes and str as UTF-8 (both taken as already encoded); None for anything else."""
    if isinstance(message, bytes | bytearray | memoryview):
        return bytes(message)
    if isinstance(message, str):
        return message.encode("utf-8")
    return None


class _Unframed:
    """Records one after the other, with no header and no block framing (JSON lines, raw)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream

    def header(self, sync: bytes) -> bytes:
        return b""

    def frame(self, records: Sequence[bytes], size: int, sync: bytes) -> bytes:
        return b"".join(records)


class JsonLinesFormat(_Unframed):
    """One JSON document per line. Bytes and str are taken as already-encoded JSON text."""

    content_type = "application/x-ndjson"

    def encode(self, message: Any) -> bytes:
        data = _bytes_or_text(message)
        if data is None:
            payload = message.datum if isinstance(message, AvroRecord) else message
            try:
                data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            except (TypeError, ValueError) as exc:
                raise UnsupportedMessageError(f"stream {self.stream!r}: cannot write "
                                              f"{type(payload).__name__} as JSON: {exc}") from exc
        return data if data.endswith(b"\n") else data + b"\n"


class RawFormat(_Unframed):
    """The message bytes exactly as sent, concatenated (str is UTF-8 encoded)."""

    content_type = "application/octet-stream"

    def encode(self, message: Any) -> bytes:
        data = _bytes_or_text(message)
        if data is None:
            raise UnsupportedMessageError(f"stream {self.stream!r}: raw writer takes bytes or str, "
                                          f"not {type(message).__name__}")
        return data


def make_format(kind: str, stream: str, configured_schema: str | None) -> RecordFormat:
    """A fresh format for one writer (the blobs of one stream-partition between two flushes)."""
    if kind == "avro":
        return AvroFormat(stream, configured_schema)
    if kind == "jsonl":
        return JsonLinesFormat(stream)
    return RawFormat(stream)
