"""A blob store in a local directory: the embedded default and the test twin of Azure.

Layout under ``root``: the blob's bytes at ``<root>/<blob id>`` and its state (metadata, TTL
deadline, deletion time) next to it in ``<blob id>.meta.json``. Writes go to a temp file that is
fsynced and renamed, so a crash never leaves a half-written blob under a real name; leftover temp
files are removed by gc.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparza.blobstore.api import (
    BlobInfo,
    BlobNotFoundError,
    BlobSource,
    BlobStoreError,
    BlobStoreManager,
    BlobTarget,
    Clock,
    DeletedError,
    Metadata,
    blob_name_for,
    system_clock_ms,
)
from sparza.host import fsync_dir

__all__ = ["LocalBlobStoreManager"]

_META = ".meta.json"
_TMP = ".sparza-tmp-"
DAY_MS = 86_400_000


class LocalBlobStoreManager(BlobStoreManager):
    """Blobs as files under ``root`` with a JSON sidecar for TTL and tombstones.

    ``ttl_ms`` is the TTL of new blobs; ``clock`` (epoch ms) is injectable so tests can let TTLs
    pass; ``fsync`` makes each put durable before it returns.
    """

    def __init__(self, root: str | Path, *, ttl_ms: int = 30 * DAY_MS, clock: Clock = system_clock_ms,
                 fsync: bool = True) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.fsync = fsync
        self._lock = threading.Lock()  # serialises sidecar read-modify-write

    def __repr__(self) -> str:
        return f"LocalBlobStoreManager({str(self.root)!r})"

    # --- paths -------------------------------------------------------------------------------
    def _path(self, blob_id: str) -> Path:
        parts = blob_id.split("/")
        if not blob_id or any(p in ("", ".", "..") for p in parts) or blob_id.endswith(_META):
            raise BlobStoreError("access", blob_id, "not a valid blob id")
        return self.root.joinpath(*parts)

    def _meta_path(self, blob_id: str) -> Path:
        path = self._path(blob_id)
        return path.with_name(path.name + _META)

    def _read_meta(self, operation: str, blob_id: str) -> dict[str, Any]:
        meta_path = self._meta_path(blob_id)
        if not self._path(blob_id).exists():
            raise BlobNotFoundError(operation, blob_id)
        try:
            result: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
            return result
        except FileNotFoundError:
            raise BlobNotFoundError(operation, blob_id) from None

    def _write_meta(self, blob_id: str, meta: dict[str, Any]) -> None:
        meta_path = self._meta_path(blob_id)
        tmp = meta_path.with_name(f"{_TMP}{os.getpid()}-{threading.get_ident()}-{meta_path.name}")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, meta_path)

    # --- SPI ---------------------------------------------------------------------------------
    def put(self, source: BlobSource, metadata: Metadata) -> str:
        blob_id = blob_name_for(metadata)
        path = self._path(blob_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{_TMP}{path.name}")
        try:
            if isinstance(source, str | Path):
                shutil.copyfile(source, tmp)  # sendfile: no copy through Python
            else:
                with open(tmp, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
            if self.fsync:
                with open(tmp, "rb+") as out:
                    os.fsync(out.fileno())
            # The sidecar first: a blob file without one would never be collected.
            self._write_meta(blob_id, {"metadata": metadata.as_dict(),
                                       "expires_at_ms": self.clock() + self.ttl_ms, "deleted_at_ms": None})
            os.replace(tmp, path)
            if self.fsync:
                fsync_dir(path.parent)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise BlobStoreError("put", blob_id, str(exc)) from exc
        return blob_id

    def get(self, blob_id: str, dest: BlobTarget, metadata: Metadata, get_deleted: bool = False) -> None:
        meta = self._read_meta("get", blob_id)
        if meta.get("deleted_at_ms") is not None and not get_deleted:
            raise DeletedError("get", blob_id)
        try:
            if isinstance(dest, str | Path):
                shutil.copyfile(self._path(blob_id), dest)  # sendfile: no copy through Python
            else:
                with open(self._path(blob_id), "rb") as src:
                    shutil.copyfileobj(src, dest, 1 << 20)
        except FileNotFoundError:
            raise BlobNotFoundError("get", blob_id) from None

    def delete(self, blob_id: str, metadata: Metadata) -> None:
        with self._lock:
            meta = self._read_meta("delete", blob_id)
            if meta.get("deleted_at_ms") is not None:
                raise DeletedError("delete", blob_id, "blob was already deleted")
            meta["deleted_at_ms"] = self.clock()
            self._write_meta(blob_id, meta)

    def remove_ttl(self, blob_id: str, metadata: Metadata) -> None:
        with self._lock:
            meta = self._read_meta("remove_ttl", blob_id)
            if meta.get("deleted_at_ms") is not None:
                raise DeletedError("remove_ttl", blob_id)
            if meta.get("expires_at_ms") is not None:
                meta["expires_at_ms"] = None
                self._write_meta(blob_id, meta)

    def list_blobs(self, prefix: str = "") -> Iterator[BlobInfo]:
        for meta_path in sorted(self.root.rglob("*" + _META)):
            if meta_path.name.startswith(_TMP):
                continue
            blob_path = meta_path.with_name(meta_path.name[: -len(_META)])
            blob_id = blob_path.relative_to(self.root).as_posix()
            if not blob_id.startswith(prefix):
                continue
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            size = blob_path.stat().st_size if blob_path.exists() else 0
            yield BlobInfo(blob_id, size, meta.get("expires_at_ms"), meta.get("deleted_at_ms"))

    def purge(self, blob_id: str) -> int:
        path = self._path(blob_id)
        size = path.stat().st_size if path.exists() else 0
        path.unlink(missing_ok=True)
        self._meta_path(blob_id).unlink(missing_ok=True)
        return size

    def purge_temp_files(self, older_than_ms: int) -> list[str]:
        """Remove temp files (from puts that crashed) last modified before ``older_than_ms``."""
        removed = []
        for tmp in self.root.rglob(_TMP + "*"):
            if tmp.stat().st_mtime * 1000 < older_than_ms:
                tmp.unlink(missing_ok=True)
                removed.append(tmp.relative_to(self.root).as_posix())
        return removed

