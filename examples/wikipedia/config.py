"""The demo's application config: one function builds it for a run directory and a storage account.

Everything a run keeps goes under ``run_dir`` (Delta streams, RocksDB stores, Spark checkpoints);
window results, state snapshots and task checkpoints go to the storage account. ``run_id`` is the
job id, so runs never see each other's checkpoints, snapshots or output blobs.

The inputs and the intermediate stream are Delta streams (``source="delta"``) or Kafka topics
(``source="kafka"``, on the brokers given): the application reads whichever the config names.
Topic names carry the run id, so runs on one long-lived broker never share a topic.
"""

from __future__ import annotations

import json
from pathlib import Path

from examples.wikipedia.app import WINDOW_SCHEMA

from sparza.config import Config

__all__ = ["OUTPUT_CONTAINER", "SOURCES", "STATE_CONTAINER", "TABLES_SYSTEM", "demo_config", "output_stream"]

OUTPUT_CONTAINER = "sparza-demo"
"""Container of the window results (the azureblob system is named after it)."""

STATE_CONTAINER = "sparza-demo-state"
"""Container of the blob store: store snapshots, adjunct publications and task checkpoints."""


TABLES_SYSTEM = "tables"
"""The Delta system of the demo's typed result table (under ``<run dir>/tables``)."""

SOURCES = ("delta", "kafka")
"""Where the demo's input and intermediate streams live: Delta streams or Kafka topics."""


def output_stream(run_id: str) -> str:
    """The blob stream (name prefix) of one run's window results."""
    return f"page-windows-{run_id}"


def _input_systems(run_dir: Path, run_id: str, source: str, kafka_bootstrap_servers: str | None,
                   lateness_ms: int) -> tuple[str, str, dict[str, str]]:
    """The edits stream, the profile stream and the system keys of ``source``: bounded inputs (end-of-stream
    ends the job), read from the oldest offset, the profile CDC stream bootstrapped."""
    if source == "delta":
        system, edits, profiles = "delta", "edits", "profiles"
        keys = {"systems.delta.samza.factory": "delta", "systems.delta.delta.root": str(run_dir / "streams")}
    elif source == "kafka":
        if not kafka_bootstrap_servers:
            raise ValueError("source 'kafka' needs kafka_bootstrap_servers")
        system, edits, profiles = "kafka", f"wikipedia-{run_id}-edits", f"wikipedia-{run_id}-profiles"
        keys = {"systems.kafka.samza.factory": "kafka",
                "systems.kafka.consumer.bootstrap.servers": kafka_bootstrap_servers,
                # The partition_by stream is a topic too: watermarks and end-of-stream cross it in-band.
                "job.intermediate.system": "kafka"}
    else:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    keys |= {
        f"systems.{system}.samza.offset.default": "oldest",
        f"systems.{system}.streams.{edits}.bounded": "true",
        f"systems.{system}.streams.{edits}.watermark.lateness.ms": str(lateness_ms),
        f"systems.{system}.streams.{profiles}.bounded": "true",
        f"systems.{system}.streams.{profiles}.samza.bootstrap": "true",
    }
    return f"{system}.{edits}", f"{system}.{profiles}", keys


def demo_config(run_dir: Path, run_id: str, connection_string: str, *, partitions: int = 2,
                max_batch: int = 5_000, lateness_ms: int = 120_000, source: str = "delta",
                kafka_bootstrap_servers: str | None = None, sessions: bool = False) -> Config:
    """The application config of one demo run (``sparza run --config`` accepts the same keys as YAML).

    ``source`` is one of :data:`SOURCES`; ``"kafka"`` needs ``kafka_bootstrap_servers``. ``sessions`` adds
    each user's editing sessions (``app.wikipedia.sessions.table``, ``sparza demo --sessions``).
    """
    out = output_stream(run_id)
    edits, profiles, input_keys = _input_systems(run_dir, run_id, source, kafka_bootstrap_servers, lateness_ms)
    values = {
        "job.name": "wikipedia",
        "job.id": run_id,
        "job.logged.store.base.dir": str(run_dir / "state"),
        "app.class": "examples.wikipedia.app.WikipediaPageStats",
        "app.wikipedia.edits": edits,
        "app.wikipedia.output": f"{OUTPUT_CONTAINER}.{out}",
        "app.wikipedia.profiles.store": "profiles",
        # The windows are also upserted into a typed Delta table (one row per page and minute) for SQL.
        "app.wikipedia.table": f"{TABLES_SYSTEM}.page_stats",
        f"systems.{TABLES_SYSTEM}.samza.factory": "delta",
        f"systems.{TABLES_SYSTEM}.delta.root": str(run_dir / "tables"),
        "task.max.batch.messages": str(max_batch),
        "task.commit.ms": "0",
        # Every account-backed part (blob producer, blob store, checkpoints) reads the account from here.
        "azure.storage.connect": connection_string,
        # Inputs: bounded Delta streams or Kafka topics (see _input_systems).
        **input_keys,
        # The profile CDC stream fills a broadcast adjunct store: every stage-2 task reads all of it.
        "task.broadcast.inputs": f"{profiles}#0",
        "stores.profiles.adstore.input": profiles,
        "stores.profiles.key.serde": "string",
        "stores.profiles.msg.serde": "json",
        "stores.profiles.backup.factories": "blobstore",
        # Window state: RocksDB, backed up incrementally to the blob store at every commit.
        "app.window.store.factory": "rocksdb",
        "app.window.store.backup.factories": "blobstore",
        # Output: Avro, gzip, to the Azure blob producer (the container is the system name).
        f"systems.{OUTPUT_CONTAINER}.samza.factory": "azureblob",
        f"systems.{OUTPUT_CONTAINER}.azureblob.compression.type": "gzip",
        f"systems.{OUTPUT_CONTAINER}.azureblob.writer.format": "avro",
        f"systems.{OUTPUT_CONTAINER}.streams.{out}.avro.schema": json.dumps(WINDOW_SCHEMA),
        # The blob store on the same account: snapshots, publications and task checkpoints.
        "blob.store.manager.factory": "azure",
        "blob.store.azure.container": STATE_CONTAINER,
        "job.checkpoint.factory": "blobstore",
        "spark.sql.shuffle.partitions": str(partitions),
    }
    if sessions:
        # Each user's editing sessions (30-minute gap), upserted by (user, session start): stage 1, no repartition.
        values["app.wikipedia.sessions.table"] = f"{TABLES_SYSTEM}.user_sessions"
    return Config(values)
