"""Samza's blob-store retry policy: exponential backoff with jitter, bounded by count and time.

Only :class:`~sparza.blobstore.api.RetriableError` is retried; every other error aborts at once
(as Samza's Failsafe policy). Each attempt gets fresh streams: a path source is reopened, a path
target rewritten, and a seekable stream rewound (a non-seekable one cannot be retried).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from sparza.blobstore.api import (
    BlobInfo,
    BlobSource,
    BlobStoreManager,
    BlobTarget,
    Metadata,
    RetriableError,
)
from sparza.config import FLOAT, Int, define_check, define_key

__all__ = ["RetryPolicy", "RetryingBlobStoreManager"]

_PKG = "sparza.blobstore"
_P = "blob.store.retry.policy."
_MAX_RETRIES = define_key(_P + "max.retries", -1, "max retries of one blob operation; -1: bounded by duration only",
                          _PKG, kind=Int(min_value=-1))
_MAX_DURATION = define_key(_P + "max.retry.duration.millis", 900_000, "give up retrying one operation after this "
                           "long", _PKG, kind=Int(min_value=0))
_DELAY = define_key(_P + "backoff.delay.millis", 100, "first backoff delay", _PKG, kind=Int(min_value=0))
_MAX_DELAY = define_key(_P + "backoff.max.delay.millis", 312_500, "largest backoff delay", _PKG, kind=Int(min_value=0))
_FACTOR = define_key(_P + "backoff.delay.factor", 5, "backoff multiplier (100 ms, 500 ms, 2.5 s, ...)", _PKG,
                     kind=FLOAT)
_JITTER = define_key(_P + "jitter.factor", 0.1, "random +/- fraction added to each delay", _PKG, kind=FLOAT)

log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one blob operation is retried (Samza's defaults, as the keys declare them)."""

    max_retries: int = _MAX_RETRIES.get({})
    max_duration_ms: int = _MAX_DURATION.get({})
    delay_ms: int = _DELAY.get({})
    max_delay_ms: int = _MAX_DELAY.get({})
    factor: float = _FACTOR.get({})
    jitter: float = _JITTER.get({})

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> RetryPolicy:
        """The policy from ``blob.store.retry.policy.*``."""
        return cls(max_retries=_MAX_RETRIES.get(config), max_duration_ms=_MAX_DURATION.get(config),
                   delay_ms=_DELAY.get(config), max_delay_ms=_MAX_DELAY.get(config), factor=_FACTOR.get(config),
                   jitter=_JITTER.get(config))

    def delays_ms(self) -> Iterator[float]:
        """The backoff before each retry, without jitter: 100, 500, 2500, ... capped."""
        delay = float(self.delay_ms)
        while True:
            yield min(delay, float(self.max_delay_ms))
            delay *= self.factor

    def call(self, fn: Callable[[], _T], *, describe: str = "blob operation",
             sleep: Callable[[float], None] = time.sleep, monotonic: Callable[[], float] = time.monotonic) -> _T:
        """Run ``fn``, retrying :class:`RetriableError` until the count or duration is used up."""
        start = monotonic()
        delays = self.delays_ms()
        attempt = 0
        while True:
            try:
                return fn()
            except RetriableError as exc:
                attempt += 1
                delay = next(delays)
                delay += delay * self.jitter * (2 * random.random() - 1)
                elapsed_ms = (monotonic() - start) * 1000
                if (0 <= self.max_retries < attempt) or elapsed_ms + delay > self.max_duration_ms:
                    raise
                log.warning("%s failed (attempt %d), retrying in %.0f ms: %s", describe, attempt, delay, exc)
                sleep(delay / 1000.0)


def _rewind(stream: IO[bytes], pos: int | None) -> None:
    if pos is None:
        return
    stream.seek(pos)
    if stream.writable():
        stream.truncate()


def _position(stream: object) -> int | None:
    seekable = getattr(stream, "seekable", None)
    if seekable is not None and seekable():
        return int(stream.tell())  # type: ignore[attr-defined]
    return None


class RetryingBlobStoreManager(BlobStoreManager):
    """Applies a :class:`RetryPolicy` to every operation of ``inner``."""

    def __init__(self, inner: BlobStoreManager, policy: RetryPolicy | None = None, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"RetryingBlobStoreManager({self.inner!r})"

    def __getattr__(self, name: str) -> object:
        # Backend extras (ttl_ms, clock, download_to_file) stay reachable.
        return getattr(self.inner, name)

    def _call(self, fn: Callable[[], _T], describe: str) -> _T:
        return self.policy.call(fn, describe=describe, sleep=self._sleep)

    def put(self, source: BlobSource, metadata: Metadata) -> str:
        pos = None if isinstance(source, str | Path) else _position(source)
        first = [True]

        def attempt() -> str:
            if not first[0] and not isinstance(source, str | Path):
                if pos is None:
                    raise RuntimeError("cannot retry a put from a non-seekable stream")
                source.seek(pos)  # type: ignore[union-attr]
            first[0] = False
            return self.inner.put(source, metadata)

        return self._call(attempt, f"put {metadata.payload_path}")

    def get(self, blob_id: str, dest: BlobTarget, metadata: Metadata, get_deleted: bool = False) -> None:
        pos = None if isinstance(dest, str | Path) else _position(dest)

        def attempt() -> None:
            if not isinstance(dest, str | Path):
                _rewind(dest, pos)  # type: ignore[arg-type]
            self.inner.get(blob_id, dest, metadata, get_deleted)

        self._call(attempt, f"get {blob_id}")

    def delete(self, blob_id: str, metadata: Metadata) -> None:
        self._call(lambda: self.inner.delete(blob_id, metadata), f"delete {blob_id}")

    def remove_ttl(self, blob_id: str, metadata: Metadata) -> None:
        self._call(lambda: self.inner.remove_ttl(blob_id, metadata), f"remove_ttl {blob_id}")

    def list_blobs(self, prefix: str = "") -> Iterator[BlobInfo]:
        return iter(self._call(lambda: list(self.inner.list_blobs(prefix)), f"list {prefix}"))

    def purge(self, blob_id: str) -> int:
        return self._call(lambda: self.inner.purge(blob_id), f"purge {blob_id}")

    def purge_temp_files(self, older_than_ms: int) -> list[str]:
        return self.inner.purge_temp_files(older_than_ms)

    def close(self) -> None:
        self.inner.close()


define_check(_PKG, RetryPolicy.from_config)
