"""Avro through a Confluent-compatible schema registry: the wire format, a caching REST client, the
registry-backed ``avro`` serde of a system's streams and its config keys (``systems.<s>.schema.registry.*``).

See ``docs/kafka.md`` (schema registries) for how a job uses it and what Event Hubs users have.
"""

from __future__ import annotations

from sparza.schemaregistry.client import (
    RegisteredSchema,
    RegistryEndpoint,
    SchemaRegistryClient,
    SchemaRegistryError,
    SchemaRegistryUnavailableError,
    UnknownSchemaIdError,
    client_for,
)
from sparza.schemaregistry.serde import (
    IncompatibleSchemaError,
    RegistryAvroSerde,
    SchemaNotRegisteredError,
    registry_serde,
)
from sparza.schemaregistry.settings import RegistrySettings, SubjectStrategy
from sparza.schemaregistry.wire import HEADER_SIZE, MAGIC_BYTE, WireFormatError, frame, header, unframe

__all__ = [
    "HEADER_SIZE",
    "MAGIC_BYTE",
    "IncompatibleSchemaError",
    "RegisteredSchema",
    "RegistryAvroSerde",
    "RegistryEndpoint",
    "RegistrySettings",
    "SchemaNotRegisteredError",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SchemaRegistryUnavailableError",
    "SubjectStrategy",
    "UnknownSchemaIdError",
    "WireFormatError",
    "client_for",
    "frame",
    "header",
    "registry_serde",
    "unframe",
]
