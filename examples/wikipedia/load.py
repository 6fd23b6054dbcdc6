"""Write the demo's input into its Delta streams: edits (partitioned by user) and the profile CDC stream.

``sparza demo`` calls these with the config of ``examples.wikipedia.config.demo_config``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from examples.wikipedia.generate import Edit

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

__all__ = ["create_streams", "load_edits", "load_profiles"]

_COMMIT_ROWS = 50_000  # rows per Delta commit: a few commits, not one per message


def create_streams(config: Config, partitions: int) -> None:
    """Create ``delta.edits`` (``partitions`` partitions) and ``delta.profiles`` (one partition)."""
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("edits", partitions))
    admin.create_stream(StreamSpec("profiles", 1))


def _append(config: Config, source: str, envelopes: Iterable[OutgoingMessageEnvelope],
            commit_rows: int | None = None) -> int:
    """Send ``envelopes`` through one producer, committing every ``commit_rows`` (None: once at the end)."""
    producer = DeltaSystemProducer("delta", config)
    producer.register(source)
    producer.start()
    n = 0
    try:
        for envelope in envelopes:
            producer.send(source, envelope)
            n += 1
            if commit_rows and n % commit_rows == 0:
                producer.flush(source)
        producer.flush(source)
    finally:
        producer.stop()
    return n


def load_edits(config: Config, edits: Iterable[Edit]) -> int:
    """Append edits as JSON values keyed by user (so a page's edits are spread over partitions,
    which is why stage 1 repartitions by page); the event time is the edit's timestamp."""
    stream = SystemStream("delta", "edits")
    return _append(config, "loader", (
        OutgoingMessageEnvelope(stream, json.dumps(edit.to_json(), separators=(",", ":")).encode(),
                                key=edit.user.encode(), timestamp=edit.timestamp)
        for edit in edits), _COMMIT_ROWS)


def load_profiles(config: Config, rows: Iterable[tuple[str, dict[str, object] | None]], timestamp: int) -> int:
    """Append CDC rows keyed by user: a JSON profile (insert/update) or no value (delete)."""
    stream = SystemStream("delta", "profiles")

    def envelope(user: str, profile: dict[str, object] | None) -> OutgoingMessageEnvelope:
        body = None if profile is None else json.dumps(profile, separators=(",", ":")).encode()
        return OutgoingMessageEnvelope(stream, body, key=user.encode(), partition=0, timestamp=timestamp)

    return _append(config, "cdc", (envelope(user, profile) for user, profile in rows))
