"""How a delta producer picks a partition.

The partition of a message without an explicit partition is ``crc32(key_bytes) % partition_count``
(CRC-32/IEEE as ``zlib.crc32``, unsigned): stable across processes, Python versions and machines,
unlike Python's salted ``hash()``, and computed in C. ``key_bytes`` are the bytes of the envelope's
``partition_key`` (else its ``key``) as :func:`sparza.serde.partition_key_bytes` encodes them.
"""

from __future__ import annotations

import zlib

__all__ = ["partition_for"]


def partition_for(key: bytes, partition_count: int) -> int:
    """The partition of a message whose partition key serializes to ``key``."""
    return zlib.crc32(key) % partition_count
