"""Offsets and stream metadata of adjunct streams, through the systems' admins.

The adjunct manager compares offsets (to skip messages a store already holds after a replay) and
reads the newest offsets of a bootstrap stream (to know when its bootstrap is complete). Both come
from the stream's :class:`~sparza.systems.SystemAdmin`, built lazily from config; tests and other
runtimes may pass their own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from sparza.config import Config
from sparza.streams import SystemStream
from sparza.systems import SupportsOffsetKey, SystemAdmin, get_system_factory

__all__ = ["AdminStreamAccess", "StreamAccess"]


class StreamAccess(Protocol):
    """What the adjunct manager needs to know about its input streams."""

    def compare(self, system: str, a: str, b: str) -> int:
        """Negative, zero or positive as offset ``a`` is before, equal to or after ``b``."""
        ...

    def newest_offsets(self, stream: SystemStream) -> dict[int, str | None]:
        """Per partition, the newest offset now (None: the partition is empty)."""
        ...

    def offset_key(self, system: str, offset: str) -> Any:
        """A sort key of ``offset``: keys compare as the offsets do (used to skip applied messages)."""
        ...


class AdminStreamAccess:
    """:class:`StreamAccess` through each system's admin (``systems.<s>.samza.factory``)."""

    def __init__(self, config: Config, admin_for: Callable[[str], SystemAdmin] | None = None) -> None:
        self._config = config
        self._admin_for = admin_for
        self._admins: dict[str, SystemAdmin] = {}
        self._keys: dict[str, Callable[[str], Any]] = {}

    def admin(self, system: str) -> SystemAdmin:
        """The admin of ``system`` (built once)."""
        admin = self._admins.get(system)
        if admin is None:
            if self._admin_for is not None:
                admin = self._admin_for(system)
            else:
                admin = get_system_factory(self._config, system).get_admin(system, self._config)
            self._admins[system] = admin
        return admin

    def compare(self, system: str, a: str, b: str) -> int:
        return self.admin(system).offset_comparator(a, b)

    def offset_key(self, system: str, offset: str) -> Any:
        key_fn = self._keys.get(system)
        if key_fn is None:
            admin = self.admin(system)
            # An admin with a sort key parses each offset once instead of comparing strings pairwise.
            key_fn = admin.offset_key if isinstance(admin, SupportsOffsetKey) else \
                functools.cmp_to_key(admin.offset_comparator)
            self._keys[system] = key_fn
        return key_fn(offset)

    def newest_offsets(self, stream: SystemStream) -> dict[int, str | None]:
        metadata = self.admin(stream.system).get_system_stream_metadata({stream.stream})[stream.stream]
        return {p: m.newest for p, m in metadata.partitions.items()}
