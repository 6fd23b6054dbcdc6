"""Extractor factories named by dotted path in the adjunct tests (importable by Spark workers too)."""

from __future__ import annotations

import json
from typing import Any

from sparza.config import Config
from sparza.streams import IncomingMessageEnvelope


class ProjectingExtractor:
    """Keys by the record's ``id`` field, keeps only ``name``; skips records without ``id``."""

    def get_key(self, envelope: IncomingMessageEnvelope) -> Any:
        if envelope.message is None:
            return envelope.key.decode("utf-8") if envelope.key else None
        record = json.loads(envelope.message)
        return None if "id" not in record else str(record["id"])

    def get_value(self, envelope: IncomingMessageEnvelope) -> Any:
        if envelope.message is None:
            return None
        return json.loads(envelope.message).get("name")


class ProjectingExtractorFactory:
    """Factory of :class:`ProjectingExtractor` (``adjunct_helpers.ProjectingExtractorFactory``)."""

    def get_key_value_extractor(self, config: Config) -> ProjectingExtractor:
        return ProjectingExtractor()


class CountingManagerFactory:
    """An ``adstore.manager.factory`` that wraps the built-in manager and counts what it processed."""

    processed: dict[str, int] = {}

    def get_adjunct_store_manager(self, context: Any) -> Any:
        from sparza.state.adjunct import DefaultAdjunctStoreManagerFactory

        inner = DefaultAdjunctStoreManagerFactory().get_adjunct_store_manager(context)
        name = context.spec.name
        counts = CountingManagerFactory.processed
        original = inner.process

        def process(envelope: IncomingMessageEnvelope) -> bool:
            counts[name] = counts.get(name, 0) + 1
            return original(envelope)

        inner.process = process  # type: ignore[method-assign]
        return inner
