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


def load_edits(config: Config, edits: Iterable[Edit]) -> int:
    """Append edits as JSON values keyed by user (so a page's edits are spread over partitions,
    which is why stage 1 repartitions by page); the event time is the edit's timestamp."""
    producer = DeltaSystemProducer("delta", config)
    producer.register("loader")
    producer.start()
    stream = SystemStream("delta", "edits")
    n = 0
    try:
        for edit in edits:
            body = json.dumps(edit.to_json(), separators=(",", ":")).encode()
            producer.send("loader", OutgoingMessageEnvelope(stream, body, key=edit.user.encode(),
                                                            timestamp=edit.timestamp))
            n += 1
            if n % _COMMIT_ROWS == 0:
                producer.flush("loader")
        producer.flush("loader")
    finally:
        producer.stop()
    return n


def load_profiles(config: Config, rows: Iterable[tuple[str, dict[str, object] | None]], timestamp: int) -> int:
    """Append CDC rows keyed by user: a JSON profile (insert/update) or no value (delete)."""
    producer = DeltaSystemProducer("delta", config)
    producer.register("cdc")
    producer.start()
    stream = SystemStream("delta", "profiles")
    n = 0
    try:
        for user, profile in rows:
            body = None if profile is None else json.dumps(profile, separators=(",", ":")).encode()
            producer.send("cdc", OutgoingMessageEnvelope(stream, body, key=user.encode(), partition=0,
                                                         timestamp=timestamp))
            n += 1
        producer.flush("cdc")
    finally:
        producer.stop()
    return n
