"""Reading committed blobs back: gzip (multi-member) and Avro container files decoded to Python values.

Used by ``sparza blobs cat`` and by anyone checking what the producer wrote; it relies only on
Python's ``gzip`` and ``fastavro``, exactly what an Azure user without sparza would use.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import io
import json
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

__all__ = ["decode_blob", "to_json_line"]

_GZIP_MAGIC = b"\x1f\x8b"
_AVRO_MAGIC = b"Obj\x01"


def decode_blob(name: str, data: bytes) -> Iterator[Any]:
    """The records of a blob: Avro records as dicts, JSON lines as values, anything else as one bytes value."""
    if data[:2] == _GZIP_MAGIC:
        data = gzip.decompress(data)
    if data[:4] == _AVRO_MAGIC:
        import fastavro

        yield from fastavro.reader(io.BytesIO(data))
    elif name.removesuffix(".gz").endswith((".jsonl", ".json")):
        for line in data.splitlines():
            if line.strip():
                yield json.loads(line)
    else:
        yield data


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(type(value).__name__)


def to_json_line(record: Any) -> str:
    """One record as compact JSON (bytes as UTF-8 text or ``base64:...``, times in ISO 8601)."""
    return json.dumps(record, default=_default, ensure_ascii=False, separators=(",", ":"))
