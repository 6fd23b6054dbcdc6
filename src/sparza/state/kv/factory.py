"""Opening a task's store from config: engine, serdes, options and its directory.

The store of (store, task) lives in ``<base_dir>/<store>/<task dir name>``, the task name made
safe for a file system (``Partition 3`` → ``Partition_3``, as Samza's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from sparza.config import Choice, Config, define_check, define_key
from sparza.config.shared import LOGGED_STORE_BASE_DIR
from sparza.errors import ConfigError
from sparza.state.kv.api import KeyValueStore, SerdeStore
from sparza.state.kv.format import configured_format, declared_migration, read_format
from sparza.state.kv.memory import InMemoryStore
from sparza.state.kv.migration import reconcile
from sparza.state.kv.rocksdb import RocksDbStore

__all__ = ["STORE_FACTORIES", "STORE_FACTORY", "open_store", "safe_dir_name", "store_dir"]

_PKG = "sparza.state.kv"
STORE_FACTORIES = ("rocksdb", "memory")

STORE_FACTORY = define_key("stores.<store>.factory", "rocksdb", "store engine: rocksdb or memory (or Samza's "
                           "RocksDb / InMemory KeyValueStorageEngineFactory)", _PKG, kind=Choice(*STORE_FACTORIES))
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_dir_name(name: str) -> str:
    """``name`` usable as one directory name: spaces become ``_``, other unsafe characters ``-``."""
    if not name:
        raise ValueError("empty name")
    out = _UNSAFE.sub("-", name.replace(" ", "_"))
    return "_" + out if out in (".", "..") else out


def store_dir(base_dir: str | Path, store_name: str, task_name: str) -> Path:
    """Where the store ``store_name`` of ``task_name`` lives: ``<base_dir>/<store>/<task>``."""
    return Path(base_dir) / safe_dir_name(store_name) / safe_dir_name(task_name)


def check_store_config(store_name: str, config: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` for the first setting of ``stores.<store_name>`` that cannot work (engine,
    serdes and their schemas, every RocksDB option's name and range), without opening anything: what
    ``sparza config check`` and the start checks of ``sparza run`` ask before Spark starts."""
    cfg = config if isinstance(config, Config) else Config(config)
    prefix = f"stores.{store_name}."
    STORE_FACTORY.get(cfg, store=store_name)
    configured_format(store_name, cfg)
    declared_migration(store_name, cfg)
    from sparza.state.kv.rocksdb import rocksdb_options

    rocksdb_options(dict(cfg.subset(prefix + "rocksdb")), key_prefix=prefix + "rocksdb.")


def _check_stores(config: Config) -> None:
    for name in sorted({k.split(".")[1] for k in config if k.startswith("stores.") and k.count(".") >= 2}):
        check_store_config(name, config)


define_check(_PKG, _check_stores)


def open_store(store_name: str, config: Mapping[str, str], task_name: str, base_dir: str | Path,
               read_only: bool = False, *, directory: str | Path | None = None) -> KeyValueStore:
    """Open (creating if missing) the store ``stores.<store_name>`` of ``task_name``.

    ``directory`` opens the copy kept there instead of the task's live dir (a store checkpoint, to read a
    committed state): a RocksDB store opens it in place, a memory store loads its entries.

    Reads ``stores.<store>.factory``, ``key.serde``, ``msg.serde`` (``avro``, and ``json`` with a declared schema,
    take theirs from ``stores.<store>.key.schema`` / ``msg.schema``), ``key.migrate.from`` / ``msg.migrate.from``
    and ``stores.<store>.rocksdb.*``. The format the store's bytes were written in (``STORE-FORMAT.json`` in its
    directory) is compared with that config first: old values are converted, read through the new schema, or the
    open is refused with a :class:`~sparza.state.kv.format.StoreFormatError` (see :mod:`sparza.state.kv.migration`).
    """
    cfg = Config.of(config)
    prefix = f"stores.{store_name}."
    factory = STORE_FACTORY.get(cfg, store=store_name)
    configured = configured_format(store_name, cfg)
    declared = declared_migration(store_name, cfg)
    key_serde, msg_serde = configured.key.serde_object(), configured.msg.serde_object()
    store: SerdeStore
    if factory == "memory":
        store = InMemoryStore(store_name, key_serde, msg_serde, read_only=read_only)
        recorded = None
        if directory is not None:
            store.load(directory)
            recorded = read_format(directory, store_name)
        record_in = None
    else:
        if base_dir is None:
            raise ConfigError(LOGGED_STORE_BASE_DIR.key, None, "a local dir for RocksDB stores")
        options = dict(cfg.subset(prefix + "rocksdb"))
        # Unknown option names are reported with their full key.
        from sparza.state.kv.rocksdb import rocksdb_options

        rocksdb_options(options, key_prefix=prefix + "rocksdb.")
        path = Path(directory) if directory is not None else store_dir(base_dir, store_name, task_name)
        recorded = read_format(path, store_name)
        store = RocksDbStore(path, key_serde, msg_serde, options, read_only=read_only, name=store_name)
        record_in = None if read_only else path
    try:
        store.format = reconcile(store, recorded, configured, declared, record_in=record_in)
    except BaseException:
        store.close()
        raise
    return store
