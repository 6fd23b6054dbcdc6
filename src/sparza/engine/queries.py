"""Reads of a running task's stores (Kafka Streams' interactive queries), answered beside the container's loop.

A :class:`~sparza.engine.messages.QueryStore` reaches a container through its host and is answered here, beside the
container's loop (in the thread that received it, or a small pool of threads of its own), so a read never waits for
a batch and a batch never waits for a read:

- **committed** (the default): the store as the task's latest commit left it. A RocksDB store of a task that stays
  in its container is read through a snapshot of its open store taken as the commit checkpointed it
  (:meth:`~sparza.engine.stores.TaskStores.committed_view`) for a ``get``: no file is opened per commit, and the
  get is answered in the channel's reader thread without a hand-over to the pool. A scan or count, or any other
  store, is read from that commit's local checkpoint dir (hard links of the store's files), opened read-only once
  per commit and kept open while that commit is the latest. A commit that replaces the dir while a read runs makes
  the read start again on the new one.
- **live**: the task's in-flight state, what its next commit would write: read through the task's own store handle
  (its write-back cache first), so it may show writes of a batch that will never commit. The answer says which.

Keys and values cross the wire as JSON-able data (bytes as ``{"$bytes": hex}``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sparza.engine.messages import QueryStore, StoreAnswer
from sparza.state.kv.api import StoreClosedError

__all__ = ["StoreQueries", "from_wire", "to_wire"]

_BYTES = "$bytes"


def to_wire(value: Any) -> Any:
    """``value`` as JSON-able data: bytes as ``{"$bytes": hex}``, containers recursively, anything else as text."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {_BYTES: bytes(value).hex()}
    if isinstance(value, dict):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def from_wire(value: Any) -> Any:
    """Inverse of :func:`to_wire` for keys: ``{"$bytes": hex}`` back to bytes."""
    if isinstance(value, dict) and set(value) == {_BYTES}:
        return bytes.fromhex(str(value[_BYTES]))
    return value


def _key_text(key: Any) -> str:
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="replace")
    return key if isinstance(key, str) else str(key)


class StoreQueries:
    """The query side of one container: answers :class:`QueryStore` commands through ``report``.

    ``find(job, task)`` gives the task's :class:`~sparza.engine.stores.TaskStores`, or None when the task does not
    run here (any more).
    """

    def __init__(self, find: Callable[[str, str], Any], report: Callable[[StoreAnswer], None], *,
                 threads: int = 2) -> None:
        self._find = find
        self._report = report
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sparza-query")
        self._open: dict[tuple[str, str, str], tuple[Path, Any]] = {}
        self._lock = threading.Lock()

    def submit(self, query: QueryStore) -> None:
        """Answer ``query``: a ``get`` that needs no store opened at once in the caller's thread (the container's
        channel reader), anything else in the pool (returns at once). Why: while the task runs, its thread holds
        the GIL, and each hand-over to another thread waits for it (up to the 5 ms switch interval, more on busy
        cores); a get from an open view takes microseconds."""
        if query.op != "get":
            self._pool.submit(self._answer, query)
            return
        try:
            stores = self._stores(query)
        except LookupError as exc:
            self._report(_failed(query, exc))
            return
        view = None if query.live else stores.committed_view(query.store)
        if query.live or view is not None:
            self._answer(query, stores, view)
        else:  # a committed dir to open: in the pool, which finds the task again (it may have left meanwhile)
            self._pool.submit(self._answer, query)

    def _answer(self, query: QueryStore, stores: Any = None, view: tuple[int, Any] | None = None) -> None:
        """Answer ``query`` from ``stores`` (found here when not given), a get first through ``view`` when given
        (the committed view :meth:`submit` found for it)."""
        try:
            value, batch = self._read(query, self._stores(query) if stores is None else stores, view)
            answer = StoreAnswer(query.id, True, to_wire(value), batch)
        except Exception as exc:  # the reader hears what failed; the container goes on
            answer = _failed(query, exc)
        self._report(answer)

    def _stores(self, query: QueryStore) -> Any:
        """The TaskStores of ``query``'s task, holding its store (LookupError when the task or store is not here)."""
        stores = self._find(query.job, query.task)
        if stores is None:
            raise LookupError(f"task '{query.task}' of job {query.job} does not run in this container now")
        if query.store not in stores.handles:
            raise LookupError(f"task '{query.task}' has no store '{query.store}' (stores: "
                              f"{', '.join(stores.handles) or 'none'})")
        return stores

    def _read(self, query: QueryStore, stores: Any, view: tuple[int, Any] | None) -> tuple[Any, int | None]:
        if query.live:
            return _run(_LiveView(stores.handles[query.store]), query), None
        for attempt in range(3):
            if attempt or view is None:
                view = stores.committed_view(query.store) if query.op == "get" else None
            if view is not None:
                try:
                    return _run(view[1], query), view[0]
                except StoreClosedError:
                    continue  # the store closed under the read (its task released, a batch failed): ask again
            committed = stores.committed_dir(query.store)
            if committed is None:
                raise LookupError(f"store '{query.store}' of task '{query.task}' has no commit in this container yet")
            batch, directory = committed
            try:
                with self._reader(query, stores, directory) as store:
                    return _run(store, query), batch
            except OSError:
                if stores.committed_dir(query.store) == committed:
                    raise
                # the next commit replaced the dir under the read: read the new one
        raise LookupError(f"store '{query.store}' of task '{query.task}' kept changing under the read")

    @contextlib.contextmanager
    def _reader(self, query: QueryStore, stores: Any, directory: Path) -> Iterator[Any]:
        key = (query.job, query.task, query.store)
        with self._lock:
            found = self._open.get(key)
            if found is not None and found[0] != directory:
                with contextlib.suppress(Exception):
                    found[1].close()
                found = None
            if found is None:
                found = self._open[key] = (directory, stores.open_committed(query.store, directory))
        yield found[1]

    def close(self) -> None:
        """Close the stores opened for reads and stop the pool."""
        self._pool.shutdown(wait=True)
        with self._lock:
            for _directory, store in self._open.values():
                with contextlib.suppress(Exception):
                    store.close()
            self._open.clear()


class _LiveView:
    """A task's store handle read without touching it (no caching, no flush): get and all only."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def get(self, key: Any) -> Any:
        return self._handle.peek(key)

    def all(self) -> list[tuple[Any, Any]]:
        return list(self._handle.peek_all())


def _failed(query: QueryStore, exc: Exception) -> StoreAnswer:
    return StoreAnswer(query.id, False, error=f"{type(exc).__name__}: {exc}")


def _run(store: Any, query: QueryStore) -> Any:
    if query.op == "get":
        return store.get(from_wire(query.key))
    if query.op == "scan":
        out = []
        for key, value in store.all():
            if query.prefix is None or _key_text(key).startswith(query.prefix):
                out.append([key, value])
                if len(out) >= query.limit:
                    break
        return out
    if query.op == "count":
        return sum(1 for key, _value in store.all() if query.prefix is None or _key_text(key).startswith(query.prefix))
    raise ValueError(f"unknown store query {query.op!r}: get, scan or count")
