"""A client of the Confluent Schema Registry REST API (``/subjects``, ``/schemas/ids``, ``/compatibility``,
``/config``), as Confluent's registry, Apicurio's ``/apis/ccompat/v7``, Karapace and Redpanda serve it.

Schema ids are immutable, so what a process learns is kept for its lifetime (:func:`client_for` shares one
client per registry and credentials): a schema is fetched once per id and registered or looked up once per
subject, never per message. Transient failures (no connection, a timeout, a 5xx answer) are retried a few
times within ``timeout_s``, then raise :class:`SchemaRegistryUnavailableError` (a ``ConnectionError``: a
retry of the task may succeed); any other refusal raises :class:`SchemaRegistryError` with the registry's
own message and error code.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sparza.errors import SerdeError, SparzaError

__all__ = ["RegisteredSchema", "RegistryEndpoint", "SchemaRegistryClient", "SchemaRegistryError",
           "SchemaRegistryUnavailableError", "UnknownSchemaIdError", "client_for"]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_RETRY_PAUSES_S = (0.2, 0.5, 1.0)


class SchemaRegistryError(SparzaError):
    """The schema registry refused a request (``status`` and Confluent's ``error_code`` attached)."""

    def __init__(self, message: str, *, status: int | None = None, error_code: int | None = None) -> None:
        self.status = status
        self.error_code = error_code
        super().__init__(message)


class SchemaRegistryUnavailableError(SchemaRegistryError, ConnectionError):
    """The schema registry could not be reached (after retries): not the record's fault."""


class UnknownSchemaIdError(SerdeError):
    """A record names a schema id the registry does not have: a data error (dead-letter or drop policies apply)."""


@dataclass(frozen=True)
class RegistryEndpoint:
    """Where a registry is and how to authenticate (picklable: serdes carry it to executors).

    ``user_info`` is Confluent's ``basic.auth.user.info`` (``user:password``), never shown."""

    url: str
    user_info: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0


class RegisteredSchema(NamedTuple):
    """One version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema: str


class SchemaRegistryClient:
    """Talks to one registry; caches ids and schemas (see the module docstring). Thread-safe."""

    def __init__(self, endpoint: RegistryEndpoint) -> None:
        self.endpoint = endpoint
        self.requests = 0
        """HTTP requests sent so far (what the caches save shows here)."""
        self._lock = threading.Lock()
        self._schemas: dict[int, str] = {}
        self._ids: dict[tuple[str, str], int] = {}
        base = endpoint.url.rstrip("/")
        self._base = base
        self._headers = {"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE}
        if endpoint.user_info:
            token = base64.b64encode(endpoint.user_info.encode("utf-8")).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"

    # --- the API ---------------------------------------------------------------------------------
    def schema_text(self, schema_id: int) -> str:
        """The schema registered under ``schema_id``; :class:`UnknownSchemaIdError` when there is none."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        status, doc = self._call("GET", f"/schemas/ids/{schema_id}")
        if status == 404:
            raise UnknownSchemaIdError(f"schema id {schema_id} is not in the schema registry at {self._base} "
                                       f"({_registry_message(doc)}): the record was written against another "
                                       "registry, or its schema was deleted")
        self._expect(status, doc, f"fetching schema id {schema_id}")
        text = str(doc["schema"])
        with self._lock:
            self._schemas[schema_id] = text
        return text

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``, registering it as the subject's next version if it is new.
        A registry that refuses it as incompatible raises :class:`SchemaRegistryError` with status 409."""
        cached = self._ids.get((subject, schema))
        if cached is not None:
            return cached
        status, doc = self._call("POST", f"/subjects/{_quote(subject)}/versions", {"schema": schema})
        self._expect(status, doc, f"registering a schema under subject {subject!r}")
        return self._remember(subject, schema, int(doc["id"]))

    def lookup(self, subject: str, schema: str) -> RegisteredSchema | None:
        """The version of ``subject`` that holds ``schema``, or None (subject or schema not registered)."""
        status, doc = self._call("POST", f"/subjects/{_quote(subject)}", {"schema": schema})
        if status == 404:
            return None
        self._expect(status, doc, f"looking up a schema under subject {subject!r}")
        found = RegisteredSchema(subject, int(doc["version"]), int(doc["id"]), str(doc.get("schema", schema)))
        self._remember(subject, schema, found.schema_id)
        return found

    def latest(self, subject: str) -> RegisteredSchema | None:
        """The newest version of ``subject`` (None: no such subject). Not cached: it changes."""
        status, doc = self._call("GET", f"/subjects/{_quote(subject)}/versions/latest")
        if status == 404:
            return None
        self._expect(status, doc, f"reading the latest version of subject {subject!r}")
        found = RegisteredSchema(subject, int(doc["version"]), int(doc["id"]), str(doc["schema"]))
        with self._lock:
            self._schemas.setdefault(found.schema_id, found.schema)
        return found

    def is_compatible(self, subject: str, schema: str) -> bool:
        """Whether the registry would accept ``schema`` as the next version of ``subject`` under its
        compatibility level (True for a subject with no versions yet)."""
        status, doc = self._call("POST", f"/compatibility/subjects/{_quote(subject)}/versions/latest",
                                 {"schema": schema})
        if status == 404:
            return True  # no such subject (Confluent answers 404; Apicurio says compatible)
        self._expect(status, doc, f"testing a schema's compatibility with subject {subject!r}")
        return bool(doc.get("is_compatible"))

    def compatibility(self, subject: str) -> str:
        """The compatibility level that governs ``subject`` (its own, else the registry's global one)."""
        status, doc = self._call("GET", f"/config/{_quote(subject)}?defaultToGlobal=true")
        if status == 404:
            status, doc = self._call("GET", "/config")
        self._expect(status, doc, f"reading the compatibility level of subject {subject!r}")
        return str(doc.get("compatibilityLevel") or doc.get("compatibility") or "unknown")

    # --- plumbing --------------------------------------------------------------------------------
    def _remember(self, subject: str, schema: str, schema_id: int) -> int:
        with self._lock:
            self._ids[(subject, schema)] = schema_id
            self._schemas.setdefault(schema_id, schema)
        return schema_id

    def _expect(self, status: int, doc: Any, what: str) -> None:
        if 200 <= status < 300 and isinstance(doc, dict):
            return
        code = doc.get("error_code") if isinstance(doc, dict) else None
        raise SchemaRegistryError(f"schema registry at {self._base} refused {what}: HTTP {status}: "
                                  f"{_registry_message(doc)}", status=status,
                                  error_code=int(code) if isinstance(code, int) else None)

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``(status, parsed JSON body)``; retries transient failures, then raises the unavailable error."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        deadline = time.monotonic() + self.endpoint.timeout_s
        last = ""
        for pause in (*_RETRY_PAUSES_S, None):
            request = urllib.request.Request(self._base + path, data=data, method=method, headers=self._headers)
            self.requests += 1
            remaining = max(0.5, deadline - time.monotonic())
            try:
                with urllib.request.urlopen(request, timeout=remaining) as response:
                    return response.status, _parse(response.read())
            except urllib.error.HTTPError as exc:
                payload = _parse(exc.read())
                if exc.code < 500:
                    return exc.code, payload
                last = f"HTTP {exc.code}: {_registry_message(payload)}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
            if pause is None or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
        raise SchemaRegistryUnavailableError(
            f"schema registry at {self._base} did not answer {method} {path.split('?')[0]} ({last}); is it running "
            "and is systems.<s>.schema.registry.url right? (a local one: 'sparza dev-registry start')")


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {"message": raw[:300].decode("utf-8", "replace")}


def _registry_message(doc: Any) -> str:
    if isinstance(doc, dict):
        message = doc.get("message") or doc.get("detail") or doc
        code = doc.get("error_code")
        return f"{message} (error code {code})" if code is not None else str(message)
    return str(doc)


_CLIENTS: dict[RegistryEndpoint, SchemaRegistryClient] = {}
_CLIENTS_LOCK = threading.Lock()


def client_for(endpoint: RegistryEndpoint) -> SchemaRegistryClient:
    """The process-wide client of ``endpoint`` (one cache of ids and schemas per registry and credentials)."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(endpoint)
        if client is None:
            client = _CLIENTS[endpoint] = SchemaRegistryClient(endpoint)
        return client
