"""Reading a stream table's Delta log commit by commit, without loading the whole table.

A consumer at offset ``(v, i)`` needs only commits ``v, v+1, …``: each is one small JSON file
(``_delta_log/<v:020>.json``) naming the files that commit added, per partition, with their row
counts. Parsed commits never change, so they are cached per process and shared by every reader.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from sparza.systems.delta.schema import FILE_COLUMNS, PARTITION_COLUMN, PARTITION_COUNT_PROPERTY
from sparza.systems.delta.settings import StreamLocation
from sparza.systems.delta.storage import storage_errors

__all__ = ["Commit", "DeltaLog", "FileEntry", "io_pool", "log_path"]

_LOG_DIR = "_delta_log"


def log_path(version: int) -> str:
    """The JSON commit file of ``version``, relative to the table root."""
    return f"{_LOG_DIR}/{version:020d}.json"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One data file a commit added: its path (relative to the table), partition and row count."""

    path: str
    partition: int
    rows: int


@dataclass(frozen=True, slots=True)
class Commit:
    """The data files one Delta version added (``dataChange`` adds only), in log order."""

    version: int
    files: tuple[FileEntry, ...]
    rewritten: tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...] = ()
    """Rearrangements without data change (compaction), per partition: (partition, added, removed)."""
    partitions: int | None = None
    """The stream's partition count when this commit set the table's metadata (its creation, or a growth:
    :meth:`~sparza.systems.delta.admin.DeltaSystemAdmin.grow_stream`), else None."""

    _rows: dict[int, int] | None = field(default=None, init=False, repr=False, compare=False)

    def files_for(self, partition: int) -> list[FileEntry]:
        """The files of ``partition``, in the order that defines the rows' offsets."""
        return [f for f in self.files if f.partition == partition]

    def rows_by_partition(self) -> Mapping[int, int]:
        """How many rows this commit added to each partition (counted once: lag and batch caps ask for every task of
        a job, so a thousand tasks would count each commit's files a thousand times a report)."""
        counts = self._rows
        if counts is None:
            counts = {}
            for f in self.files:
                counts[f.partition] = counts.get(f.partition, 0) + f.rows
            object.__setattr__(self, "_rows", counts)  # frozen: the memo is the one field set after construction
        return counts


class _CommitCache:
    """A process-wide LRU of parsed commits keyed by (table uri, version): commits are immutable.

    8,192 commits (a two-file commit takes ~0.7 KB: ~5 MiB): a batch reads the few commits of its range, and a
    worker that lives for days must not keep every commit it ever read (50,000 were ~1.5 MiB an hour per worker
    of the endurance demo, 32 MiB at the cap)."""

    def __init__(self, capacity: int = 8192) -> None:
        self._items: OrderedDict[tuple[str, str, int], Commit] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    def get(self, key: tuple[str, str, int]) -> Commit | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[str, str, int], commit: Commit) -> None:
        with self._lock:
            self._items[key] = commit
            if len(self._items) > self.capacity:
                self._items.popitem(last=False)


_CACHE = _CommitCache()


class DeltaLog:
    """The commits of one stream table, read on demand from its ``_delta_log`` directory."""

    def __init__(self, location: StreamLocation) -> None:
        self.location = location
        self._fs = location.filesystem()
        self._identity = self._table_identity()

    @property
    def identity(self) -> str:
        """Which incarnation of the table the cached knowledge is about (see :meth:`_table_identity`)."""
        return self._identity

    def _table_identity(self) -> str:
        """Which incarnation of the table this is: its first commit file's size and time. A table deleted and
        created again under the same path (a stream re-created, an input "lost" by its store) reuses version
        numbers, so cached commits are keyed by this too, or a long-lived process would read the old ones."""
        import pyarrow.fs as pa_fs

        try:
            with storage_errors(self.location.uri):
                info = self._fs.get_file_info(log_path(0))
        except (FileNotFoundError, OSError):
            return "?"
        if info.type == pa_fs.FileType.NotFound:
            return "-"
        return f"{info.size}:{info.mtime_ns}"

    # --- commits ---------------------------------------------------------------------------
    def commit(self, version: int) -> Commit | None:
        """The commit of ``version``, or None when its JSON file does not exist (not yet, or removed)."""
        key = (self.location.uri, self._identity, version)
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        try:
            with storage_errors(self.location.uri), self._fs.open_input_stream(log_path(version)) as stream:
                data = stream.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return None
            raise
        commit = self._parse(version, data)
        _CACHE.put(key, commit)
        return commit

    def _parse(self, version: int, data: bytes) -> Commit:
        files: list[FileEntry] = []
        rewritten: dict[int, tuple[list[str], list[str]]] = {}
        partitions: int | None = None
        for line in data.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            kind = "add" if "add" in action else ("remove" if "remove" in action else None)
            if kind is None:
                count = ((action.get("metaData") or {}).get("configuration") or {}).get(PARTITION_COUNT_PROPERTY)
                if count is not None and str(count).isdigit():
                    partitions = int(count)
                continue
            body = action[kind]
            part_text = (body.get("partitionValues") or {}).get(PARTITION_COLUMN)
            if part_text is None:
                continue
            path = body["path"]
            path = path if "://" in path else unquote(path)
            if not body.get("dataChange", True):
                # Compaction re-adds rows already counted (dataChange false): not new rows, no offsets.
                added, removed = rewritten.setdefault(int(part_text), ([], []))
                (added if kind == "add" else removed).append(path)
                continue
            if kind == "remove":
                continue
            add = body
            rows = -1
            stats = add.get("stats")
            if stats:
                rows = int(json.loads(stats).get("numRecords", -1))
            if rows < 0:
                rows = self._count_rows(path)
            files.append(FileEntry(path, int(part_text), rows))
        return Commit(version, tuple(files),
                      tuple((p, tuple(a), tuple(r)) for p, (a, r) in sorted(rewritten.items())), partitions)

    def _count_rows(self, path: str) -> int:
        with self._fs.open_input_file(path) as handle:
            return int(pq.ParquetFile(handle).metadata.num_rows)

    # --- versions --------------------------------------------------------------------------
    def present_versions(self) -> list[int]:
        """Versions whose commit JSON exists, ascending (one listing of ``_delta_log``)."""
        import pyarrow.fs as pa_fs

        try:
            with storage_errors(self.location.uri):
                infos = self._fs.get_file_info(pa_fs.FileSelector(_LOG_DIR, allow_not_found=True))
        except FileNotFoundError:
            return []
        versions = []
        for info in infos:
            name = info.path.rsplit("/", 1)[-1]
            stem, dot, ext = name.partition(".")
            if ext == "json" and dot and stem.isdigit() and len(stem) == 20:
                versions.append(int(stem))
        return sorted(versions)

    def checkpoint_files(self) -> dict[int, list[str]]:
        """Version → the checkpoint files of that version in ``_delta_log`` (single or multi-part), relative to the
        table root (one listing)."""
        import pyarrow.fs as pa_fs

        try:
            with storage_errors(self.location.uri):
                infos = self._fs.get_file_info(pa_fs.FileSelector(_LOG_DIR, allow_not_found=True))
        except FileNotFoundError:
            return {}
        out: dict[int, list[str]] = {}
        for info in infos:
            name = info.path.rsplit("/", 1)[-1]
            stem, _, rest = name.partition(".")
            if stem.isdigit() and len(stem) == 20 and rest.startswith("checkpoint.") and rest.endswith(".parquet"):
                out.setdefault(int(stem), []).append(f"{_LOG_DIR}/{name}")
        return out

    def latest_version(self, known: int | None = None) -> int | None:
        """The newest committed version (None: no table). Probes forward from ``known`` when given."""
        identity = self._table_identity()
        if identity != self._identity:
            self._identity = identity
            known = None  # another incarnation of the table: what we knew of the old one says nothing
        if known is None:
            known = self._last_checkpoint()
        if known is None or self.commit(known) is None:
            present = self.present_versions()
            if not present:
                return None
            known = present[-1]
        while self.commit(known + 1) is not None:
            known += 1
        return known

    def last_checkpoint(self) -> int | None:
        """The version of the newest Delta checkpoint (None: none written yet)."""
        return self._last_checkpoint()

    def _last_checkpoint(self) -> int | None:
        """The version of the newest checkpoint (``_delta_log/_last_checkpoint``), a cheap lower bound."""
        try:
            with storage_errors(self.location.uri), self._fs.open_input_stream(f"{_LOG_DIR}/_last_checkpoint") as f:
                return int(json.loads(f.read())["version"])
        except (FileNotFoundError, KeyError, ValueError):
            return None
        except OSError as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return None
            raise

    def commits(self, first: int, last: int | None = None) -> Iterator[Commit]:
        """Commits ``first, first+1, …`` up to ``last`` (inclusive) or until the first missing one.

        On object stores the commit files are fetched ahead in parallel (a growing window), since
        each is one small GET whose latency would otherwise add up over many small commits.
        """
        version = first
        window = 1
        while last is None or version <= last:
            if not self.location.is_remote or window == 1:
                commit = self.commit(version)
                if commit is None:
                    return
                yield commit
                version += 1
                window = 2 if self.location.is_remote else 1
                continue
            stop = version + window if last is None else min(version + window, last + 1)
            fetched = list(io_pool().map(self.commit, range(version, stop)))
            for commit in fetched:
                if commit is None:
                    return
                yield commit
                version += 1
            window = min(window * 2, 32)

    # --- data ------------------------------------------------------------------------------
    def read_file(self, entry: FileEntry) -> pa.Table:
        """The rows of one data file (columns of :data:`FILE_SCHEMA`), in file order."""
        threads = entry.rows >= 2_000   # column decoding in parallel; on tiny files thread start-up costs more
        if not self.location.is_remote:
            with storage_errors(self.location.uri):
                return pq.ParquetFile(os.path.join(self.location.uri, entry.path)).read(columns=FILE_COLUMNS,
                                                                                        use_threads=threads)
        with storage_errors(self.location.uri), self._fs.open_input_file(entry.path) as handle:
            return pq.ParquetFile(handle).read(columns=FILE_COLUMNS, use_threads=threads)


_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The process-wide pool for storage reads (pyarrow and delta-rs release the GIL while waiting)."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=16, thread_name_prefix="sparza-delta-io"))
        return _POOL[0]
