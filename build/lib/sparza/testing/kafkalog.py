"""Which offsets of a Kafka partition belong to aborted transactions, read from the log itself.

A Kafka broker answers a ``read_committed`` fetch with the list of aborted transactions in the range, and
the client (librdkafka too) drops their records. The Tansu test broker writes the abort markers into the
log but sends that list empty, so confluent-kafka's ``read_committed`` readers see aborted records
(pinned in ``tests/systems/kafka/test_conformance.py``): a process killed inside a Kafka flush, between its
produce and its commit, leaves records that Kafka would hide. The oracle drops them with this module: it
fetches the partition's raw record batches (Fetch v4, ``read_uncommitted``), and applies Kafka's rule
itself: the records of a transactional producer up to its next control marker are committed by a COMMIT
marker and aborted by an ABORT marker. Records of a transaction with no marker yet (still open) are
reported apart: a ``read_committed`` reader of Kafka would not see them (nor anything after them) yet.

Plain sockets and ``struct``, nothing of sparza and nothing of librdkafka: the oracle stays independent.
"""

from __future__ import annotations

import itertools
import socket
import struct
from dataclasses import dataclass, field

__all__ = ["TransactionOffsets", "transaction_offsets"]

_FETCH = 1
_FETCH_VERSION = 4            # the first version with isolation_level and the record-batch format
_TRANSACTIONAL = 0x10         # record batch attribute bits
_CONTROL = 0x20
_ABORT, _COMMIT = 0, 1        # control record key: version int16, type int16
_correlation = itertools.count(1)


@dataclass
class TransactionOffsets:
    """One partition's offsets by the fate of their transaction."""

    aborted: set[int] = field(default_factory=set)
    open: set[int] = field(default_factory=set)   # transactional records with no marker (yet)


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection in the middle of a response")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _fetch(sock: socket.socket, topic: str, partition: int, offset: int) -> tuple[int, bytes]:
    """One Fetch v4 (read_uncommitted) of ``topic[partition]`` from ``offset``: (high watermark, records)."""
    correlation = next(_correlation)
    body = (struct.pack(">hhi", _FETCH, _FETCH_VERSION, correlation) + _string("sparza-oracle")
            + struct.pack(">iiiib", -1, 500, 1, 16 << 20, 0)        # replica, max wait, min/max bytes, isolation
            + struct.pack(">i", 1) + _string(topic)
            + struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, 16 << 20))
    sock.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    data = _recv_exact(sock, size)
    got, _throttle, topics = struct.unpack_from(">iii", data, 0)
    if got != correlation or topics != 1:
        raise ConnectionError(f"unexpected fetch response (correlation {got}, {topics} topics)")
    pos = 12
    name_len = struct.unpack_from(">h", data, pos)[0]
    pos += 2 + name_len
    (_partitions, _partition, error, high_watermark, _lso) = struct.unpack_from(">iihqq", data, pos)
    pos += 4 + 4 + 2 + 8 + 8
    if error:
        raise ConnectionError(f"fetch of {topic}[{partition}] at {offset}: Kafka error code {error}")
    aborted_count = struct.unpack_from(">i", data, pos)[0]
    pos += 4 + max(aborted_count, 0) * 16
    records_len = struct.unpack_from(">i", data, pos)[0]
    pos += 4
    return high_watermark, data[pos:pos + max(records_len, 0)]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, next position)."""
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _control_type(batch: bytes) -> int:
    """The type (ABORT 0, COMMIT 1) of a control batch's one record (control batches are never compressed)."""
    pos = 61                                  # the batch header: offsets 0..60, then the records
    _length, pos = _varint(batch, pos)
    pos += 1                                  # record attributes
    _ts, pos = _varint(batch, pos)
    _delta, pos = _varint(batch, pos)
    key_len, pos = _varint(batch, pos)
    if key_len < 4:
        raise ValueError(f"a control record with a {key_len}-byte key")
    return int(struct.unpack_from(">h", batch, pos + 2)[0])


def transaction_offsets(host: str, port: int, topic: str, partition: int, end: int,
                        *, timeout_s: float = 30.0) -> TransactionOffsets:
    """The offsets below ``end`` of ``topic[partition]`` (on the broker at ``host:port``, its leader) that
    belong to aborted or still open transactions (see the module docstring)."""
    out = TransactionOffsets()
    pending: dict[int, list[range]] = {}     # producer id -> its transactional records since its last marker
    offset = 0
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        while offset < end:
            _hw, records = _fetch(sock, topic, partition, offset)
            pos, progressed = 0, False
            while pos + 12 <= len(records):
                base, length = struct.unpack_from(">qi", records, pos)
                if pos + 12 + length > len(records):
                    break                     # a partial batch at the end of the response: fetched again
                batch = records[pos:pos + 12 + length]
                pos += 12 + length
                attributes, last_delta = struct.unpack_from(">hi", batch, 21)
                producer_id = struct.unpack_from(">q", batch, 43)[0]
                last = base + last_delta
                if last < offset:
                    continue                  # a batch the fetch returned whole although it starts before offset
                offset, progressed = last + 1, True
                if attributes & _CONTROL:
                    done = pending.pop(producer_id, [])
                    if _control_type(batch) == _ABORT:
                        for span in done:
                            out.aborted.update(span)
                elif attributes & _TRANSACTIONAL:
                    pending.setdefault(producer_id, []).append(range(base, last + 1))
            if not progressed:
                raise ConnectionError(f"fetch of {topic}[{partition}] at {offset} (end {end}) returned no batch")
    for spans in pending.values():
        for span in spans:
            out.open.update(span)
    return out
