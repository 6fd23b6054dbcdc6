"""Building blob stores from config, and the retry policy."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sparza.blobstore import (
    BlobStoreError,
    DeletedError,
    FaultInjectingBlobStoreManager,
    LocalBlobStoreManager,
    ManualClock,
    Metadata,
    RetriableError,
    RetryingBlobStoreManager,
    RetryPolicy,
    blob_store_manager_from_config,
    collect_garbage,
)
from sparza.errors import ConfigError


def test_local_is_the_default(tmp_path: Path) -> None:
    manager = blob_store_manager_from_config({"blob.store.local.root": str(tmp_path / "b"),
                                              "blob.store.ttl.days": "2"})
    assert isinstance(manager, RetryingBlobStoreManager) and isinstance(manager.inner, LocalBlobStoreManager)
    assert manager.inner.ttl_ms == 2 * 86_400_000 and manager.inner.root == tmp_path / "b"
    bare = blob_store_manager_from_config({"blob.store.local.root": str(tmp_path / "b")}, retry=False)
    assert isinstance(bare, LocalBlobStoreManager)


def test_azure_from_config(azurite, unique_name: str) -> None:
    from sparza.blobstore.azure import AzureBlobStoreManager

    manager = blob_store_manager_from_config({"blob.store.manager.factory": "azure",
                                              "blob.store.azure.container": unique_name,
                                              "azure.storage.connect": azurite.connection_string})
    try:
        assert isinstance(manager.inner, AzureBlobStoreManager)
        blob_id = manager.put(io.BytesIO(b"x"), Metadata("f"))
        out = io.BytesIO()
        manager.get(blob_id, out, Metadata("f"))
        assert out.getvalue() == b"x"
    finally:
        manager.close()


@pytest.mark.parametrize(("config", "key"), [
    ({"blob.store.manager.factory": "s3"}, "blob.store.manager.factory"),
    ({"blob.store.manager.factory": "azure"}, "blob.store.azure.container"),
    ({"blob.store.ttl.days": "0"}, "blob.store.ttl.days"),
    ({"blob.store.retry.policy.max.retries": "-2"}, "blob.store.retry.policy.max.retries"),
    ({"blob.store.retry.policy.backoff.delay.factor": "fast"}, "blob.store.retry.policy.backoff.delay.factor"),
])
def test_bad_config_names_the_key(tmp_path: Path, config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        blob_store_manager_from_config({"blob.store.local.root": str(tmp_path), **config})


def test_retry_policy_defaults_are_samzas() -> None:
    policy = RetryPolicy.from_config({})
    assert (policy.max_retries, policy.max_duration_ms, policy.delay_ms, policy.max_delay_ms, policy.factor,
            policy.jitter) == (-1, 900_000, 100, 312_500, 5.0, 0.1)
    delays = policy.delays_ms()
    assert [next(delays) for _ in range(8)] == [100, 500, 2500, 12500, 62500, 312500, 312500, 312500]


def test_retry_is_bounded_by_duration() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    def always() -> None:
        raise RetriableError("get", "b", "timeout")

    policy = RetryPolicy(max_retries=-1, max_duration_ms=3000, delay_ms=100, factor=5, jitter=0)
    with pytest.raises(RetriableError):
        policy.call(always, sleep=sleep, monotonic=lambda: now[0])
    assert sleeps == [0.1, 0.5]  # 100 + 500 ms; the next (2.5 s) would pass 3 s


def test_only_retriable_errors_are_retried() -> None:
    calls = []

    def deleted() -> None:
        calls.append(1)
        raise DeletedError("get", "b")

    with pytest.raises(DeletedError):
        RetryPolicy(delay_ms=0).call(deleted, sleep=lambda s: None)
    assert len(calls) == 1


def test_retried_put_from_a_stream_rewinds_it(tmp_path: Path) -> None:
    real = LocalBlobStoreManager(tmp_path, fsync=False)
    faulty = FaultInjectingBlobStoreManager(real)
    faulty.fail("put", times=2, after=True)  # the bytes landed twice, the replies were lost
    retrying = RetryingBlobStoreManager(faulty, RetryPolicy(delay_ms=0), sleep=lambda s: None)
    blob_id = retrying.put(io.BytesIO(b"payload"), Metadata("f"))
    out = io.BytesIO(b"junk that must go")
    faulty.fail("get", times=1, after=True)  # first attempt wrote the bytes, then failed
    retrying.get(blob_id, out, Metadata("f"))
    assert out.getvalue() == b"payload"
    assert len(list(real.list_blobs())) == 3  # two orphans, each with a TTL


def test_non_seekable_stream_is_not_retried_blindly(tmp_path: Path) -> None:
    class Pipe(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:
            return 0

    faulty = FaultInjectingBlobStoreManager(LocalBlobStoreManager(tmp_path, fsync=False))
    faulty.fail("put", times=1)
    retrying = RetryingBlobStoreManager(faulty, RetryPolicy(delay_ms=0), sleep=lambda s: None)
    with pytest.raises(RuntimeError, match="non-seekable"):
        retrying.put(Pipe(), Metadata("f"))


def test_local_gc_removes_temp_files_of_crashed_puts(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=int(__import__("time").time() * 1000))
    store = LocalBlobStoreManager(tmp_path, clock=clock, fsync=False)
    (tmp_path / "job-1").mkdir()
    leftover = tmp_path / "job-1" / ".sparza-tmp-x.sst.abc"
    leftover.write_bytes(b"half")
    # through the wrappers a configured store comes in (retries, fault injection), as sparza gc sees it
    wrapped = RetryingBlobStoreManager(FaultInjectingBlobStoreManager(store))
    assert collect_garbage(wrapped, clock=clock).temp_files == []  # could still be in flight
    clock.advance(hours=2)
    assert collect_garbage(wrapped, clock=clock, dry_run=True).temp_files == []  # a dry run removes nothing
    assert leftover.exists()
    assert collect_garbage(wrapped, clock=clock).temp_files == ["job-1/.sparza-tmp-x.sst.abc"]
    assert not leftover.exists()


def test_blob_store_error_carries_operation_and_id() -> None:
    err = BlobStoreError("put", "a/b", "403")
    assert (err.operation, err.blob_id) == ("put", "a/b") and "403" in str(err)
