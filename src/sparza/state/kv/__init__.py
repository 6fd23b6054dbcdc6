"""Key-value stores for task state: the :class:`KeyValueStore` API, the RocksDB and in-memory
engines, and :func:`open_store` that builds a task's store from ``stores.<store>.*`` config, after checking the
format its bytes were written in (:mod:`~sparza.state.kv.format`) against that config and converting or refusing
a changed one (:mod:`~sparza.state.kv.migration`, :mod:`~sparza.state.kv.evolution`)."""

from __future__ import annotations

from sparza.state.kv.api import (
    KeyValueStore,
    SerdeStore,
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
    SupportsReadView,
    TracksChanges,
)
from sparza.state.kv.evolution import SchemaProblem, schema_problems
from sparza.state.kv.factory import STORE_FACTORIES, open_store, safe_dir_name, store_dir
from sparza.state.kv.format import (
    FORMAT_FILE,
    RecordedFormat,
    StoreFormat,
    StoreFormatError,
    ValueFormat,
    parse_format,
    read_format,
)
from sparza.state.kv.memory import InMemoryStore
from sparza.state.kv.migration import FormatPlan, check_store_format
from sparza.state.kv.rocksdb import ROCKSDB_OPTION_KEYS, RocksDbStore, rocksdb_options

__all__ = [
    "FORMAT_FILE",
    "ROCKSDB_OPTION_KEYS",
    "STORE_FACTORIES",
    "FormatPlan",
    "InMemoryStore",
    "KeyValueStore",
    "RecordedFormat",
    "RocksDbStore",
    "SchemaProblem",
    "SerdeStore",
    "StoreClosedError",
    "StoreError",
    "StoreFormat",
    "StoreFormatError",
    "StoreReadOnlyError",
    "SupportsReadView",
    "TracksChanges",
    "ValueFormat",
    "check_store_format",
    "open_store",
    "parse_format",
    "read_format",
    "rocksdb_options",
    "safe_dir_name",
    "schema_problems",
    "store_dir",
]
