"""File- and directory-level transfers between a local directory and a blob store (Samza's
``BlobStoreUtil``): parallel uploads of a :class:`DirDiff`, parallel restores of a
:class:`DirIndex` (multi-blob files written in offset order, fsynced), TTL removal and deletes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.blobstore.api import BlobNotFoundError, BlobStoreManager, DeletedError, Metadata
from sparza.host import fsync_dir
from sparza.state.backup.diff import DirDiff, crc32_file, file_metadata
from sparza.state.backup.errors import ChecksumMismatchError, SnapshotUnavailableError
from sparza.state.backup.index import DirIndex, FileBlob, FileIndex

__all__ = ["FileSlice", "SnapshotTransfer", "TransferStats"]

log = logging.getLogger(__name__)


class FileSlice(io.RawIOBase):
    """A read-only, seekable window ``[offset, offset+length)`` of a file: one chunk's upload
    stream. Seeking back (on a retry) re-reads from the file, so every attempt gets a fresh stream."""

    def __init__(self, path: Path, offset: int, length: int) -> None:
        super().__init__()
        self._fh: io.BufferedReader = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._offset = offset
        self._length = length
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = max(0, min(self._length, base + pos))
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._length - self._pos)
        if want <= 0:
            return 0
        self._fh.seek(self._offset + self._pos)
        n = self._fh.readinto(view[:want]) or 0
        self._pos += n
        return n

    def __len__(self) -> int:
        return self._length

    def close(self) -> None:
        self._fh.close()
        super().close()


@dataclass
class TransferStats:
    """Files and bytes moved by one operation."""

    files: int = 0
    bytes: int = 0
    seconds: float = 0.0


class SnapshotTransfer:
    """Moves snapshot files with ``threads`` parallel workers; big files go in ``chunk_size`` blobs.

    ``base`` is the metadata every blob carries (job, task, store); ``payload_path`` is set per file.
    """

    def __init__(self, manager: BlobStoreManager, executor: ThreadPoolExecutor, *, chunk_size: int) -> None:
        self.manager = manager
        self.executor = executor
        self.chunk_size = max(1, chunk_size)

    # --- upload ------------------------------------------------------------------------------
    def put_file(self, path: Path, rel_path: str, base: Metadata) -> FileIndex:
        """Upload one file (one blob per ``chunk_size`` bytes); the index entry carries its CRC32."""
        meta = file_metadata(path)
        checksum = crc32_file(path)  # also warms the page cache for the upload below
        size = meta.size
        blobs: list[FileBlob] = []
        offset = 0
        while True:
            length = min(self.chunk_size, size - offset)
            chunk_meta = Metadata(rel_path if size <= self.chunk_size else f"{rel_path}.part{offset}",
                                  length, base.job_name, base.job_id, base.task_name, base.store_name)
            if offset == 0 and size <= self.chunk_size:
                blob_id = self.manager.put(path, chunk_meta)
            else:
                with FileSlice(path, offset, length) as stream:
                    blob_id = self.manager.put(stream, chunk_meta)  # type: ignore[arg-type]
            blobs.append(FileBlob(blob_id, offset))
            offset += length
            if offset >= size:
                break
        if os.stat(path).st_size != size or crc32_file(path) != checksum:
            # A checkpoint file must not change while it is uploaded; if it did, the blob is unusable.
            raise ChecksumMismatchError(str(path), checksum, crc32_file(path), size, os.stat(path).st_size)
        return FileIndex(path.name, tuple(blobs), meta, checksum)

    def put_dir(self, diff: DirDiff, local_dir: Path, base: Metadata, *,
                on_file: Callable[[FileIndex], None] | None = None) -> DirIndex:
        """Upload every added file of ``diff`` in parallel and return the new :class:`DirIndex`."""
        futures: dict[str, Future[FileIndex]] = {}

        def submit(d: DirDiff, root: Path, prefix: str) -> None:
            for path in d.files_added:
                rel = prefix + path.name
                futures[rel] = self.executor.submit(self.put_file, path, rel, base)
            for sub in d.sub_dirs_added + d.sub_dirs_retained:
                submit(sub, root / sub.dir_name, prefix + sub.dir_name + "/")

        submit(diff, local_dir, "")
        uploaded: dict[str, FileIndex] = {}
        errors: list[BaseException] = []
        for rel, fut in futures.items():
            try:
                uploaded[rel] = fut.result()
                if on_file is not None:
                    on_file(uploaded[rel])
            except BaseException as exc:  # collect all, raise the first: no future left running
                errors.append(exc)
        if errors:
            raise errors[0]

        def build(d: DirDiff, prefix: str) -> DirIndex:
            present = [uploaded[prefix + p.name] for p in d.files_added] + d.files_retained
            subs = [build(s, prefix + s.dir_name + "/") for s in d.sub_dirs_added + d.sub_dirs_retained]
            return DirIndex(d.dir_name, tuple(sorted(present, key=lambda f: f.file_name)),
                            tuple(d.files_removed), tuple(sorted(subs, key=lambda s: s.dir_name)),
                            tuple(d.sub_dirs_removed))

        return build(diff, "")

    # --- restore -----------------------------------------------------------------------------
    def get_file(self, file: FileIndex, dest: Path, base: Metadata, rel_path: str, *,
                 get_deleted: bool, on_deleted: Callable[[str], None]) -> int:
        """Write ``file`` to ``dest`` from its blobs in offset order, fsync it and verify size and CRC."""
        if len(file.blobs) == 1 and file.blobs[0].offset == 0:
            # One blob: let the manager write the path itself (a local store copies with sendfile).
            self._get_single(file.blobs[0].blob_id, dest, base, rel_path, get_deleted=get_deleted,
                             on_deleted=on_deleted)
            with open(dest, "rb+") as out:
                os.fsync(out.fileno())
            return self._verify(file, dest, rel_path)
        with open(dest, "wb") as out:
            for blob in sorted(file.blobs, key=lambda b: b.offset):
                if out.tell() != blob.offset:
                    raise ChecksumMismatchError(rel_path, file.checksum, 0, file.size, out.tell())
                meta = Metadata(rel_path, -1, base.job_name, base.job_id, base.task_name, base.store_name)
                try:
                    self.manager.get(blob.blob_id, out, meta, get_deleted)
                except BlobNotFoundError as exc:
                    raise SnapshotUnavailableError(blob.blob_id, f"file blob of {rel_path}") from exc
                except DeletedError:
                    # SAMZA-2787: read the tombstoned blob; the caller re-uploads a fresh snapshot.
                    on_deleted(blob.blob_id)
                    out.seek(blob.offset)
                    out.truncate()
                    self.manager.get(blob.blob_id, out, meta, True)
            out.flush()
            os.fsync(out.fileno())
        return self._verify(file, dest, rel_path)

    def _get_single(self, blob_id: str, dest: Path, base: Metadata, rel_path: str, *, get_deleted: bool,
                    on_deleted: Callable[[str], None]) -> None:
        meta = Metadata(rel_path, -1, base.job_name, base.job_id, base.task_name, base.store_name)
        try:
            self.manager.get(blob_id, dest, meta, get_deleted)
        except BlobNotFoundError as exc:
            raise SnapshotUnavailableError(blob_id, f"file blob of {rel_path}") from exc
        except DeletedError:
            on_deleted(blob_id)
            self.manager.get(blob_id, dest, meta, True)

    def _verify(self, file: FileIndex, dest: Path, rel_path: str) -> int:
        size = dest.stat().st_size
        actual = crc32_file(dest)
        if size != file.size or actual != file.checksum:
            raise ChecksumMismatchError(rel_path, file.checksum, actual, file.size, size)
        with contextlib.suppress(ValueError, OSError):
            mode = _mode_from_permissions(file.metadata.permissions)
            os.chmod(dest, mode)
        return size

    def restore_dir(self, index: DirIndex, dest: Path, base: Metadata, *, get_deleted: bool = False,
                    on_deleted: Callable[[str], None], on_file: Callable[[int], None] | None = None) -> TransferStats:
        """Recreate ``index`` under ``dest`` (created; must be empty), files in parallel, sub-dirs
        (empty ones too) recursively; every file is checksum-verified."""
        start = time.perf_counter()
        dirs: list[Path] = []
        jobs: list[tuple[FileIndex, Path, str]] = []

        def plan(d: DirIndex, target: Path, prefix: str) -> None:
            target.mkdir(parents=True, exist_ok=True)
            dirs.append(target)
            for f in d.files_present:
                jobs.append((f, target / f.file_name, prefix + f.file_name))
            for sub in d.sub_dirs_present:
                plan(sub, target / sub.dir_name, prefix + sub.dir_name + "/")

        plan(index, dest, "")
        futures = [self.executor.submit(self.get_file, f, path, base, rel, get_deleted=get_deleted,
                                        on_deleted=on_deleted) for f, path, rel in jobs]
        stats = TransferStats()
        errors: list[BaseException] = []
        for fut in futures:
            try:
                n = fut.result()
                stats.files += 1
                stats.bytes += n
                if on_file is not None:
                    on_file(n)
            except BaseException as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        for d in reversed(dirs):
            fsync_dir(d)
        stats.seconds = time.perf_counter() - start
        return stats

    # --- cleanup -----------------------------------------------------------------------------
    def for_each(self, op: Callable[[str], None], blob_ids: Iterable[str], *, ignore_deleted: bool) -> int:
        """Run ``op`` on every blob id in parallel; returns how many succeeded. ``DeletedError`` is
        ignored when ``ignore_deleted`` (a delete repeated after a crash)."""
        futures = [self.executor.submit(op, blob_id) for blob_id in dict.fromkeys(blob_ids)]
        done = 0
        errors: list[BaseException] = []
        for fut in futures:
            try:
                fut.result()
                done += 1
            except DeletedError:
                if not ignore_deleted:
                    errors.append(sys.exc_info()[1])  # type: ignore[arg-type]
            except BaseException as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        return done


def _mode_from_permissions(text: str) -> int:
    if len(text) != 9:
        raise ValueError(text)
    mode = 0
    for i, ch in enumerate(text):
        if ch != "-":
            mode |= 1 << (8 - i)
    return mode
