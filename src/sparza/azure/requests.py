"""Counting the Azure Storage requests sparza sends, by operation, at the one place each client is built.

A :class:`StorageRequests` is handed to :meth:`~sparza.azure.StorageAccount.blob_service_client` or
:meth:`~sparza.azure.StorageAccount.table_service_client`; the client then calls it for every request it sends,
each attempt of a retried request too (the SDKs' ``raw_request_hook``: their request-hook policies sit after the
retry policy). What a request is (:func:`blob_operation`, :func:`table_operation`) is read from the request object
the SDK hands over, its method, URL query and headers, and named as Azure's price list names it (``put-blob``,
``get-blob-tags``, ``lease-blob-renew``, ``query-entities``...).

The counts go to the registry group ``storage.<scope>`` (``storage.store.<store>``, ``storage.blobstore``,
``storage.checkpoints``, ``storage.system.<system>``, ``storage.coordination``...): a counter per operation and
``storage-requests``, their sum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sparza.metrics import Counter, MetricsRegistry

__all__ = ["GROUP_PREFIX", "TOTAL", "StorageRequests", "blob_operation", "table_operation"]

GROUP_PREFIX = "storage."
"""Every group of request counts starts with this (``storage.<scope>``)."""
TOTAL = "storage-requests"
"""The counter of every request of a group, whatever its operation."""

_BLOB = {("PUT", ""): "put-blob", ("GET", ""): "get-blob", ("HEAD", ""): "get-blob-properties",
         ("DELETE", ""): "delete-blob", ("PUT", "block"): "put-block", ("PUT", "blocklist"): "put-block-list",
         ("GET", "blocklist"): "get-block-list", ("PUT", "tags"): "set-blob-tags", ("GET", "tags"): "get-blob-tags",
         ("PUT", "metadata"): "set-blob-metadata", ("GET", "metadata"): "get-blob-metadata",
         ("HEAD", "metadata"): "get-blob-metadata", ("PUT", "properties"): "set-blob-properties",
         ("PUT", "snapshot"): "snapshot-blob", ("PUT", "appendblock"): "append-block", ("POST", "batch"): "blob-batch",
         ("PUT", "undelete"): "undelete-blob"}
_CONTAINER = {("PUT", ""): "create-container", ("GET", ""): "get-container-properties",
              ("HEAD", ""): "get-container-properties", ("DELETE", ""): "delete-container",
              ("GET", "list"): "list-blobs", ("PUT", "metadata"): "set-container-metadata",
              ("GET", "metadata"): "get-container-metadata", ("HEAD", "metadata"): "get-container-metadata",
              ("GET", "acl"): "get-container-acl", ("PUT", "acl"): "set-container-acl",
              ("POST", "batch"): "blob-batch", ("GET", "blobs"): "find-blobs-by-tags"}
_SERVICE = {("GET", "properties"): "get-service-properties", ("PUT", "properties"): "set-service-properties",
            ("GET", "stats"): "get-service-stats", ("GET", "list"): "list-containers",
            ("GET", "blobs"): "find-blobs-by-tags", ("POST", "batch"): "blob-batch",
            ("GET", "userdelegationkey"): "get-user-delegation-key"}
_ENTITY = {"POST": "insert-entity", "GET": "query-entities", "PUT": "update-entity", "MERGE": "merge-entity",
           "PATCH": "merge-entity", "DELETE": "delete-entity"}
_TABLES = {"POST": "create-table", "GET": "query-tables", "DELETE": "delete-table"}


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return str(value)
    return ""


def blob_operation(method: str, url: str, headers: Mapping[str, str]) -> str:
    """The Blob service operation of a request: ``put-blob``, ``get-blob-tags``, ``list-blobs``,
    ``lease-blob-renew``..."""
    method = method.upper()
    params = {k.lower(): v.lower() for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    comp, restype = params.get("comp", ""), params.get("restype", "")
    if comp == "lease":
        action = _header(headers, "x-ms-lease-action").lower() or "lease"
        return f"lease-{'container' if restype == 'container' else 'blob'}-{action}"
    if restype == "container":
        return _CONTAINER.get((method, comp), f"container-{method.lower()}-{comp or 'none'}")
    if restype == "service" or (comp in ("list", "blobs") and method == "GET"):
        return _SERVICE.get((method, comp), f"service-{method.lower()}-{comp or 'none'}")
    if method == "PUT" and not comp and _header(headers, "x-ms-copy-source"):
        return "copy-blob"
    return _BLOB.get((method, comp), f"blob-{method.lower()}-{comp or 'none'}")


def table_operation(method: str, url: str, headers: Mapping[str, str]) -> str:
    """The Table service operation of a request: ``insert-entity``, ``query-entities``, ``table-batch``..."""
    method = method.upper()
    path = unquote(urlsplit(url).path).rstrip("/")
    last = path.rsplit("/", 1)[-1]
    if last == "$batch":
        return "table-batch"
    if last == "Tables" or last.startswith("Tables("):
        return _TABLES.get(method, f"tables-{method.lower()}")
    return _ENTITY.get(method, f"entity-{method.lower()}")


Classifier = Callable[[str, str, Mapping[str, str]], str]


class StorageRequests:
    """Counts the requests of the clients built with it in ``registry``'s group ``storage.<scope>`` (see the
    module docstring). Thread-safe: the SDKs send the blocks of one upload from several threads.

    ``scope_of`` names a finer scope from a request's URL path (unquoted), or None to keep ``scope``: the blob store
    counts each store's requests apart by the store name in its blob names."""

    def __init__(self, registry: MetricsRegistry, scope: str, *,
                 scope_of: Callable[[str], str | None] | None = None) -> None:
        self.registry = registry
        self.scope = scope
        self.group = GROUP_PREFIX + scope
        self._scope_of = scope_of
        self._counters: dict[tuple[str, str], Counter] = {}
        registry.counter(self.group, TOTAL)  # the series exists from the start, at zero

    def __repr__(self) -> str:
        return f"StorageRequests({self.group!r})"

    def _counter(self, group: str, name: str) -> Counter:
        counter = self._counters.get((group, name))
        if counter is None:
            counter = self._counters.setdefault((group, name), self.registry.counter(group, name))
        return counter

    def count(self, operation: str, scope: str | None = None) -> None:
        """Count one request of ``operation`` (in ``storage.<scope>``; None: this object's scope)."""
        group = self.group if scope is None else GROUP_PREFIX + scope
        self._counter(group, operation).inc()
        self._counter(group, TOTAL).inc()

    def hook(self, classify: Classifier) -> Callable[[Any], None]:
        """The SDK's ``raw_request_hook``: counts the ``PipelineRequest`` it is called with, named by ``classify``."""
        scope_of = self._scope_of

        def on_request(request: Any) -> None:
            http = request.http_request
            url = str(http.url)
            self.count(classify(str(http.method), url, http.headers),
                       scope_of(unquote(urlsplit(url).path)) if scope_of is not None else None)

        return on_request

    def blob_client_options(self) -> dict[str, Any]:
        """Keyword arguments that make a Blob service client count its requests here."""
        return {"raw_request_hook": self.hook(blob_operation)}

    def table_client_options(self) -> dict[str, Any]:
        """Keyword arguments that make a Table service client count its requests here."""
        return {"raw_request_hook": self.hook(table_operation)}
