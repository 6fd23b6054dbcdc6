"""A fault-injecting wrapper around a real blob-store manager, for tests and chaos drills.

It never imitates a store: every call that is not failed goes to the wrapped manager. Faults are
rules matched by operation and blob/payload path, failing the first N matching calls (or all) with
a chosen error, before or after the real call (``after=True`` models "the write landed but the
reply was lost"). Calls are recorded so tests can assert what happened.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sparza.blobstore.api import (
    BlobInfo,
    BlobSource,
    BlobStoreManager,
    BlobTarget,
    Metadata,
    RetriableError,
)
from sparza.clock import ManualClock  # re-exported: its home is sparza.clock

__all__ = ["Fault", "FaultInjectingBlobStoreManager", "InjectedCrash", "ManualClock"]


class InjectedCrash(Exception):
    """Stands for the process dying mid-operation: no sparza code catches it."""


@dataclass
class Fault:
    """Fail ``times`` calls (-1: every call) of ``operation`` whose blob id or payload path matches
    ``pattern`` (fnmatch), raising ``error()``; after the real call when ``after``."""

    operation: str
    pattern: str = "*"
    times: int = 1
    error: Callable[[], BaseException] = field(default=lambda: RetriableError("injected", None, "injected fault"))
    after: bool = False
    fired: int = 0


class FaultInjectingBlobStoreManager(BlobStoreManager):
    """Wraps ``inner``; ``fail(...)`` adds a rule, ``calls`` lists ``(operation, id or path)``."""

    def __init__(self, inner: BlobStoreManager) -> None:
        self.inner = inner
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def fail(self, operation: str, pattern: str = "*", times: int = 1,
             error: Callable[[], BaseException] | None = None, after: bool = False) -> Fault:
        """Add a fault rule and return it (its ``fired`` count shows how often it hit)."""
        fault = Fault(operation, pattern, times, error or (lambda: RetriableError(operation, None, "injected")),
                      after)
        with self._lock:
            self.faults.append(fault)
        return fault

    def crash(self, operation: str, pattern: str = "*", after: bool = False) -> Fault:
        """Make the next matching call raise :class:`InjectedCrash` (a simulated process death)."""
        return self.fail(operation, pattern, 1, lambda: InjectedCrash(f"crash in {operation} {pattern}"), after)

    def clear(self) -> None:
        """Remove every fault rule."""
        with self._lock:
            self.faults.clear()

    def _check(self, operation: str, subject: str, after: bool) -> None:
        with self._lock:
            if not after:
                self.calls.append((operation, subject))
            for fault in self.faults:
                if fault.operation != operation or fault.after != after:
                    continue
                if not fnmatch.fnmatchcase(subject, fault.pattern):
                    continue
                if fault.times != -1 and fault.fired >= fault.times:
                    continue
                fault.fired += 1
                raise fault.error()

    def _run(self, operation: str, subject: str, fn: Callable[[], object]) -> object:
        self._check(operation, subject, False)
        result = fn()
        self._check(operation, subject, True)
        return result

    def put(self, source: BlobSource, metadata: Metadata) -> str:
        return str(self._run("put", metadata.payload_path, lambda: self.inner.put(source, metadata)))

    def get(self, blob_id: str, dest: BlobTarget, metadata: Metadata, get_deleted: bool = False) -> None:
        self._run("get", blob_id, lambda: self.inner.get(blob_id, dest, metadata, get_deleted))

    def delete(self, blob_id: str, metadata: Metadata) -> None:
        self._run("delete", blob_id, lambda: self.inner.delete(blob_id, metadata))

    def remove_ttl(self, blob_id: str, metadata: Metadata) -> None:
        self._run("remove_ttl", blob_id, lambda: self.inner.remove_ttl(blob_id, metadata))

    def list_blobs(self, prefix: str = "") -> Iterator[BlobInfo]:
        return self.inner.list_blobs(prefix)

    def purge(self, blob_id: str) -> int:
        return self.inner.purge(blob_id)

    def purge_temp_files(self, older_than_ms: int) -> list[str]:
        return self.inner.purge_temp_files(older_than_ms)

    def close(self) -> None:
        self.inner.close()
