"""sparza's own count of its Azure Storage requests (``sparza.azure.requests``) against what Azurite logged serving
them: the same requests, by operation, for each kind of request the clients send and for a small job's commits.

The oracle reads Azurite's access log (method and path of each line, between two marker requests sent by a client
that counts nothing) and names each line by its own plain table, independent of the product's classifier."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from typing import Any

import pytest

from sparza.azure import StorageRequests, blob_operation, table_operation
from sparza.devservers.storage import AzuriteProcess
from sparza.engine.results import BatchStatus
from sparza.metrics import MetricsRegistry
from sparza.testing import TestMessage, TestRunner
from sparza.testing.waiting import eventually

_LINE = re.compile(r'"([A-Z]+) (\S+) HTTP')
_BLOB = {("PUT", ""): "put-blob", ("GET", ""): "get-blob", ("HEAD", ""): "get-blob-properties",
         ("DELETE", ""): "delete-blob", ("PUT", "block"): "put-block", ("PUT", "blocklist"): "put-block-list",
         ("PUT", "tags"): "set-blob-tags", ("GET", "tags"): "get-blob-tags", ("PUT", "metadata"): "set-blob-metadata",
         ("PUT", "lease"): "lease-blob"}
_CONTAINER = {("PUT", ""): "create-container", ("GET", "list"): "list-blobs", ("GET", ""): "get-container-properties"}
_ENTITY = {"POST": "insert-entity", "GET": "query-entities", "PATCH": "merge-entity", "PUT": "update-entity",
           "DELETE": "delete-entity"}


def _logged_operation(method: str, path: str) -> str:
    """What a line of Azurite's log is, by method and path (a lease's action is not in the log: ``lease-blob``)."""
    where, _, query = path.partition("?")
    params = dict(p.partition("=")[::2] for p in query.split("&") if p)
    if where.endswith("/Tables"):
        return "create-table"
    if where.endswith("/$batch"):
        return "table-batch"
    if "(" in where.rsplit("/", 1)[-1] or (method == "POST" and not params):
        return _ENTITY[method]
    if params.get("restype") == "container":
        return _CONTAINER[(method, params.get("comp", ""))]
    return _BLOB[(method, params.get("comp", ""))]


class _Log:
    """Azurite's request log between two marks."""

    def __init__(self, azurite: AzuriteProcess) -> None:
        self.azurite = azurite
        self.client = azurite.account.blob_service_client(retry_total=0)  # counts nothing: its own requests

    def mark(self) -> int:
        """Send a marker request and return the log's line number of it, once logged."""
        from azure.core.exceptions import ResourceNotFoundError

        name = f"marker-{uuid.uuid4().hex}"
        try:
            self.client.get_container_client(name).get_container_properties()
        except ResourceNotFoundError:
            pass

        def line() -> int | None:
            lines = self.azurite.log_path.read_text(errors="replace").splitlines()
            return next((i + 1 for i, text in enumerate(lines) if name in text), None)

        return eventually(line, 10, 0.02, f"Azurite never logged the marker {name}") - 1

    def between(self, start: int, end: int) -> Counter[str]:
        lines = self.azurite.log_path.read_text(errors="replace").splitlines()[start + 1:end]
        found = [m for m in map(_LINE.search, lines) if m is not None]
        return Counter(_logged_operation(m.group(1), m.group(2)) for m in found)


def _counted(registry: MetricsRegistry) -> Counter[str]:
    """The product's counts by operation over every ``storage.*`` group, lease actions folded as the log shows them."""
    out: Counter[str] = Counter()
    total = 0
    for group, metrics in registry.snapshot().items():
        if not group.startswith("storage."):
            continue
        for name, value in metrics.items():
            if name == "storage-requests":
                total += value
            else:
                out["lease-blob" if name.startswith("lease-blob-") else name] += value
    assert total == sum(out.values())  # the total of each group is the sum of its operations
    return +out


@pytest.mark.azurite
def test_each_kind_of_request_is_counted_once_by_its_operation(azurite_with_request_log: AzuriteProcess) -> None:
    log = _Log(azurite_with_request_log)
    account = azurite_with_request_log.account
    registry = MetricsRegistry()
    requests = StorageRequests(registry, "test")
    start = log.mark()
    container = account.blob_service_client(requests=requests, max_single_put_size=1024,
                                            max_block_size=1024).get_container_client(f"c{uuid.uuid4().hex[:12]}")
    container.create_container()
    blob = container.get_blob_client("x")
    blob.upload_blob(b"a" * 3000, tags={"k": "v"})  # three blocks and their list
    container.get_blob_client("y").upload_blob(b"small")
    blob.get_blob_tags()
    blob.set_blob_tags({})
    blob.set_blob_metadata({"a": "b"})
    blob.get_blob_properties()
    blob.download_blob().readall()
    lease = blob.acquire_lease(15)
    lease.renew()
    lease.release()
    list(container.list_blobs(include=["tags", "metadata"]))
    blob.delete_blob()
    table = account.table_service_client(requests=requests).create_table(f"t{uuid.uuid4().hex[:12]}")
    table.create_entity({"PartitionKey": "p", "RowKey": "r", "v": 1})
    table.upsert_entity({"PartitionKey": "p", "RowKey": "r", "v": 2})
    list(table.query_entities("PartitionKey eq 'p'"))
    table.get_entity("p", "r")
    table.submit_transaction([("upsert", {"PartitionKey": "p", "RowKey": "s"})])
    table.delete_entity("p", "r")
    seen = log.between(start, log.mark())
    counted = _counted(registry)
    assert counted == seen
    assert counted["put-block"] == 3 and counted["lease-blob"] == 3 and counted["query-entities"] == 2
    ops = registry.snapshot()["storage.test"]
    assert (ops["lease-blob-acquire"], ops["lease-blob-renew"], ops["lease-blob-release"]) == (1, 1, 1)


def test_requests_on_an_account_endpoint_are_named_by_method_query_and_headers() -> None:
    blob = "https://acct.blob.core.windows.net/c/job-1/Partition_0/counts/000012.sst.ab12"
    assert blob_operation("PUT", blob, {}) == "put-blob"
    assert blob_operation("PUT", blob, {"x-ms-copy-source": "https://elsewhere"}) == "copy-blob"
    assert blob_operation("PUT", blob + "?comp=lease", {"X-MS-Lease-Action": "break"}) == "lease-blob-break"
    assert blob_operation("PUT", "https://acct.blob.core.windows.net/c?restype=container&comp=lease",
                          {"x-ms-lease-action": "acquire"}) == "lease-container-acquire"
    assert blob_operation("GET", "https://acct.blob.core.windows.net/?comp=list", {}) == "list-containers"
    assert blob_operation("POST", "https://acct.blob.core.windows.net/c?restype=container&comp=batch", {}) \
        == "blob-batch"
    assert blob_operation("GET", blob + "?comp=tags&snapshot=x", {}) == "get-blob-tags"
    table = "https://acct.table.core.windows.net"
    assert table_operation("POST", f"{table}/Tables", {}) == "create-table"
    assert table_operation("DELETE", f"{table}/Tables('t')", {}) == "delete-table"
    assert table_operation("PUT", f"{table}/t(PartitionKey='p',RowKey='r')", {}) == "update-entity"
    assert table_operation("MERGE", f"{table}/t(PartitionKey='p',RowKey='r')", {}) == "merge-entity"
    assert table_operation("POST", f"{table}/$batch", {}) == "table-batch"


def test_the_summary_says_requests_per_task_commit_and_per_second() -> None:
    from sparza.runtime.driver.report import describe_storage_requests

    assert describe_storage_requests(1230, 500, 30.0) == "1,230 storage requests (2.46 per task-commit, 41.0/s)"
    assert describe_storage_requests(12, 0, 2.0) == "12 storage requests (6.0/s)"
    assert describe_storage_requests(0, 10, 1.0) == ""


class _Count:
    """A keyed count in the RocksDB store ``counts`` (backed up to the blob store)."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        key = envelope.key.decode()
        if envelope.message != b"read":
            self.store.put(key, (self.store.get(key) or 0) + 1)


def _azure_runner(azurite: AzuriteProcess, work_dir: Any, **extra: str) -> TestRunner:
    """A keyed count whose store is backed up to, and whose task checkpoints are kept in, Azurite."""
    container = f"c{uuid.uuid4().hex[:12]}"

    class AzureRunner(TestRunner):
        def _final_values(self) -> dict[str, str]:
            values = super()._final_values()
            values.update({"blob.store.manager.factory": "azure", "blob.store.azure.container": container,
                           "azure.storage.connect": azurite.connection_string})
            return values

    config = {"stores.counts.factory": "rocksdb", "stores.counts.key.serde": "string",
              "stores.counts.msg.serde": "json", "stores.counts.backup.factories": "blobstore", **extra}
    return AzureRunner.of(_Count, config, work_dir=work_dir)


def _batch(runner: TestRunner, value: bytes, keys: int) -> int:
    """Run one batch of ``keys`` messages a task; returns the task-commits it made."""
    runner.add_input("mem.events", {p: [TestMessage(value, key=f"k{p}-{k}".encode(), partition=p)
                                        for k in range(keys)] for p in range(2)})
    report = runner.run_batch()
    return sum(1 for results in report.results.values() for r in results if r.status is BatchStatus.COMMITTED)


@pytest.mark.azurite
def test_a_jobs_commits_are_counted_as_azurite_served_them(azurite_with_request_log: AzuriteProcess,
                                                           tmp_path: Any) -> None:
    azurite = azurite_with_request_log
    log = _Log(azurite)
    start = log.mark()
    with _azure_runner(azurite, tmp_path) as runner:
        runner.add_input("mem.events", partitions=2)
        for i in range(4):  # a load, changes, and a commit that only reads
            _batch(runner, b"read" if i == 3 else b"count", 20 * (i + 1))
        counted = _counted(runner.metrics())
        seen = log.between(start, log.mark())
        by_scope = {g: m["storage-requests"] for g, m in runner.metrics().snapshot().items()
                    if g.startswith("storage.")}
    assert counted == seen, by_scope
    assert seen["put-blob"] >= 8 and set(by_scope) >= {"storage.store.counts", "storage.checkpoints"}, by_scope


@pytest.mark.azurite
def test_a_commit_that_changed_nothing_writes_its_checkpoint_and_nothing_else(
        azurite_with_request_log: AzuriteProcess, tmp_path: Any) -> None:
    with _azure_runner(azurite_with_request_log, tmp_path, **{"job.drain-monitor.poll.interval.ms": "5000"}) as runner:
        runner.add_input("mem.events", partitions=2)
        for i in range(3):
            _batch(runner, b"count", 20 * (i + 1))
        before = runner.metrics().snapshot()
        # Ten commits per task that only read: 10 s of the runner's clock.
        commits = sum(_batch(runner, b"read", 20) for _ in range(10))
        after = runner.metrics().snapshot()

    def grew(group: str) -> dict[str, int]:
        then = before.get(group, {})
        return {n: v - then.get(n, 0) for n, v in after.get(group, {}).items() if v != then.get(n, 0)}

    assert commits == 20
    scopes = {g for g in after if g.startswith("storage.") and grew(g)}
    assert scopes == {"storage.checkpoints", "storage.drain"}, {g: grew(g) for g in scopes}
    assert grew("storage.checkpoints") == {"put-blob": 20, "storage-requests": 20}  # one write per task-commit
    # The driver reads the drain request every poll interval of the runner's clock (1 s a batch), not every round.
    assert grew("storage.drain") == {"get-blob": 2, "storage-requests": 2}
