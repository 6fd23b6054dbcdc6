"""Opening a task's store from config: engine, serdes, options and its directory.

The store of (store, task) lives in ``<base_dir>/<store>/<task dir name>``, the task name made
safe for a file system (``Partition 3`` → ``Partition_3``, as Samza's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from sparza.config import Config, define_check, define_key
from sparza.errors import ConfigError
from sparza.serde import serde_from_name
from sparza.state.kv.api import KeyValueStore
from sparza.state.kv.memory import InMemoryStore
from sparza.state.kv.rocksdb import RocksDbStore

__all__ = ["STORE_FACTORIES", "open_store", "safe_dir_name", "store_dir"]

_PKG = "sparza.state.kv"
STORE_FACTORIES = ("rocksdb", "memory")

define_key("stores.<store>.factory", "rocksdb", "store engine: rocksdb or memory (or Samza's RocksDb / InMemory "
           "KeyValueStorageEngineFactory)", _PKG)
define_key("stores.<store>.key.serde", "bytes", "serde of the store's keys: bytes, string, json, avro, integer, long, "
           "double or a serializers.registry name", _PKG)
define_key("stores.<store>.msg.serde", "bytes", "serde of the store's values: bytes, string, json, avro, integer, "
           "long, double or a serializers.registry name", _PKG)
define_key("stores.<store>.key.schema", None, "Avro schema (JSON or a file path) of the keys when key.serde is avro",
           _PKG)
define_key("stores.<store>.msg.schema", None, "Avro schema (JSON or a file path) of the values when msg.serde is avro",
           _PKG)

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
    cfg.get_choice(prefix + "factory", STORE_FACTORIES, "rocksdb")
    for which in ("key", "msg"):
        serde_from_name(cfg.get_str(prefix + f"{which}.serde", None), key=prefix + f"{which}.serde",
                        schema=cfg.get_str(prefix + f"{which}.schema", None), config=cfg)
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

    Reads ``stores.<store>.factory``, ``key.serde``, ``msg.serde`` (``avro`` takes its schema from
    ``stores.<store>.key.schema`` / ``msg.schema``) and ``stores.<store>.rocksdb.*``.
    """
    cfg = Config.of(config)
    prefix = f"stores.{store_name}."
    factory = cfg.get_choice(prefix + "factory", STORE_FACTORIES, "rocksdb")
    key_serde = serde_from_name(cfg.get_str(prefix + "key.serde", None), key=prefix + "key.serde",
                                schema=cfg.get_str(prefix + "key.schema", None), config=cfg)
    msg_serde = serde_from_name(cfg.get_str(prefix + "msg.serde", None), key=prefix + "msg.serde",
                                schema=cfg.get_str(prefix + "msg.schema", None), config=cfg)
    if factory == "memory":
        if directory is None:
            return InMemoryStore(store_name, key_serde, msg_serde, read_only=read_only)
        loaded = InMemoryStore(store_name, key_serde, msg_serde)
        loaded.load(directory)
        loaded.read_only = read_only
        return loaded
    if base_dir is None:
        raise ConfigError("job.logged.store.base.dir", None, "a local dir for RocksDB stores")
    options = dict(cfg.subset(prefix + "rocksdb"))
    # Unknown option names are reported with their full key.
    from sparza.state.kv.rocksdb import rocksdb_options

    rocksdb_options(options, key_prefix=prefix + "rocksdb.")
    path = Path(directory) if directory is not None else store_dir(base_dir, store_name, task_name)
    return RocksDbStore(path, key_serde, msg_serde, options,
                        read_only=read_only, name=store_name)
