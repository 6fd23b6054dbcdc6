"""Fixtures: a real blob store of each backend (local dir, Azurite) with a manual clock.

Tests that take ``blob_store`` run once per backend, so each behaviour is written once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparza.blobstore import BlobStoreManager, LocalBlobStoreManager, ManualClock
from sparza.devservers.storage import AzuriteProcess

DAY_MS = 86_400_000


@pytest.fixture
def clock() -> ManualClock:
    """A clock tests move by hand."""
    return ManualClock()


def make_blob_store(backend: str, clock: ManualClock, tmp_path: Path, name: str,
                    azurite: AzuriteProcess | None) -> BlobStoreManager:
    """A fresh, empty blob store of ``backend`` (``local`` or ``azure``)."""
    if backend == "local":
        return LocalBlobStoreManager(tmp_path / "blobstore", clock=clock, fsync=False)
    from sparza.blobstore.azure import AzureBlobStoreManager

    assert azurite is not None
    return AzureBlobStoreManager(name, {"azure.storage.connect": azurite.connection_string}, clock=clock,
                                 max_concurrency=2, block_size=64 << 10)


@pytest.fixture(params=["local", "azure"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test."""
    return str(request.param)


@pytest.fixture
def blob_store(backend: str, clock: ManualClock, tmp_path: Path, unique_name: str,
               request: pytest.FixtureRequest) -> Iterator[BlobStoreManager]:
    """A real, empty blob store of each backend, on the manual clock."""
    azurite = request.getfixturevalue("azurite") if backend == "azure" else None
    manager = make_blob_store(backend, clock, tmp_path, unique_name + backend[:2], azurite)
    try:
        yield manager
    finally:
        manager.close()
