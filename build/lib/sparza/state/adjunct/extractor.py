"""Key/value extractors: how an adjunct message becomes a store entry (the seed's KeyValueExtractor).

The default stores the envelope's key and message as they are. A user extractor can project
(keep a few fields), transform, re-key, or skip a message by returning key ``None``. A value of
``None`` deletes the key, which is how change-capture streams express a deleted row.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from sparza.config import Config
from sparza.errors import ConfigError
from sparza.streams import IncomingMessageEnvelope
from sparza.systems import load_object

__all__ = [
    "DefaultKeyValueExtractor",
    "DefaultKeyValueExtractorFactory",
    "KeyValueExtractor",
    "KeyValueExtractorFactory",
    "load_extractor",
]


@runtime_checkable
class KeyValueExtractor(Protocol):
    """Extracts the store key and value from an incoming adjunct message.

    ``get_key`` returning ``None`` skips the message; ``get_value`` returning ``None`` deletes the key.
    Both must be deterministic: a replayed batch re-applies the same messages.
    """

    def get_key(self, envelope: IncomingMessageEnvelope) -> Any:
        """The store key for ``envelope`` (None: do not store this message)."""
        ...

    def get_value(self, envelope: IncomingMessageEnvelope) -> Any:
        """The store value for ``envelope`` (None: delete the key)."""
        ...


@runtime_checkable
class KeyValueExtractorFactory(Protocol):
    """Builds the extractor of one store; named by ``stores.<store>.adstore.key.value.extractor.factory``.

    Runs on executors, so it must be importable by dotted path there.
    """

    def get_key_value_extractor(self, config: Config) -> KeyValueExtractor:
        """A new extractor configured from the job's config."""
        ...


class DefaultKeyValueExtractor:
    """Stores the envelope's key and message unchanged."""

    def get_key(self, envelope: IncomingMessageEnvelope) -> Any:
        return envelope.key

    def get_value(self, envelope: IncomingMessageEnvelope) -> Any:
        return envelope.message


class DefaultKeyValueExtractorFactory:
    """Factory of :class:`DefaultKeyValueExtractor` (used when no factory is configured)."""

    def get_key_value_extractor(self, config: Config) -> KeyValueExtractor:
        return DefaultKeyValueExtractor()


def load_extractor(store: str, path: str | None, config: Config) -> KeyValueExtractor:
    """The extractor of ``store``: built by the factory at ``path`` (a class or an instance), else the default."""
    if not path:
        return DefaultKeyValueExtractor()
    key = f"stores.{store}.adstore.key.value.extractor.factory"
    target = load_object(path, key)
    factory = target() if isinstance(target, type) else target
    if not isinstance(factory, KeyValueExtractorFactory):
        raise ConfigError(key, path, "a KeyValueExtractorFactory (an object with get_key_value_extractor(config))")
    extractor = factory.get_key_value_extractor(config)
    if not isinstance(extractor, KeyValueExtractor):
        raise ConfigError(key, path, "a factory whose extractor has get_key(envelope) and get_value(envelope)")
    return extractor
