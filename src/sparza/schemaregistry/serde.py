"""``RegistryAvroSerde``: the ``avro`` serde of a stream whose system has a schema registry.

Writing: the stream's configured schema (``systems.<s>.streams.<x>.samza.<key|msg>.schema``) is registered
under the stream's subject (or, with ``auto.register.schemas: false``, looked up there) once per process;
each record is then the Confluent wire format (:mod:`.wire`) with that schema id. With no schema configured,
records are written with the subject's latest version. Reading: the schema id of each record picks the
writer's schema (fetched once per id); a configured schema is the reader's, and Avro's schema resolution
turns each record into it (a field added with a default reads as that default from older records), else
records are read as written.

A schema the subject's compatibility level refuses raises :class:`IncompatibleSchemaError` (a config error:
the job fails naming the subject, the version it conflicts with and the level; ``sparza run`` checks this
before it starts). Bytes that are not the wire format, and schema ids the registry does not know, are data
errors (:class:`~sparza.schemaregistry.wire.WireFormatError`,
:class:`~sparza.schemaregistry.client.UnknownSchemaIdError`): ``task.dead.letter.stream`` and
``task.drop.deserialization.errors`` apply to them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

from sparza.errors import ConfigError, SerdeError
from sparza.schemaregistry.client import RegistryEndpoint, SchemaRegistryClient, SchemaRegistryError, client_for
from sparza.schemaregistry.settings import RegistrySettings
from sparza.schemaregistry.wire import header, unframe

__all__ = ["IncompatibleSchemaError", "RegistryAvroSerde", "SchemaNotRegisteredError", "registry_serde"]


class IncompatibleSchemaError(ConfigError):
    """A stream's configured schema is refused by its subject's compatibility level."""

    def __init__(self, key: str, subject: str, version: int | None, level: str, detail: str) -> None:
        self.subject = subject
        self.version = version
        self.level = level
        against = f"version {version} of subject '{subject}'" if version is not None else f"subject '{subject}'"
        super().__init__(key, None, "", message=(
            f"config key '{key}': the schema is incompatible with {against} (compatibility level {level})"
            f"{': ' + detail if detail else ''}; make the change compatible under {level} (e.g. give a new field a "
            "default, remove no field without one), or register it under another subject"))


class SchemaNotRegisteredError(ConfigError):
    """``auto.register.schemas`` is off and the stream's schema is not a version of its subject."""


def _parse(schema: Any) -> Any:
    import fastavro

    try:
        return fastavro.parse_schema(schema)
    except Exception as exc:
        raise SerdeError(f"invalid Avro schema: {exc}") from exc


class RegistryAvroSerde:
    """Avro in the Confluent wire format through a schema registry (see the module docstring).

    Picklable: the connection settings, subject and schema travel; the client (with its caches) is the
    receiving process's own (:func:`~sparza.schemaregistry.client.client_for`)."""

    name = "avro"

    def __init__(self, endpoint: RegistryEndpoint, subject: str, schema: Any, *, auto_register: bool = True,
                 schema_key: str = "samza.msg.schema") -> None:
        self.endpoint = endpoint
        self.subject = subject
        self.schema = schema
        self.auto_register = auto_register
        self.schema_key = schema_key
        self._reset()

    def _reset(self) -> None:
        self._writer: tuple[bytes, Any] | None = None     # (5-byte header, parsed schema) once resolved
        self._writers: dict[int, tuple[Any, Any]] = {}     # schema id -> (parsed writer, reader or None: same)
        self._reader = _parse(self.schema) if self.schema is not None else None

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("endpoint", "subject", "schema", "auto_register", "schema_key")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    @property
    def client(self) -> SchemaRegistryClient:
        """The process-wide client of the registry."""
        return client_for(self.endpoint)

    @property
    def schema_text(self) -> str | None:
        """The configured schema as the JSON text registered (None: none configured)."""
        return None if self.schema is None else json.dumps(self.schema, separators=(",", ":"))

    # --- writing ---------------------------------------------------------------------------------
    def _resolve_writer(self) -> tuple[bytes, Any]:
        client = self.client
        text = self.schema_text
        if text is None:
            latest = client.latest(self.subject)
            if latest is None:
                raise ConfigError(self.schema_key, None, f"the Avro schema to write with (subject '{self.subject}' "
                                  "has no version to write with either)")
            self._writer = (header(latest.schema_id), _parse(json.loads(latest.schema)))
            return self._writer
        if self.auto_register:
            try:
                schema_id = client.register(self.subject, text)
            except SchemaRegistryError as exc:
                if exc.status == 409:
                    raise self._incompatible(str(exc)) from exc
                raise
        else:
            found = client.lookup(self.subject, text)
            if found is None:
                raise self._not_registered()
            schema_id = found.schema_id
        self._writer = (header(schema_id), self._reader)
        return self._writer

    def _incompatible(self, detail: str) -> IncompatibleSchemaError:
        client = self.client
        latest = client.latest(self.subject)
        return IncompatibleSchemaError(self.schema_key, self.subject, latest.version if latest else None,
                                       client.compatibility(self.subject), detail)

    def _not_registered(self) -> SchemaNotRegisteredError:
        key = self.schema_key
        return SchemaNotRegisteredError(key, None, "", message=(
            f"config key '{key}': the schema is not registered under subject '{self.subject}' and "
            "schema.registry.auto.register.schemas is false: register it first, or allow auto-registration"))

    def check(self) -> None:
        """Raise what writing would raise about the configured schema (incompatible, not registered), without
        registering anything: what ``sparza run`` asks before it starts. Nothing to check without a schema."""
        text = self.schema_text
        if text is None:
            return
        client = self.client
        if self.auto_register:
            if client.lookup(self.subject, text) is None and not client.is_compatible(self.subject, text):
                raise self._incompatible("the registry's compatibility check refuses it")
        elif client.lookup(self.subject, text) is None:
            raise self._not_registered()

    def to_bytes(self, obj: Any) -> bytes:
        import fastavro

        head, parsed = self._writer or self._resolve_writer()
        buf = io.BytesIO()
        buf.write(head)
        try:
            fastavro.schemaless_writer(buf, parsed, obj)
        except Exception as exc:
            raise SerdeError(f"record does not match the Avro schema of subject '{self.subject}': {exc}") from exc
        return buf.getvalue()

    # --- reading ---------------------------------------------------------------------------------
    def from_bytes(self, data: bytes) -> Any:
        import fastavro

        schema_id, payload = unframe(data)
        known = self._writers.get(schema_id)
        if known is None:
            text = self.client.schema_text(schema_id)
            writer = _parse(json.loads(text))
            # Resolution only when the reader differs: decoding into the writer's own schema costs nothing extra.
            same = self.schema is not None and json.loads(text) == self.schema
            known = self._writers[schema_id] = (writer, None if same else self._reader)
        writer, reader = known
        try:
            return fastavro.schemaless_reader(io.BytesIO(payload), writer, reader)
        except Exception as exc:
            raise SerdeError(f"a record written with schema id {schema_id} does not decode"
                             f"{' into the configured schema (' + self.schema_key + ')' if self._reader else ''}: "
                             f"{type(exc).__name__}: {exc}") from exc


def registry_serde(config: Mapping[str, Any], system: str, stream: str, which: str,
                   schema: Any) -> RegistryAvroSerde | None:
    """The registry serde of stream ``system.stream``'s keys or messages (``which``: ``key``/``msg``) when the
    system has ``schema.registry.url``, else None; ``schema`` is the stream's parsed configured schema."""
    settings = RegistrySettings(config, system)
    if not settings.enabled:
        return None
    return RegistryAvroSerde(settings.endpoint(), settings.subject(stream, which, schema), schema,
                             auto_register=settings.auto_register,
                             schema_key=f"systems.{system}.streams.{stream}.samza.{which}.schema")
