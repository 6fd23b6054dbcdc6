"""A running job's stores, asked while it runs: the client of a processor's live query endpoint.

:class:`LiveStores` finds the endpoint through the job's ``_live`` document (written next to its task checkpoints by
the processor that runs it, see :mod:`sparza.runtime.driver.livequery`) and asks it over HTTP. Values are as of
each task's latest commit, or its in-flight state with ``live=True`` (what the next commit would write; it may show
writes of a batch that never commits).

    >>> stores = LiveStores("job.yaml")                                       # doctest: +SKIP
    >>> stores.get("counts", "k7")                                            # doctest: +SKIP
    {'Partition 3': 41}
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.parse
from typing import Any

from sparza.errors import SparzaError

__all__ = ["LiveQueryError", "LiveStores"]


class LiveQueryError(SparzaError):
    """A live query could not be answered: no processor serves the job, or the tasks asked could not answer."""


class LiveStores:
    """Live reads of the stores of the job ``config`` (a path or a config mapping) names."""

    def __init__(self, config: Any, *, timeout_s: float = 5.0, url: str | None = None) -> None:
        from sparza.config import Config
        from sparza.engine.jobconfig import JobConfig

        if isinstance(config, str | os.PathLike):
            config = Config.from_file(str(config))
        elif not isinstance(config, Config):
            config = Config(dict(config))
        self.job = JobConfig.from_config(config)
        self.timeout_s = timeout_s
        self._url = url
        self._local = threading.local()  # each thread's kept connection (http.client's are not thread-safe)

    @property
    def url(self) -> str:
        """The endpoint of the processor that runs the job (from its ``_live`` document)."""
        if self._url is None:
            from sparza.engine.checkpoint import SupportsJobDocuments, checkpoint_store_from_config
            from sparza.runtime.driver.livequery import LIVE_DOCUMENT

            store = checkpoint_store_from_config(self.job.config, self.job.job_key)
            found = store.read_document(LIVE_DOCUMENT) if isinstance(store, SupportsJobDocuments) else None
            if found is None:
                raise LiveQueryError(f"no processor of job {self.job.job_key} serves live queries: the job is not "
                                     "running in the container mode (or runs with job.live.query.port: -1); read "
                                     "the committed state with 'sparza store get' instead")
            self._url = str(json.loads(found)["url"])
        return self._url

    def get(self, store: str, key: Any, *, task: str | None = None, live: bool = False) -> dict[str, Any]:
        """``{task: value}`` of ``key`` (typed as the store's key serde holds it) where a task holds it."""
        body = self._ask(store, "get", key=json.dumps(_wire(key)), task=task, live=live)
        return {a["task"]: a["value"] for a in body["answers"]}

    def scan(self, store: str, *, task: str | None = None, prefix: str | None = None, limit: int = 1000,
             live: bool = False) -> dict[str, list[list[Any]]]:
        """``{task: [[key, value], ...]}`` (keys whose text starts with ``prefix``, at most ``limit`` per task)."""
        body = self._ask(store, "scan", task=task, prefix=prefix, limit=str(limit), live=live)
        return {a["task"]: a["value"] for a in body["answers"]}

    def count(self, store: str, *, task: str | None = None, prefix: str | None = None,
              live: bool = False) -> dict[str, int]:
        """``{task: entries}``."""
        body = self._ask(store, "count", task=task, prefix=prefix, live=live)
        return {a["task"]: int(a["value"]) for a in body["answers"]}

    def _ask(self, store: str, op: str, *, live: bool, **params: Any) -> dict[str, Any]:
        query = {k: v for k, v in params.items() if v is not None}
        query["job"] = self.job.job_key
        if live:
            query["live"] = "true"
        path = f"/v1/stores/{urllib.parse.quote(store)}/{op}?{urllib.parse.urlencode(query)}"
        try:
            code, detail = self._get(path)
        except (OSError, http.client.HTTPException) as exc:
            raise LiveQueryError(f"the processor's live query endpoint {self.url} does not answer ({exc}): is the "
                                 "job still running?") from exc
        text = detail.decode("utf-8", "replace")
        try:
            body: dict[str, Any] = json.loads(text)
        except ValueError:
            raise LiveQueryError(f"live query of store {store!r} failed: HTTP {code}: {text}") from None
        if code not in (200, 503):
            raise LiveQueryError(f"live query of store {store!r} failed: {body.get('error') or text}")
        if not body.get("answers") and body.get("errors"):
            raise LiveQueryError("; ".join(f"{e['task']}: {e['error']}" for e in body["errors"]))
        return body

    def _get(self, path: str) -> tuple[int, bytes]:
        """``(status, body)`` of ``GET path`` on this thread's kept connection: a kept connection the endpoint
        closed since (idle, restarted) is opened again once (a read changes nothing, so asking twice is safe)."""
        while True:
            conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
            fresh = conn is None
            if conn is None:
                address = urllib.parse.urlsplit(self.url)
                conn = self._local.conn = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port,
                                                                     timeout=self.timeout_s)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                if fresh or isinstance(exc, TimeoutError):
                    raise
                continue
            if response.will_close:
                conn.close()
                self._local.conn = None
            return response.status, data

    def close(self) -> None:
        """Close this thread's kept connection (others close with their threads)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _wire(key: Any) -> Any:
    from sparza.engine.queries import to_wire

    return to_wire(key)
