"""Blob names, block ids and the writer identity stamped on every committed blob.

Blob name (UTC time)::

    <stream>[/<partition>]/yyyy/MM/dd/HH/mm-ss-<source>-v<version>-<seq>-<id><ext>     in a transaction
    <stream>[/<partition>]/yyyy/MM/dd/HH/mm-ss-<source>-<producer>-<seq>[-<random>]<ext>  otherwise

``<source>`` is a readable slug of the source (the task name), ``<seq>`` the blob's number within the
transaction (per stream-partition) or within the producer. In a transaction ``<id>`` is a hash of the full
(app id, source), so two tasks, jobs or Spark sinks never share a name even when their slugs look alike,
and the version keeps batches apart; a replay of the same batch gets the same names. Outside one,
``<producer>`` is random per producer instance, so two producers (processes, hosts) never share a name.

Block ids are base64 of a fixed-length text, so every id of a blob has the same length, as Azure requires.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import time
from urllib.parse import quote

__all__ = [
    "MANIFEST_PREFIX",
    "OWNER_KEY",
    "BlobKey",
    "Transaction",
    "blob_name",
    "block_id",
    "deterministic_token",
    "producer_owner",
    "random_token",
    "source_slug",
    "time_segment",
    "transaction_metadata",
    "transaction_owner",
]

MANIFEST_PREFIX = "_sparza/sinks/"
"""Where the Spark sink keeps its per-batch commit manifests (inside the output container)."""

OWNER_KEY = "sparzaWriter"
"""Blob metadata naming who committed the blob (a transaction or a producer instance): a commit over an
existing blob is allowed only to the same writer (a replay), never to another one."""

Transaction = tuple[str, int]
"""(app id, version): for the task runtime (job/task, batch id); for the Spark sink (sink id, batch id)."""

BlobKey = tuple[str, str | None]
"""(stream, partition key text or None): one open blob per key and source between flushes."""

_SLUG_MAX = 40
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def time_segment(epoch_ms: int) -> str:
    """``yyyy/MM/dd/HH/mm-ss`` in UTC."""
    return time.strftime("%Y/%m/%d/%H/%M-%S", time.gmtime(epoch_ms / 1000.0))


def random_token() -> str:
    """8 random lowercase hex characters."""
    return secrets.token_hex(4)


def deterministic_token(*parts: object, length: int = 16) -> str:
    """``length`` hex characters hashed from ``parts`` (stable across processes, unlike ``hash()``)."""
    text = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def source_slug(source: str) -> str:
    """The source as a short readable name segment: ``Partition 3`` -> ``partition-3`` (``src`` if empty).
    Only for reading: uniqueness comes from the hash or producer id next to it."""
    slug = _NOT_SLUG.sub("-", source.lower()).strip("-")[:_SLUG_MAX].rstrip("-")
    return slug or "src"


def blob_name(stream: str, partition: str | None, epoch_ms: int, identity: str, extension: str) -> str:
    """The blob name for a stream, optional partition segment, start time and writer ``identity``
    (the part after ``mm-ss-``, see the module docstring)."""
    prefix = stream if partition is None else f"{stream}/{partition}"
    return f"{prefix}/{time_segment(epoch_ms)}-{identity}{extension}"


def block_id(blob_token: str, sequence: int) -> str:
    """Base64 of ``<16-char token>-<6-digit sequence>`` (equal length for every block of a blob)."""
    return base64.b64encode(f"{blob_token[:16]:0>16}-{sequence:06d}".encode("ascii")).decode("ascii")


def transaction_owner(app_id: str, version: int, source: str) -> str:
    """The :data:`OWNER_KEY` value of blobs written by ``source`` in transaction (app id, version)."""
    return "txn-" + deterministic_token(app_id, version, source, length=32)


def producer_owner(producer_id: str) -> str:
    """The :data:`OWNER_KEY` value of blobs written outside a transaction by one producer instance."""
    return f"producer-{producer_id}"


def transaction_metadata(app_id: str, version: int, source: str) -> dict[str, str]:
    """Readable metadata of a transactional blob (percent-encoded: metadata values must be ASCII)."""
    return {"sparzaAppId": quote(app_id, safe="/-_.:@"), "sparzaVersion": str(version),
            "sparzaSource": quote(source, safe="/-_.:@")}
