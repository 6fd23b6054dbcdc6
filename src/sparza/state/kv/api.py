"""The key-value store API every task store implements, whatever the engine.

Keys and values pass through the store's serdes (``stores.<store>.key.serde`` / ``msg.serde``), so
tasks work with Python objects while engines store bytes. Iteration is in the byte order of the
serialized keys (RocksDB's order), which is why ``range`` is defined on serialized bounds.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sparza.errors import SparzaError
from sparza.serde import BytesSerde, Serde
from sparza.state.kv.format import FORMAT_FILE, StoreFormat, write_format

__all__ = ["KeyValueStore", "SerdeStore", "StoreClosedError", "StoreError", "StoreReadOnlyError", "TracksChanges"]


class StoreError(SparzaError):
    """A key-value store operation failed; ``store`` names the store (or its path)."""

    def __init__(self, store: str, message: str) -> None:
        self.store = store
        super().__init__(f"store {store!r}: {message}")


class StoreClosedError(StoreError):
    """The store was used after ``close()``."""

    def __init__(self, store: str) -> None:
        super().__init__(store, "is closed")


class StoreReadOnlyError(StoreError):
    """A write was attempted on a store opened read-only (a checkpoint, an adjunct snapshot)."""

    def __init__(self, store: str) -> None:
        super().__init__(store, "is read-only")


class KeyValueStore(ABC):
    """A sorted key-value store of one task: Samza's ``KeyValueStore`` in Python.

    ``get`` returns ``None`` for a missing key (as Samza's); a ``None`` value in ``put`` deletes.
    Writes are durable locally after ``flush``; ``checkpoint(dir)`` writes a consistent copy of
    the store into ``dir`` that the backup uploads. Stores are not thread-safe for writers.
    """

    name: str

    @abstractmethod
    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``None``."""

    @abstractmethod
    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        """``{key: value}`` for the keys present (absent keys are left out)."""

    @abstractmethod
    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` (``None`` deletes)."""

    @abstractmethod
    def put_all(self, entries: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
        """Set many keys in one atomic write."""

    @abstractmethod
    def delete(self, key: Any) -> None:
        """Remove ``key`` (no error when absent)."""

    @abstractmethod
    def delete_all(self, keys: Iterable[Any]) -> None:
        """Remove many keys in one atomic write."""

    @abstractmethod
    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        """Entries with ``from_key <= key < to_key`` (serialized byte order), sorted."""

    @abstractmethod
    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every entry, sorted by serialized key."""

    @abstractmethod
    def flush(self) -> None:
        """Make every write so far durable on local disk (no-op for in-memory stores)."""

    @abstractmethod
    def checkpoint(self, directory: str | Path) -> Path:
        """Write a consistent, openable copy of the store into ``directory`` (must not exist)."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; further use raises :class:`StoreClosedError`. Idempotent."""

    def __enter__(self) -> KeyValueStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@runtime_checkable
class TracksChanges(Protocol):
    """A store that can record the writes made to it (by key, last write wins): what a commit of few changes backs
    up instead of files (:mod:`sparza.state.backup.delta`)."""

    def track_changes(self, limit_bytes: int) -> None:
        """Start a fresh record, dropped once its keys and values pass ``limit_bytes``."""
        ...

    def take_changes(self) -> dict[bytes, bytes | None] | None:
        """The record so far (None when dropped or never started), and a fresh one from here on."""
        ...


@runtime_checkable
class SupportsReadView(Protocol):
    """A store that gives read-only views of itself as it is now, for point reads from other threads (live
    queries)."""

    def read_view(self) -> KeyValueStore:
        """A read-only store of this one's entries now for ``get``/``get_all`` (later writes are not seen; it may
        refuse iteration); its ``close()`` ends it."""
        ...


class SerdeStore(KeyValueStore):
    """Implements the typed API over five byte-level primitives an engine provides.

    Engines implement ``_get_raw``, ``_multi_get_raw``, ``_write_raw`` (atomic puts and deletes),
    ``_iter_raw(from, to)`` and the lifecycle methods; serdes are applied here once.
    """

    # Class-level defaults: subclasses that do not call __init__ (wrappers, views) record nothing.
    _changes: dict[bytes, bytes | None] | None = None
    _changes_bytes = 0
    _changes_limit = 0
    _changes_overflow = False

    def __init__(self, name: str, key_serde: Serde | None, msg_serde: Serde | None, read_only: bool) -> None:
        self.name = name
        self.key_serde: Serde = key_serde or BytesSerde()
        self.msg_serde: Serde = msg_serde or BytesSerde()
        self.read_only = read_only
        self.format: StoreFormat | None = None
        """The format the store's bytes are in, recorded in every checkpoint (set by ``open_store``; None for a
        store built directly, whose checkpoints then carry no record)."""
        self._changes: dict[bytes, bytes | None] | None = None
        self._changes_bytes = 0
        self._changes_limit = 0
        self._changes_overflow = False

    # --- change tracking ---------------------------------------------------------------------
    def track_changes(self, limit_bytes: int) -> None:
        """Record every write made through the typed API from now on (the last value per key; None = deleted), up
        to ``limit_bytes`` of keys and values: a commit then backs up what changed instead of files. Past the
        limit the record is dropped (:meth:`take_changes` says so) so a big batch costs no memory twice."""
        self._changes = {}
        self._changes_bytes = 0
        self._changes_limit = limit_bytes
        self._changes_overflow = False

    def take_changes(self) -> dict[bytes, bytes | None] | None:
        """The writes recorded since :meth:`track_changes` or the last call, and a fresh record from here on;
        None when nothing was tracked or the record passed its limit (the caller must back up files)."""
        changes = None if self._changes_overflow else self._changes
        if self._changes is not None or self._changes_overflow:
            self.track_changes(self._changes_limit)
        return changes

    def _record(self, key: bytes, value: bytes | None) -> None:
        changes = self._changes
        if changes is None:
            return
        if key not in changes:
            self._changes_bytes += len(key)
        old = changes.get(key)
        self._changes_bytes += (len(value) if value is not None else 0) - (len(old) if old is not None else 0)
        changes[key] = value
        if self._changes_bytes > self._changes_limit:
            self._changes = None
            self._changes_overflow = True

    def _record_format(self, directory: Path, *, recorded_in: Path | None = None) -> None:
        """Put the store's format into checkpoint ``directory`` (engines call it from ``checkpoint``): a hard link
        to the record in ``recorded_in`` (the live dir, whose record ``open_store`` keeps equal to ``format``)
        when there is one, else a new file (a checkpoint's own files are not fsynced one by one either)."""
        if self.format is None:
            return
        if recorded_in is not None:
            try:
                os.link(recorded_in / FORMAT_FILE, directory / FORMAT_FILE)
                return
            except OSError:
                pass
        write_format(directory, self.name, self.format, fsync=False)

    def compact(self) -> None:
        """Reclaim the space of overwritten and deleted entries, after a rewrite of the whole store (a conversion
        to a new format); engines without such space (memory) do nothing."""

    # --- engine primitives -------------------------------------------------------------------
    @abstractmethod
    def _get_raw(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    def _multi_get_raw(self, keys: list[bytes]) -> list[bytes | None]: ...

    @abstractmethod
    def _write_raw(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None: ...

    @abstractmethod
    def _iter_raw(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...

    # --- typed API ---------------------------------------------------------------------------
    def _writable(self) -> None:
        if self.read_only:
            raise StoreReadOnlyError(self.name)

    def _k(self, key: Any) -> bytes:
        return self.key_serde.to_bytes(key)

    def get(self, key: Any) -> Any:
        raw = self._get_raw(self._k(key))
        return None if raw is None else self.msg_serde.from_bytes(raw)

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        key_list = list(keys)
        raws = self._multi_get_raw([self._k(k) for k in key_list])
        return {k: self.msg_serde.from_bytes(v) for k, v in zip(key_list, raws, strict=True) if v is not None}

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            self.delete(key)
            return
        self._writable()
        raw_key, raw = self._k(key), self.msg_serde.to_bytes(value)
        self._put_raw(raw_key, raw)
        if self._changes is not None:
            self._record(raw_key, raw)

    def _put_raw(self, key: bytes, value: bytes) -> None:
        """One put; engines override it when a single write is cheaper than ``_write_raw``."""
        self._write_raw([(key, value)], [])

    def put_all(self, entries: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
        self._writable()
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        puts: list[tuple[bytes, bytes]] = []
        deletes: list[bytes] = []
        for key, value in pairs:
            if value is None:
                deletes.append(self._k(key))
            else:
                puts.append((self._k(key), self.msg_serde.to_bytes(value)))
        self._write_raw(puts, deletes)
        if self._changes is not None:
            for raw_key, raw in puts:
                self._record(raw_key, raw)
            for raw_key in deletes:
                self._record(raw_key, None)

    def delete(self, key: Any) -> None:
        self.delete_all([key])

    def delete_all(self, keys: Iterable[Any]) -> None:
        self._writable()
        raw_keys = [self._k(k) for k in keys]
        self._write_raw([], raw_keys)
        if self._changes is not None:
            for raw_key in raw_keys:
                self._record(raw_key, None)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        for k, v in self._iter_raw(self._k(from_key), self._k(to_key)):
            yield self.key_serde.from_bytes(k), self.msg_serde.from_bytes(v)

    def all(self) -> Iterator[tuple[Any, Any]]:
        for k, v in self._iter_raw(None, None):
            yield self.key_serde.from_bytes(k), self.msg_serde.from_bytes(v)
