"""The Confluent wire format of a registry-encoded record: magic byte ``0``, the schema id as a 4-byte
big-endian unsigned int, then the Avro binary encoding of the datum (no container header).

What Confluent's serializers, Apicurio's ``ccompat`` mode and every Kafka tool that speaks "Avro with a
schema registry" read and write; the same layout frames keys (subject ``<topic>-key``) and values.
"""

from __future__ import annotations

import struct

from sparza.errors import SerdeError, payload_preview

__all__ = ["HEADER_SIZE", "MAGIC_BYTE", "WireFormatError", "frame", "header", "unframe"]

MAGIC_BYTE = 0
"""The first byte of every record in the Confluent wire format."""
HEADER_SIZE = 5
"""Magic byte plus the 4-byte schema id."""

_HEADER = struct.Struct(">bI")


class WireFormatError(SerdeError):
    """Bytes that are not a record in the Confluent wire format (wrong magic byte, too short): a data error."""


def header(schema_id: int) -> bytes:
    """The 5 bytes that precede the Avro payload of a record written with schema ``schema_id``."""
    if not 0 <= schema_id <= 0xFFFFFFFF:
        raise SerdeError(f"schema id {schema_id} does not fit the 4 bytes of the Confluent wire format")
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` (Avro binary) as a record written with schema ``schema_id``."""
    return header(schema_id) + payload


def unframe(data: bytes) -> tuple[int, memoryview]:
    """``(schema id, Avro payload)`` of a record; :class:`WireFormatError` when ``data`` is not one."""
    view = memoryview(data)
    if len(view) < HEADER_SIZE:
        raise WireFormatError(f"{len(view)} bytes are too short for the Confluent wire format (magic byte and "
                              f"4-byte schema id first): {payload_preview(bytes(view))}")
    if view[0] != MAGIC_BYTE:
        raise WireFormatError(f"magic byte is {view[0]}, not {MAGIC_BYTE}: not a record in the Confluent wire "
                              f"format (written without a schema registry, or by another serializer): "
                              f"{payload_preview(bytes(view))}")
    return int.from_bytes(view[1:HEADER_SIZE], "big"), view[HEADER_SIZE:]
