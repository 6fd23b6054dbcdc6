"""Fixtures of the adjunct-store tests: real Delta streams, real RocksDB, real blob stores."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Helper modules (harness, extractor factories, task classes named by dotted path) must be
# importable here and in Spark's Python workers.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)

from adjunct_harness import AdjunctHarness, BatchFeeder  # noqa: E402

from sparza.blobstore import BlobStoreManager, LocalBlobStoreManager  # noqa: E402


@pytest.fixture
def local_blob_store(work_dir: Path) -> Iterator[BlobStoreManager]:
    """A real blob store in a local directory."""
    store = LocalBlobStoreManager(work_dir / "blobstore", fsync=False)
    yield store
    store.close()


@pytest.fixture
def harness(work_dir: Path, local_blob_store: BlobStoreManager) -> AdjunctHarness:
    """Delta streams under the test's dir and the local blob store."""
    return AdjunctHarness(work_dir, local_blob_store)


@pytest.fixture
def feeder(harness: AdjunctHarness) -> BatchFeeder:
    """A fresh batch feeder."""
    return BatchFeeder(harness)
