"""An independent Confluent-wire-format Avro encoder and decoder for the tests, and a plain HTTP view of the
registry: written from the Avro specification (zig-zag varints, length-prefixed strings, little-endian
doubles, fields in schema order) and the Confluent framing (magic byte 0, big-endian 4-byte id), sharing
no code with sparza or fastavro.

Supports the record schemas the tests use: fields of type long, int, string, double, boolean.
"""

from __future__ import annotations

import http.client as http_client
import json
import struct
import time
import urllib.error
import urllib.request
from typing import Any

_CT = "application/vnd.schemaregistry.v1+json"


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """The Avro binary encoding of ``record`` (a dict) under record ``schema``."""
    out = bytearray()
    for f in schema["fields"]:
        kind, value = f["type"], record.get(f["name"], f.get("default"))
        if kind in ("long", "int"):
            out += _zigzag(int(value))
        elif kind == "string":
            raw = value.encode("utf-8")
            out += _zigzag(len(raw)) + raw
        elif kind == "double":
            out += struct.pack("<d", value)
        elif kind == "boolean":
            out.append(1 if value else 0)
        else:
            raise ValueError(f"oracle does not encode {kind}")
    return bytes(out)


def decode(schema: dict[str, Any], payload: bytes) -> dict[str, Any]:
    """The record ``payload`` holds under record ``schema`` (the schema it was written with)."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = z = 0
        while True:
            byte = payload[pos]
            pos += 1
            z |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (z >> 1) ^ -(z & 1)

    record: dict[str, Any] = {}
    for f in schema["fields"]:
        kind = f["type"]
        if kind in ("long", "int"):
            record[f["name"]] = varint()
        elif kind == "string":
            n = varint()
            record[f["name"]] = payload[pos:pos + n].decode("utf-8")
            pos += n
        elif kind == "double":
            record[f["name"]] = struct.unpack("<d", payload[pos:pos + 8])[0]
            pos += 8
        elif kind == "boolean":
            record[f["name"]] = payload[pos] == 1
            pos += 1
        else:
            raise ValueError(f"oracle does not decode {kind}")
    assert pos == len(payload), f"{len(payload) - pos} bytes left after the record"
    return record


def frame(schema_id: int, payload: bytes) -> bytes:
    """Magic byte 0, the id as 4 big-endian bytes, the payload."""
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """``(schema id, payload)`` of a framed record (asserts the magic byte)."""
    assert data[0] == 0, f"magic byte {data[0]}"
    return int.from_bytes(data[1:5], "big"), data[5:]


def http(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    """One registry request: ``(status, JSON)``. A GET whose connection the registry closed without an answer is
    asked again (twice at most): seen once in a full suite on 2 cores, and a read changes nothing to repeat."""
    data = None if body is None else json.dumps(body).encode()
    for attempt in range(3):
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": _CT})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except (http_client.RemoteDisconnected, ConnectionResetError):
            if method != "GET" or attempt == 2:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def register(base: str, subject: str, schema: dict[str, Any]) -> int:
    """Register ``schema`` under ``subject`` over plain HTTP; its id."""
    status, doc = http(f"{base}/subjects/{subject}/versions", "POST", {"schema": json.dumps(schema)})
    assert status == 200, doc
    return int(doc["id"])


def schema_by_id(base: str, schema_id: int) -> dict[str, Any]:
    """The schema the registry holds under ``schema_id``."""
    status, doc = http(f"{base}/schemas/ids/{schema_id}")
    assert status == 200, doc
    return dict(json.loads(doc["schema"]))


def versions(base: str, subject: str) -> list[int]:
    """The versions of ``subject`` (empty when it does not exist)."""
    status, doc = http(f"{base}/subjects/{subject}/versions")
    return list(doc) if status == 200 else []


def version(base: str, subject: str, number: int) -> tuple[int, dict[str, Any]]:
    """``(schema id, schema)`` of version ``number`` of ``subject``."""
    status, doc = http(f"{base}/subjects/{subject}/versions/{number}")
    assert status == 200, doc
    return int(doc["id"]), dict(json.loads(doc["schema"]))
