"""Comparing a local checkpoint directory with a snapshot index (Samza's ``DirDiffUtil``).

Files are matched by name. A file is the same when sizes and the owner's r/w/x bits match and,
unless it is an immutable RocksDB file (``*.sst``, ``*.blob``) whose content check is skipped for
speed, its CRC32 matches. Unlike Samza, which skips the checksum of every file over 1 MiB, mutable
files (MANIFEST, OPTIONS, CURRENT, WAL) are always checksummed, so a large MANIFEST rewritten to the
same size is still caught. Timestamps are never compared.
"""

from __future__ import annotations

import os
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from sparza.state.backup.index import DirIndex, FileIndex, FileMetadata

__all__ = [
    "FILES_TO_IGNORE",
    "IMMUTABLE_SUFFIXES",
    "SNAPSHOT_MARKER",
    "DirDiff",
    "are_same_dir",
    "are_same_file",
    "crc32_file",
    "dir_diff",
    "file_metadata",
    "is_ignored",
]

SNAPSHOT_MARKER = "SNAPSHOT-INDEX-ID"
"""File in a checkpoint dir naming the index blob it was uploaded as (or restored from)."""
FILES_TO_IGNORE = frozenset({"LOCK", "LOG", SNAPSHOT_MARKER})
"""Names never backed up or compared: RocksDB's lock file and info log (not part of a checkpoint),
and sparza's snapshot marker."""
IMMUTABLE_SUFFIXES = (".sst", ".blob")
"""RocksDB files that never change once written: the same name and size means the same content."""

_CRC_CHUNK = 4 << 20


def is_ignored(name: str) -> bool:
    """True for files the backup skips (``LOCK``, ``LOG``, ``LOG.old.*``, temp files)."""
    return name in FILES_TO_IGNORE or name.startswith("LOG.old.") or name.startswith(".sparza-tmp-")


def crc32_file(path: str | Path) -> int:
    """CRC32 of the file's bytes (zlib's, as Java's CRC32)."""
    crc = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CRC_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _permissions(mode: int) -> str:
    return stat.filemode(mode)[1:]


def file_metadata(path: str | Path) -> FileMetadata:
    """The :class:`FileMetadata` of a local file."""
    st = os.stat(path)
    return FileMetadata(int(st.st_ctime * 1000), int(st.st_mtime * 1000), st.st_size, _permissions(st.st_mode))


def are_same_file(local: Path, remote: FileIndex, *, compare_immutable_checksums: bool = False) -> bool:
    """True when ``local`` holds the same bytes as ``remote`` by the rules in the module docstring."""
    try:
        st = local.stat()
    except FileNotFoundError:
        return False
    if not local.is_file() or st.st_size != remote.size:
        return False
    if _permissions(st.st_mode)[:3] != remote.metadata.permissions[:3]:
        return False
    if local.name.endswith(IMMUTABLE_SUFFIXES) and not compare_immutable_checksums:
        return True
    return crc32_file(local) == remote.checksum


@dataclass
class DirDiff:
    """What to do to make the remote snapshot equal a local directory (Samza's ``DirDiff``)."""

    dir_name: str
    files_added: list[Path] = field(default_factory=list)
    files_retained: list[FileIndex] = field(default_factory=list)
    files_removed: list[FileIndex] = field(default_factory=list)
    sub_dirs_added: list[DirDiff] = field(default_factory=list)
    sub_dirs_retained: list[DirDiff] = field(default_factory=list)
    sub_dirs_removed: list[DirIndex] = field(default_factory=list)

    def walk_added(self) -> list[Path]:
        """Every local file to upload, recursively."""
        out = list(self.files_added)
        for d in self.sub_dirs_added + self.sub_dirs_retained:
            out += d.walk_added()
        return out

    def walk_retained(self) -> list[FileIndex]:
        """Every remote file kept as is, recursively."""
        out = list(self.files_retained)
        for d in self.sub_dirs_retained:
            out += d.walk_retained()
        return out

    def walk_removed(self) -> list[FileIndex]:
        """Every remote file dropped (removed files and everything in removed sub-dirs)."""
        out = list(self.files_removed)
        for d in self.sub_dirs_retained:
            out += d.walk_removed()
        for removed in self.sub_dirs_removed:
            out += [f for _, f in removed.walk_present()]
        return out

    def counts(self) -> dict[str, int]:
        """Files and sub-dirs to upload / retain / remove, for metrics."""
        return {"files-to-upload": len(self.walk_added()), "files-to-retain": len(self.walk_retained()),
                "files-to-remove": len(self.walk_removed()),
                "sub-dirs-to-upload": len(self.sub_dirs_added), "sub-dirs-to-retain": len(self.sub_dirs_retained),
                "sub-dirs-to-remove": len(self.sub_dirs_removed)}


def _listing(local_dir: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    files: dict[str, Path] = {}
    dirs: dict[str, Path] = {}
    for entry in sorted(local_dir.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            dirs[entry.name] = entry
        elif entry.is_file() and not is_ignored(entry.name):
            files[entry.name] = entry
    return files, dirs


def dir_diff(local_dir: str | Path, remote: DirIndex | None, *, dir_name: str = "") -> DirDiff:
    """The diff that turns ``remote`` (the previous snapshot; None for a first backup) into
    ``local_dir``."""
    local = Path(local_dir)
    remote = remote or DirIndex(dir_name)
    files, dirs = _listing(local)
    diff = DirDiff(dir_name)
    remote_files = {f.file_name: f for f in remote.files_present}
    for name, path in files.items():
        previous = remote_files.get(name)
        if previous is not None and are_same_file(path, previous):
            diff.files_retained.append(previous)
        else:
            diff.files_added.append(path)
            if previous is not None:
                diff.files_removed.append(previous)
    diff.files_removed += [f for name, f in remote_files.items() if name not in files]
    remote_dirs = {d.dir_name: d for d in remote.sub_dirs_present}
    for name, path in dirs.items():
        if name in remote_dirs:
            diff.sub_dirs_retained.append(dir_diff(path, remote_dirs[name], dir_name=name))
        else:
            diff.sub_dirs_added.append(dir_diff(path, None, dir_name=name))
    diff.sub_dirs_removed += [d for name, d in remote_dirs.items() if name not in dirs]
    return diff


def are_same_dir(local_dir: str | Path, remote: DirIndex, *, compare_immutable_checksums: bool = False) -> bool:
    """True when ``local_dir`` has exactly the files and sub-dirs of ``remote`` (ignored names
    aside), each the same by :func:`are_same_file`."""
    local = Path(local_dir)
    if not local.is_dir():
        return False
    files, dirs = _listing(local)
    if set(files) != {f.file_name for f in remote.files_present}:
        return False
    if set(dirs) != {d.dir_name for d in remote.sub_dirs_present}:
        return False
    for f in remote.files_present:
        if not are_same_file(files[f.file_name], f, compare_immutable_checksums=compare_immutable_checksums):
            return False
    return all(are_same_dir(dirs[d.dir_name], d, compare_immutable_checksums=compare_immutable_checksums)
               for d in remote.sub_dirs_present)
