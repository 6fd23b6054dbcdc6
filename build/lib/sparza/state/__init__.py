"""Task state: local key-value stores (:mod:`sparza.state.kv`), their incremental backup to a blob
store (:mod:`sparza.state.backup`, SEP-003) and adjunct stores (:mod:`sparza.state.adjunct`, SEP-002).

Subpackages are imported on demand so that using one (say, the in-memory store) does not load the
others' dependencies.
"""

from __future__ import annotations

__all__: list[str] = []
