"""The read-only view tasks get from ``context.get_store(name)`` for an adjunct store.

The underlying stores hold the stream's bytes; the view applies the store's configured serdes
(``stores.<store>.key.serde`` / ``msg.serde``). It resolves the store to read on every call, so
a task may keep it across batches: when a versioned dataset or a broadcast snapshot switches at a
batch boundary, the same view reads the new version. Every write raises
:class:`AdjunctStoreReadOnlyError` naming the feeding stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from sparza.serde import Serde
from sparza.state.adjunct.errors import AdjunctStoreReadOnlyError
from sparza.state.kv.api import KeyValueStore

__all__ = ["ReadOnlyStore"]


class ReadOnlyStore(KeyValueStore):
    """A read-only, typed :class:`KeyValueStore` over whichever bytes store ``resolve()`` returns now."""

    def __init__(self, name: str, stream: str, resolve: Callable[[], KeyValueStore], key_serde: Serde,
                 msg_serde: Serde) -> None:
        self.name = name
        self.stream = stream
        self._resolve = resolve
        self.key_serde = key_serde
        self.msg_serde = msg_serde

    def _value(self, raw: bytes | None) -> Any:
        return None if raw is None else self.msg_serde.from_bytes(raw)

    def _refuse(self, operation: str) -> NoReturn:
        raise AdjunctStoreReadOnlyError(self.name, operation, self.stream)

    # --- reads ---------------------------------------------------------------------------------
    def get(self, key: Any) -> Any:
        return self._value(self._resolve().get(self.key_serde.to_bytes(key)))

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        key_list = list(keys)
        raw = self._resolve().get_all([self.key_serde.to_bytes(k) for k in key_list])
        out: dict[Any, Any] = {}
        for key in key_list:
            value = raw.get(self.key_serde.to_bytes(key))
            if value is not None:
                out[key] = self.msg_serde.from_bytes(value)
        return out

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        store = self._resolve()
        for k, v in store.range(self.key_serde.to_bytes(from_key), self.key_serde.to_bytes(to_key)):
            yield self.key_serde.from_bytes(k), self.msg_serde.from_bytes(v)

    def all(self) -> Iterator[tuple[Any, Any]]:
        for k, v in self._resolve().all():
            yield self.key_serde.from_bytes(k), self.msg_serde.from_bytes(v)

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    # --- writes are refused ----------------------------------------------------------------------
    def put(self, key: Any, value: Any) -> None:
        self._refuse("put")

    def put_all(self, entries: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
        self._refuse("put_all")

    def delete(self, key: Any) -> None:
        self._refuse("delete")

    def delete_all(self, keys: Iterable[Any]) -> None:
        self._refuse("delete_all")

    def checkpoint(self, directory: str | Path) -> Path:
        self._refuse("checkpoint")

    # --- lifecycle belongs to the adjunct manager ------------------------------------------------
    def flush(self) -> None:
        """Nothing to flush: the view never writes."""

    def close(self) -> None:
        """No-op: the adjunct manager owns the underlying store."""

    def __repr__(self) -> str:
        return f"ReadOnlyStore({self.name!r}, fed by {self.stream})"
