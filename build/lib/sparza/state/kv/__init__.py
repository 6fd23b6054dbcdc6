"""Key-value stores for task state: the :class:`KeyValueStore` API, the RocksDB and in-memory
engines, and :func:`open_store` that builds a task's store from ``stores.<store>.*`` config."""

from __future__ import annotations

from sparza.state.kv.api import KeyValueStore, SerdeStore, StoreClosedError, StoreError, StoreReadOnlyError
from sparza.state.kv.factory import STORE_FACTORIES, open_store, safe_dir_name, store_dir
from sparza.state.kv.memory import InMemoryStore
from sparza.state.kv.rocksdb import ROCKSDB_OPTION_KEYS, RocksDbStore, rocksdb_options

__all__ = [
    "ROCKSDB_OPTION_KEYS",
    "STORE_FACTORIES",
    "InMemoryStore",
    "KeyValueStore",
    "RocksDbStore",
    "SerdeStore",
    "StoreClosedError",
    "StoreError",
    "StoreReadOnlyError",
    "open_store",
    "rocksdb_options",
    "safe_dir_name",
    "store_dir",
]
