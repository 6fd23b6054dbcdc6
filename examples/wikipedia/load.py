"""Write the demo's input into its streams: edits (partitioned by user) and the profile CDC stream.

``sparza demo`` calls these with the config of ``examples.wikipedia.config.demo_config``; the streams
are the ones that config names (``app.wikipedia.edits`` and the profile store's
``stores.profiles.adstore.input``), Delta streams or Kafka topics. Writing goes through the system's
producer in transactions (a Delta app transaction, or a Kafka transaction that records its version),
so a load is committed in whole chunks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from examples.wikipedia.generate import Edit

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec, Transaction, get_system_factory
from sparza.systems.kafka import KafkaSystemAdmin

__all__ = ["create_streams", "edits_stream", "load_edits", "load_profiles", "profiles_stream"]

_COMMIT_ROWS = 50_000  # messages per commit (transaction): a few commits, not one per message


def edits_stream(config: Config) -> SystemStream:
    """The stream of edits the config names (``app.wikipedia.edits``)."""
    return SystemStream.parse(config.get_str("app.wikipedia.edits"))


def profiles_stream(config: Config) -> SystemStream:
    """The profile CDC stream: the input of the adjunct store ``app.wikipedia.profiles.store``."""
    store = config.get_str("app.wikipedia.profiles.store", "profiles")
    return SystemStream.parse(config.get_str(f"stores.{store}.adstore.input"))


def create_streams(config: Config, partitions: int) -> None:
    """Create the edits stream (``partitions`` partitions) and the profile stream (one partition; on
    Kafka a compacted topic, as a CDC stream of a table is: the last value per key is what counts).

    On Kafka the edits topic has no time retention: its records carry the edits' own times as timestamps (the
    generated ones start on 2026-01-01), and a topic's retention.ms counts from those, so a broker would delete
    edits older than a week before the job read them."""
    edits, profiles = edits_stream(config), profiles_stream(config)
    admin = get_system_factory(config, edits.system).get_admin(edits.system, config)
    kept = {"retention.ms": "-1"} if isinstance(admin, KafkaSystemAdmin) else {}
    admin.create_stream(StreamSpec(edits.stream, partitions, properties=kept))
    admin = get_system_factory(config, profiles.system).get_admin(profiles.system, config)
    compacted = {"cleanup.policy": "compact"} if isinstance(admin, KafkaSystemAdmin) else {}
    admin.create_stream(StreamSpec(profiles.stream, 1, properties=compacted))


def _append(config: Config, stream: SystemStream, source: str, envelopes: Iterable[OutgoingMessageEnvelope],
            commit_rows: int | None = None) -> int:
    """Send ``envelopes`` through one producer, one transaction per ``commit_rows`` (None: one in all).

    Transaction *i* (from 1) of the app id ``<job.name>-<job.id>/<source>`` has version *i*; the
    app id is unique per run, since the demo's job id is the run id.
    """
    app_id = f"{config.get_str('job.name')}-{config.get_str('job.id', '1')}/{source}"
    producer = get_system_factory(config, stream.system).get_producer(stream.system, config)
    producer.register(source)
    producer.start()
    n = 0
    transaction: Transaction | None = None
    try:
        for envelope in envelopes:
            if transaction is None:
                transaction = Transaction(app_id, n // commit_rows + 1 if commit_rows else 1)
                producer.begin(source, transaction)
            producer.send(source, envelope)
            n += 1
            if commit_rows and n % commit_rows == 0:
                producer.flush(source, transaction=transaction)
                transaction = None
        if transaction is not None:
            producer.flush(source, transaction=transaction)
    except BaseException:
        producer.abandon(source)
        raise
    finally:
        producer.stop()
    return n


def load_edits(config: Config, edits: Iterable[Edit]) -> int:
    """Append edits as JSON values keyed by user (so a page's edits are spread over partitions,
    which is why stage 1 repartitions by page); the event time is the edit's timestamp."""
    stream = edits_stream(config)
    return _append(config, stream, "loader", (
        OutgoingMessageEnvelope(stream, json.dumps(edit.to_json(), separators=(",", ":")).encode(),
                                key=edit.user.encode(), timestamp=edit.timestamp)
        for edit in edits), _COMMIT_ROWS)


def load_profiles(config: Config, rows: Iterable[tuple[str, dict[str, object] | None]], timestamp: int) -> int:
    """Append CDC rows keyed by user: a JSON profile (insert/update) or no value (delete)."""
    stream = profiles_stream(config)

    def envelope(user: str, profile: dict[str, object] | None) -> OutgoingMessageEnvelope:
        body = None if profile is None else json.dumps(profile, separators=(",", ":")).encode()
        return OutgoingMessageEnvelope(stream, body, key=user.encode(), partition=0, timestamp=timestamp)

    return _append(config, stream, "cdc", (envelope(user, profile) for user, profile in rows))
