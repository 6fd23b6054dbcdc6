"""The demo's application config: one function builds it for a run directory and a storage account.

Everything a run keeps goes under ``run_dir`` (Delta streams, RocksDB stores, Spark checkpoints);
window results, state snapshots and task checkpoints go to the storage account. ``run_id`` is the
job id, so runs never see each other's checkpoints, snapshots or output blobs.
"""

from __future__ import annotations

import json
from pathlib import Path

from examples.wikipedia.app import WINDOW_SCHEMA

from sparza.config import Config

__all__ = ["OUTPUT_CONTAINER", "STATE_CONTAINER", "demo_config", "output_stream"]

OUTPUT_CONTAINER = "sparza-demo"
"""Container of the window results (the azureblob system is named after it)."""

STATE_CONTAINER = "sparza-demo-state"
"""Container of the blob store: store snapshots, adjunct publications and task checkpoints."""


def output_stream(run_id: str) -> str:
    """The blob stream (name prefix) of one run's window results."""
    return f"page-windows-{run_id}"


def demo_config(run_dir: Path, run_id: str, connection_string: str, *, partitions: int = 2,
                max_batch: int = 5_000, lateness_ms: int = 120_000) -> Config:
    """The application config of one demo run (``sparza run --config`` accepts the same keys as YAML)."""
    out = output_stream(run_id)
    values = {
        "job.name": "wikipedia",
        "job.id": run_id,
        "job.logged.store.base.dir": str(run_dir / "state"),
        "app.class": "examples.wikipedia.app.WikipediaPageStats",
        "app.wikipedia.edits": "delta.edits",
        "app.wikipedia.output": f"{OUTPUT_CONTAINER}.{out}",
        "app.wikipedia.profiles.store": "profiles",
        "task.max.batch.messages": str(max_batch),
        "task.commit.ms": "0",
        # Every account-backed part (blob producer, blob store, checkpoints) reads the account from here.
        "azure.storage.connect": connection_string,
        # Inputs: bounded Delta streams (end-of-stream ends the job).
        "systems.delta.samza.factory": "delta",
        "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(run_dir / "streams"),
        "systems.delta.streams.edits.bounded": "true",
        "systems.delta.streams.edits.watermark.lateness.ms": str(lateness_ms),
        "systems.delta.streams.profiles.bounded": "true",
        "systems.delta.streams.profiles.samza.bootstrap": "true",
        # The profile CDC stream fills a broadcast adjunct store: every stage-2 task reads all of it.
        "task.broadcast.inputs": "delta.profiles#0",
        "stores.profiles.adstore.input": "delta.profiles",
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
    return Config(values)
