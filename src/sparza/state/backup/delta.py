"""Snapshot ids that carry the writes made since their file snapshot: a commit that changed a few keys costs no blob.

A store's committed state is named by a *snapshot id*. It is either a snapshot index blob id (the files of a
checkpoint dir, :class:`~sparza.state.backup.index.SnapshotIndex`) or that id followed by :data:`DELTA_TAG` and
the writes made since that file snapshot, compressed: ``<index blob id>#d1.<base64url(zlib(msgpack))>``. The id
travels in the task checkpoint, which every commit writes anyway, so a commit whose writes fit in
``stores.<store>.backup.delta.max.bytes`` uploads nothing to the blob store: its state is the file snapshot it
names with the writes applied, last write per key (None deletes). When the writes outgrow the limit the commit
uploads the changed files as before and the id becomes a plain index id again.

Everything that reads a snapshot by id (:meth:`StateBackup.restore`, savepoints, ``sparza store``, ``sparza
snapshots``) goes through :class:`~sparza.state.backup.backup.StateBackup`, which splits the id here.
"""

from __future__ import annotations

import base64
import os
import shutil
import zlib
from collections.abc import Mapping
from pathlib import Path

import msgspec

from sparza.errors import SparzaError

__all__ = [
    "DELTA_TAG",
    "Changes",
    "DeltaError",
    "apply_changes",
    "base_of",
    "changes_of",
    "changes_size",
    "decode_changes",
    "encode_changes",
    "merge_changes",
    "snapshot_id",
]

DELTA_TAG = "#d1."
"""Between the index blob id and the encoded writes (blob ids never contain ``#``)."""

Changes = dict[bytes, bytes | None]
"""Raw key → raw value written since the file snapshot (None: deleted)."""


class DeltaError(SparzaError, ValueError):
    """A snapshot id's writes cannot be decoded (corrupt or from a newer sparza)."""


def base_of(snapshot: str) -> str:
    """The snapshot index blob id a snapshot id names (itself when it carries no writes)."""
    return snapshot.split(DELTA_TAG, 1)[0]


def encode_changes(changes: Mapping[bytes, bytes | None]) -> str:
    """The writes as text (sorted by key, so the same writes give the same id)."""
    body = msgspec.msgpack.encode([[k, changes[k]] for k in sorted(changes)])
    return base64.urlsafe_b64encode(zlib.compress(body, 6)).decode("ascii")


def decode_changes(text: str) -> Changes:
    """Parse :func:`encode_changes`'s output."""
    try:
        pairs = msgspec.msgpack.decode(zlib.decompress(base64.urlsafe_b64decode(text.encode("ascii"))))
        return {bytes(k): (None if v is None else bytes(v)) for k, v in pairs}
    except (ValueError, TypeError, zlib.error, msgspec.DecodeError) as exc:
        raise DeltaError(f"the writes carried by a snapshot id cannot be read: {exc}") from exc


def changes_of(snapshot: str) -> Changes:
    """The writes a snapshot id carries (empty for a plain index id)."""
    _, _, text = snapshot.partition(DELTA_TAG)
    return decode_changes(text) if text else {}


def snapshot_id(base: str, changes: Mapping[bytes, bytes | None]) -> str:
    """The id of file snapshot ``base`` with ``changes`` applied (``base`` itself when there are none)."""
    return f"{base}{DELTA_TAG}{encode_changes(changes)}" if changes else base


def merge_changes(older: Mapping[bytes, bytes | None], newer: Mapping[bytes, bytes | None]) -> Changes:
    """``older`` then ``newer``: the last write per key wins."""
    merged = dict(older)
    merged.update(newer)
    return merged


def changes_size(changes: Mapping[bytes, bytes | None]) -> int:
    """Bytes of keys and values (what ``stores.<store>.backup.delta.max.bytes`` limits)."""
    return sum(len(k) + (len(v) if v is not None else 0) for k, v in changes.items())


def apply_changes(directory: Path, changes: Mapping[bytes, bytes | None]) -> None:
    """Write ``changes`` into the store dir ``directory`` (a RocksDB dir or a memory store's entries file), which
    then holds the state they describe and is a closed store again (no lock, no info log left)."""
    if not changes:
        return
    puts = [(k, v) for k, v in changes.items() if v is not None]
    deletes = [k for k, v in changes.items() if v is None]
    if (directory / "CURRENT").exists():
        from sparza.state.kv import RocksDbStore

        store = RocksDbStore(directory)
        try:
            store._write_raw(puts, deletes)
            store.flush()
        finally:
            store.close()
        for entry in directory.iterdir():
            if entry.name in ("LOCK", "LOG") or entry.name.startswith("LOG.old."):
                entry.unlink(missing_ok=True)
        return
    from sparza.state.kv import InMemoryStore

    memory = InMemoryStore()
    memory.load(directory)
    memory._write_raw(puts, deletes)
    tmp = directory / ".sparza-tmp-entries"
    if tmp.exists():
        shutil.rmtree(tmp)
    memory.checkpoint(tmp)
    os.replace(tmp / "entries.jsonl", directory / "entries.jsonl")
    shutil.rmtree(tmp, ignore_errors=True)
