"""How a producer picks a partition, and how keys and values become bytes.

The partition of a message without an explicit partition is ``crc32(key_bytes) % partition_count``
(CRC-32/IEEE as ``zlib.crc32``, unsigned): stable across processes, Python versions and machines,
unlike Python's salted ``hash()``, and computed in C. ``key_bytes`` are the bytes of the envelope's
``partition_key`` (else its ``key``): bytes as they are, ``str`` as UTF-8, ``int`` as its decimal
ASCII digits, anything else through the stream's key serde.
"""

from __future__ import annotations

import zlib
from typing import Any

from sparza.serde import Serde

__all__ = ["partition_for", "partition_key_bytes", "serialize"]


def serialize(obj: Any, serde: Serde) -> bytes | None:
    """``obj`` as stored: None stays None, bytes as is, anything else through ``serde``."""
    if obj is None:
        return None
    if isinstance(obj, bytes):
        return obj
    if isinstance(obj, bytearray | memoryview):
        return bytes(obj)
    return serde.to_bytes(obj)


def partition_key_bytes(key: Any, serde: Serde) -> bytes:
    """The bytes hashed for ``key`` (see the module docstring)."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, bytearray | memoryview):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode("ascii")
    return serde.to_bytes(key)


def partition_for(key: bytes, partition_count: int) -> int:
    """The partition of a message whose partition key serializes to ``key``."""
    return zlib.crc32(key) % partition_count
