"""Kafka's default partitioner: ``murmur2(key) & 0x7fffffff % partitions``.

The same function as the Java client's ``Utils.murmur2`` / ``toPositive`` (and librdkafka's
``murmur2_random`` partitioner for keyed messages), so messages sparza writes land in the same
partition as those of any other Kafka producer with the same key, and co-partitioned joins work
across producers.
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 of ``data`` as the Java client computes it, as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - (length & 3)
    for i in range(0, end, 4):
        k = (data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24))
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partition_count: int) -> int:
    """The partition Kafka's default partitioner gives a message with key bytes ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partition_count
