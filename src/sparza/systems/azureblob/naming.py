"""Blob names and block ids.

Blob name: ``<stream>[/<partition>]/yyyy/MM/dd/HH/mm-ss[-<8 chars>]<ext>`` in UTC, where the time is
the first message's (wall clock, or its event time for a transactional flush). Block ids are base64
of a fixed-length text, so every id of a blob has the same length as Azure requires.

For a transactional flush the suffix and block ids are hashes of the transaction (app id, version),
the source, the stream, the partition and the blob's sequence number within the flush, so a replay of
the same batch produces the same names and ids and overwrites instead of adding.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time

__all__ = [
    "MANIFEST_PREFIX",
    "BlobKey",
    "Transaction",
    "blob_name",
    "block_id",
    "deterministic_token",
    "random_token",
    "time_segment",
]

MANIFEST_PREFIX = "_sparza/sinks/"
"""Where the Spark sink keeps its per-batch commit manifests (inside the output container)."""

Transaction = tuple[str, int]
"""(app id, version): for the task runtime (job/task, batch id); for the Spark sink (sink id, batch id)."""

BlobKey = tuple[str, str | None]
"""(stream, partition key text or None): one open blob per key and source between flushes."""


def time_segment(epoch_ms: int) -> str:
    """``yyyy/MM/dd/HH/mm-ss`` in UTC."""
    return time.strftime("%Y/%m/%d/%H/%M-%S", time.gmtime(epoch_ms / 1000.0))


def random_token() -> str:
    """8 random lowercase hex characters."""
    return secrets.token_hex(4)


def deterministic_token(*parts: object) -> str:
    """16 hex characters hashed from ``parts`` (stable across processes, unlike ``hash()``)."""
    text = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def blob_name(stream: str, partition: str | None, epoch_ms: int, suffix: str | None, extension: str) -> str:
    """The blob name for a stream, optional partition segment, start time and optional suffix."""
    prefix = stream if partition is None else f"{stream}/{partition}"
    tail = time_segment(epoch_ms) + (f"-{suffix}" if suffix else "")
    return f"{prefix}/{tail}{extension}"


def block_id(blob_token: str, sequence: int) -> str:
    """Base64 of ``<16-char token>-<6-digit sequence>`` (equal length for every block of a blob)."""
    return base64.b64encode(f"{blob_token[:16]:0>16}-{sequence:06d}".encode("ascii")).decode("ascii")
