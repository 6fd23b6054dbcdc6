"""The read-only view tasks get from ``context.get_store(name)`` for an adjunct store.

The view resolves the store to read on every call, so a task may keep it across batches: when a
versioned dataset or a broadcast snapshot switches at a batch boundary, the same view reads the
new version. Every write raises :class:`AdjunctStoreReadOnlyError` naming the feeding stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from sparza.state.adjunct.errors import AdjunctStoreReadOnlyError
from sparza.state.kv.api import KeyValueStore

__all__ = ["ReadOnlyStore"]


class ReadOnlyStore(KeyValueStore):
    """A read-only :class:`KeyValueStore` over whichever store ``resolve()`` returns right now."""

    def __init__(self, name: str, stream: str, resolve: Callable[[], KeyValueStore]) -> None:
        self.name = name
        self.stream = stream
        self._resolve = resolve

    def _refuse(self, operation: str) -> NoReturn:
        raise AdjunctStoreReadOnlyError(self.name, operation, self.stream)

    # --- reads ---------------------------------------------------------------------------------
    def get(self, key: Any) -> Any:
        return self._resolve().get(key)

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        return self._resolve().get_all(keys)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._resolve().range(from_key, to_key)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._resolve().all()

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
