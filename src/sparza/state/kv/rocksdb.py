"""The RocksDB engine (through rocksdict, in raw mode: bytes in, bytes out, no pickling).

rocksdict's default mode prefixes every key and value with a type byte and pickles objects; raw
mode stores exactly the serdes' bytes, so a store written here can be read by any RocksDB tool and
its checkpoints are plain RocksDB checkpoints (SST files hard-linked, metadata copied).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from sparza.config import define_key, parse_bool, parse_byte_size
from sparza.errors import ConfigError
from sparza.serde import Serde
from sparza.state.kv.api import SerdeStore, StoreClosedError, StoreError

__all__ = ["ROCKSDB_OPTION_KEYS", "SAMZA_DEFAULTS", "RocksDbReadView", "RocksDbStore", "rocksdb_options"]

_PKG = "sparza.state.kv"


def _size(text: str) -> int:
    return parse_byte_size(text)


# option (after ``stores.<store>.rocksdb.``) -> (parser, description). Applied by ``rocksdb_options``.
ROCKSDB_OPTION_KEYS: dict[str, tuple[Callable[[str], Any], str]] = {
    "compression": (str, "none, snappy, zlib, bz2, lz4, lz4hc or zstd (default lz4)"),
    "block.size.bytes": (_size, "SST block size (RocksDB default 4096)"),
    "cache.size.bytes": (_size, "block cache size for this store"),
    "write.buffer.size.bytes": (_size, "memtable size before a flush to an SST file (default 64MB)"),
    "num.write.buffers": (int, "max number of memtables (default 2)"),
    "max.open.files": (int, "max open files, -1 for unlimited"),
    "max.background.jobs": (int, "background flush and compaction threads"),
    "target.file.size.bytes": (_size, "target SST file size at level 1"),
    "compaction.style": (str, "level, universal or fifo"),
    "max.log.file.size.bytes": (_size, "max size of RocksDB's info LOG file (Samza's default 64MB)"),
    "keep.log.file.num": (int, "how many info LOG files to keep, the current one included: every open of a "
                               "store starts a new one (Samza's default 2; RocksDB's own, 1000, let a store "
                               "reopened per batch pile up LOG.old files)"),
    "disable.auto.compactions": (parse_bool, "true to compact only on demand"),
}

# The smallest value RocksDB can work with, per option (a smaller one is refused at config check, not
# silently sanitized or failing when the store opens on an executor).
_MINIMUM: dict[str, int] = {
    "block.size.bytes": 1, "cache.size.bytes": 0, "write.buffer.size.bytes": 1, "num.write.buffers": 1,
    "max.background.jobs": 1, "target.file.size.bytes": 1, "max.log.file.size.bytes": 0, "keep.log.file.num": 1,
}

SAMZA_DEFAULTS: dict[str, str] = {"keep.log.file.num": "2", "max.log.file.size.bytes": "64MB"}
"""Options sparza sets as Samza's RocksDB stores do (``RocksDbOptionsHelper``) unless a store's config sets them:
bench/endurance.py found a broadcast store, opened once per batch, keeping a 24 KB ``LOG.old`` file per open."""

for _opt, (_parse, _doc) in ROCKSDB_OPTION_KEYS.items():
    define_key(f"stores.<store>.rocksdb.{_opt}", SAMZA_DEFAULTS.get(_opt), _doc, _PKG)


def rocksdb_options(options: Mapping[str, Any] | None, *, key_prefix: str = "rocksdb.") -> Any:
    """A rocksdict ``Options`` in raw mode with ``options`` (``{"write.buffer.size.bytes": "8MB"}``)
    applied. Unknown or malformed options raise :class:`ConfigError` naming ``key_prefix + name``."""
    import rocksdict as rd

    opts = rd.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_compression_type(rd.DBCompressionType.lz4())
    table: Any = None
    for name, raw in {**SAMZA_DEFAULTS, **(options or {})}.items():
        key = key_prefix + name
        if name not in ROCKSDB_OPTION_KEYS:
            raise ConfigError(key, raw, "one of the RocksDB options " + ", ".join(sorted(ROCKSDB_OPTION_KEYS)))
        parse, doc = ROCKSDB_OPTION_KEYS[name]
        try:
            value = parse(str(raw))
            if name in _MINIMUM and value < _MINIMUM[name]:
                raise ValueError(f"below {_MINIMUM[name]}")
            if name == "max.open.files" and (value == 0 or value < -1):
                raise ValueError("-1 or at least 1")
            if name == "compression":
                opts.set_compression_type(getattr(rd.DBCompressionType, value.strip().lower())())
            elif name == "compaction.style":
                opts.set_compaction_style(getattr(rd.DBCompactionStyle, value.strip().lower())())
            elif name in ("block.size.bytes", "cache.size.bytes"):
                table = table or rd.BlockBasedOptions()
                if name == "block.size.bytes":
                    table.set_block_size(value)
                else:
                    table.set_block_cache(rd.Cache(value))
            else:
                setter = {
                    "write.buffer.size.bytes": opts.set_write_buffer_size,
                    "num.write.buffers": opts.set_max_write_buffer_number,
                    "max.open.files": opts.set_max_open_files,
                    "max.background.jobs": opts.set_max_background_jobs,
                    "target.file.size.bytes": opts.set_target_file_size_base,
                    "max.log.file.size.bytes": opts.set_max_log_file_size,
                    "keep.log.file.num": opts.set_keep_log_file_num,
                    "disable.auto.compactions": opts.set_disable_auto_compactions,
                }[name]
                setter(value)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            floor = f"; at least {_MINIMUM[name]}" if name in _MINIMUM else ""
            raise ConfigError(key, raw, doc + floor) from exc
    if table is not None:
        opts.set_block_based_table_factory(table)
    return opts


class RocksDbStore(SerdeStore):
    """A task store kept in a RocksDB directory at ``path`` (created when missing).

    ``read_only=True`` opens an existing store or checkpoint without taking its lock, so several
    readers (or a backup verifying a checkpoint) can share it; writes then raise
    :class:`~sparza.state.kv.api.StoreReadOnlyError`.
    """

    def __init__(self, path: str | Path, key_serde: Serde | None = None, msg_serde: Serde | None = None,
                 options: Mapping[str, Any] | None = None, read_only: bool = False, *,
                 name: str | None = None) -> None:
        import rocksdict as rd

        self.path = Path(path)
        super().__init__(name or self.path.name, key_serde, msg_serde, read_only)
        self._options = rocksdb_options(options)
        if read_only and not (self.path / "CURRENT").exists():
            raise StoreError(self.name, f"no RocksDB store at {self.path} to open read-only")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        access = rd.AccessType.read_only() if read_only else rd.AccessType.read_write()
        try:
            self._db: Any = rd.Rdict(str(self.path), options=self._options, access_type=access)
        except Exception as exc:  # rocksdict raises a bare Exception with RocksDB's message
            raise StoreError(self.name, f"cannot open RocksDB at {self.path}: {exc}") from exc
        # Views taken by read_view(), released by close() under this lock (see RocksDbReadView).
        self._views_lock = threading.Lock()
        self._views: list[RocksDbReadView] = []

    def _live(self) -> Any:
        if self._db is None:
            raise StoreClosedError(self.name)
        return self._db

    def _get_raw(self, key: bytes) -> bytes | None:
        value: bytes | None = self._live().get(key)
        return value

    def _multi_get_raw(self, keys: list[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        values: list[bytes | None] = self._live().get(keys)
        return values

    def _put_raw(self, key: bytes, value: bytes) -> None:
        # One key: skip the WriteBatch (measurably cheaper for per-message puts).
        self._live().put(key, value)

    def _write_raw(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        import rocksdict as rd

        db = self._live()
        if len(puts) + len(deletes) == 1:
            if puts:
                db.put(puts[0][0], puts[0][1])
            else:
                db.delete(deletes[0])
            return
        batch = rd.WriteBatch(raw_mode=True)
        for key, value in puts:
            batch.put(key, value)
        for key in deletes:
            batch.delete(key)
        db.write(batch)

    def _iter_raw(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        it = self._live().iter()
        if from_key is None:
            it.seek_to_first()
        else:
            it.seek(from_key)
        while it.valid():
            key = it.key()
            if to_key is not None and key >= to_key:
                break
            yield key, it.value()
            it.next()

    def flush(self) -> None:
        """Flush the memtable to SST files, so a checkpoint holds SSTs and metadata only."""
        if not self.read_only:
            self._live().flush()

    def checkpoint(self, directory: str | Path) -> Path:
        """A RocksDB checkpoint in ``directory``: SST files hard-linked, MANIFEST/CURRENT/OPTIONS copied.

        ``directory`` must not exist (RocksDB refuses); a leftover from a crashed attempt is
        removed first, since a checkpoint that was not completed is never referenced.
        """
        import rocksdict as rd

        target = Path(directory)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        db = self._live()
        if self.read_only:
            raise StoreError(self.name, "cannot checkpoint a read-only store")
        db.flush()
        rd.Checkpoint(db).create_checkpoint(str(target))
        self._record_format(target, recorded_in=self.path)
        return target

    def read_view(self) -> RocksDbReadView:
        """A read-only view of the store as it is now for point reads (a RocksDB snapshot: later writes are not
        seen), for readers in other threads; it opens no file, and ends with its own ``close()`` or this store's."""
        with self._views_lock:
            view = RocksDbReadView(self, self._live().snapshot())
            self._views = [v for v in self._views if v.is_open] + [view]
        return view

    def approximate_size_bytes(self) -> int:
        """Total size of the live SST files (RocksDB's own estimate)."""
        return int(self._live().property_int_value("rocksdb.total-sst-files-size") or 0)

    def compact(self) -> None:
        """Compact the whole key range: rewrites the SST files, dropping the versions a conversion of every value
        overwrote (the next snapshot then uploads the store once, at its new size)."""
        self._live().compact_range(None, None)

    def close(self) -> None:
        # A snapshot keeps the database (and its LOCK) alive after close(): release every view first, so the
        # store can be opened again in this process at once.
        with self._views_lock:
            for view in self._views:
                view._release()
            self._views.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    def __repr__(self) -> str:
        return f"RocksDbStore({self.name!r}, path={str(self.path)!r}, read_only={self.read_only})"


class RocksDbReadView(SerdeStore):
    """A :class:`RocksDbStore` as it was when :meth:`RocksDbStore.read_view` was called (a RocksDB snapshot), for
    point reads (``get``, ``get_all``) with the store's serdes; read-only. Not iterable: rocksdict's snapshot
    iterators (0.3.29) read the latest state, not the snapshot's, so ``all``/``range`` raise
    :class:`~sparza.state.kv.api.StoreError` (read a checkpoint instead).

    A read holds the store's view lock, which :meth:`RocksDbStore.close` takes to release every snapshot: a read
    never keeps the database open past its store's close (it raises :class:`~sparza.state.kv.api.StoreClosedError`
    instead), and a closed store can be opened again at once."""

    def __init__(self, store: RocksDbStore, snapshot: Any) -> None:
        super().__init__(store.name, store.key_serde, store.msg_serde, read_only=True)
        self.format = store.format
        self._lock = store._views_lock
        self._snapshot: Any = snapshot

    @property
    def is_open(self) -> bool:
        """False once closed (or its store was)."""
        return self._snapshot is not None

    def _release(self) -> None:  # the caller holds the lock
        self._snapshot = None

    def _get_raw(self, key: bytes) -> bytes | None:
        with self._lock:
            if self._snapshot is None:
                raise StoreClosedError(self.name)
            try:
                value: bytes = self._snapshot[key]
            except Exception as exc:  # rocksdict's snapshot raises a bare Exception for a missing key
                if "not found" in str(exc):
                    return None
                raise StoreError(self.name, f"read of a snapshot failed: {exc}") from exc
        return value

    def _multi_get_raw(self, keys: list[bytes]) -> list[bytes | None]:
        return [self._get_raw(key) for key in keys]

    def _write_raw(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        self._writable()

    def _iter_raw(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        raise StoreError(self.name, "a read view answers point reads only (rocksdict's snapshot iterators do not "
                                    "read the snapshot)")

    def flush(self) -> None:
        """Nothing to flush: read-only."""

    def checkpoint(self, directory: str | Path) -> Path:
        raise StoreError(self.name, "cannot checkpoint a read view")

    def close(self) -> None:
        """Release the snapshot (its store stays open)."""
        with self._lock:
            self._release()

    def __repr__(self) -> str:
        return f"RocksDbReadView({self.name!r}, open={self.is_open})"
