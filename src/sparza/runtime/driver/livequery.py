"""Live store queries of a running processor: a small HTTP endpoint on loopback (Kafka Streams' interactive queries).

While a processor runs jobs in the container mode it serves, on ``job.live.query.host`` (127.0.0.1) and
``job.live.query.port`` (0: a free port; -1: off), one read-only endpoint::

    GET /v1/stores/<store>/get?job=<job>&key=<json>[&task=<task>][&live=true]
    GET /v1/stores/<store>/scan?job=<job>[&task=<task>][&prefix=<text>][&limit=<n>][&live=true]
    GET /v1/stores/<store>/count?job=<job>[&task=<task>][&prefix=<text>][&live=true]

``key`` is JSON as the store's key serde holds it (a string key is a JSON string; bytes ``{"$bytes": hex}``). A
``get`` without ``task`` goes to the task that owns the key: the store's key serde makes it bytes and the job's
first partitioned input's partitioner (Delta's crc32, Kafka's murmur2) names the partition, which is the task (a
store keyed like its input, as Samza's and Kafka Streams' are); without a partitioner, or with ``scan``/``count``
without ``task``, every task is asked. The answer is JSON: ``{"job", "store", "answers": [{"task", "batch",
"value"}], "live", "errors"}``; ``batch`` is the commit the value is as of (null for in-flight state).

The endpoint's address goes into the job's ``_live`` document next to its task checkpoints, where
``sparza store get --live`` finds it. A read is answered by a thread of the container that runs the task, never
after a batch: the task is not held up, and the read not by the task. The endpoint speaks HTTP/1.1: a client that
keeps its connection saves a connect and a server thread per read.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from sparza.config import INT, STR, define_key
from sparza.engine.manager import ContainerManager
from sparza.engine.messages import QueryStore
from sparza.engine.queries import from_wire

__all__ = ["LIVE_DOCUMENT", "LIVE_QUERY_HOST", "LIVE_QUERY_PORT", "LiveJob", "LiveQueryServer", "router"]

LIVE_QUERY_PORT = define_key("job.live.query.port", 0,
                             "Container mode: the loopback port of the processor's live store queries (sparza store "
                             "get --live); 0 picks a free one, -1 serves none.", "runtime", kind=INT)
LIVE_QUERY_HOST = define_key("job.live.query.host", "127.0.0.1",
                             "Container mode: the address live store queries are served on (loopback by default: "
                             "the endpoint has no authentication).", "runtime", kind=STR)
LIVE_DOCUMENT = "_live"
"""The job document (next to its task checkpoints) with the running processor's live query address."""


class LiveJob:
    """One job the endpoint answers for: its tasks and, for ``get``, which task owns a key (None: ask them all)."""

    def __init__(self, key: str, tasks: list[str], route: Callable[[str, Any], str | None]) -> None:
        self.key = key
        self.tasks = tasks
        self.route = route


class LiveQueryServer:
    """The endpoint (see the module docstring) of one processor, over its :class:`ContainerManager`."""

    def __init__(self, manager: ContainerManager, host: str = "127.0.0.1", port: int = 0,
                 timeout_s: float = 2.0) -> None:
        self.manager = manager
        self.timeout_s = timeout_s
        self.jobs: dict[str, LiveJob] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive: a client that keeps its connection (LiveStores does) sends each read to this handler's
            # thread, with no connect and no thread started per read (0.24 ms of CPU per read, client and server
            # together, against 0.65 ms with a connection per read). Without TCP_NODELAY the body would wait for
            # the ACK of the headers (a 40 ms delayed ACK) on a kept connection.
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True
            timeout = 60  # an idle kept connection (and its thread) ends after this many seconds

            def do_GET(self) -> None:
                code, body = server.handle(self.path)
                data = json.dumps(body, sort_keys=True).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # one line per read would drown the status line

        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        self.host, self.port = host, int(self._http.server_address[1])
        self._thread = threading.Thread(target=self._http.serve_forever, name="sparza-live-query", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    def add(self, job: LiveJob) -> None:
        """Answer for ``job``."""
        self.jobs[job.key] = job

    def remove(self, key: str) -> None:
        """Stop answering for job ``key``."""
        self.jobs.pop(key, None)

    def close(self) -> None:
        """Stop serving."""
        with contextlib.suppress(Exception):
            self._http.shutdown()
            self._http.server_close()

    def handle(self, path: str) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON body)`` of one request."""
        url = urlparse(path)
        parts = [p for p in url.path.split("/") if p]
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if len(parts) != 4 or parts[:2] != ["v1", "stores"] or parts[3] not in ("get", "scan", "count"):
            return 404, {"error": "GET /v1/stores/<store>/get|scan|count?job=<job>&..."}
        store, op = parts[2], parts[3]
        if not params.get("job") and len(self.jobs) == 1:
            params["job"] = next(iter(self.jobs))
        job = self.jobs.get(params.get("job", ""))
        if job is None:
            return 404, {"error": f"no job {params.get('job')!r} runs here; jobs: {sorted(self.jobs)}"}
        key: Any = None
        if op == "get":
            if "key" not in params:
                return 400, {"error": "get needs key=<JSON of the key>"}
            try:
                key = json.loads(params["key"])
            except ValueError:
                key = params["key"]  # bare text: a string key
        live = params.get("live", "").lower() in ("1", "true", "yes")
        try:
            limit = int(params.get("limit", "1000"))
        except ValueError:
            return 400, {"error": "limit must be a number"}
        tasks = [params["task"]] if params.get("task") else None
        if tasks is None and op == "get":
            owner = job.route(store, from_wire(key))
            tasks = [owner] if owner is not None else None
        answers, errors = [], []
        for task in tasks or job.tasks:
            answer = self.manager.query(QueryStore(uuid.uuid4().hex, job.key, task, store, op, key=key,
                                                   prefix=params.get("prefix"), limit=limit, live=live),
                                        self.timeout_s)
            if answer.ok:
                if op != "get" or answer.value is not None:
                    answers.append({"task": task, "batch": answer.batch, "value": answer.value})
            else:
                errors.append({"task": task, "error": answer.error})
        code = 200 if answers or not errors else 503
        return code, {"job": job.key, "store": store, "op": op, "live": live, "answers": answers, "errors": errors}


def router(config: Any, inputs: Any) -> Callable[[str, Any], str | None]:
    """``route(store, key)``: the task that owns ``key`` of ``store`` (see the module docstring), or None."""
    from sparza.engine.jobconfig import JobConfig
    from sparza.engine.model import task_name
    from sparza.state.kv.format import configured_format
    from sparza.systems import SupportsKeyPartitioner

    job = JobConfig.from_config(config)
    main = next((spec for spec in job.inputs if not spec.broadcast), None)
    admin = inputs.admins.get(main.stream.system) if main is not None else None

    def route(store: str, key: Any) -> str | None:
        if main is None or not isinstance(admin, SupportsKeyPartitioner):
            return None
        try:
            serde = configured_format(store, job.config).key.serde_object()
            raw = key if isinstance(key, bytes) else serde.to_bytes(key)
            return task_name(admin.partition_of(main.stream.stream, raw))
        except Exception:
            return None  # ask every task instead

    return route
