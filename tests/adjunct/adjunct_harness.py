"""The adjunct tests' harness: real Delta streams written and read back, fed to TaskAdjunctManager.

:class:`AdjunctHarness` writes CDC messages with the Delta producer, reads them back with the Delta
consumer and feeds them to :class:`TaskAdjunctManager` exactly as the runtime does (adjunct
envelopes of a batch first, then commit), so every test drives the real code path without Spark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparza.blobstore import BlobStoreManager
from sparza.config import Config
from sparza.state.adjunct import TaskAdjunctManager, end_of_dataset
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemConsumer, DeltaSystemProducer

__all__ = ["AdjunctHarness", "BatchFeeder"]


class AdjunctHarness:
    """A Delta system ``d`` under ``root`` plus helpers to write, read and feed adjunct streams."""

    def __init__(self, root: Path, blob_store: BlobStoreManager) -> None:
        self.root = root
        self.blob_store = blob_store
        self.base = Config({
            "job.name": "adj",
            "job.id": "1",
            "systems.d.samza.factory": "delta",
            "systems.d.delta.root": str(root / "streams"),
            "systems.d.samza.offset.default": "oldest",
        })
        self._producer: DeltaSystemProducer | None = None

    # --- config ----------------------------------------------------------------------------------
    def config(self, **overrides: Any) -> Config:
        """The base config with ``overrides`` (keys with ``__`` standing for ``.``)."""
        return self.base.with_overrides({k.replace("__", "."): v for k, v in overrides.items()})

    # --- streams ---------------------------------------------------------------------------------
    def create(self, stream: str, partitions: int) -> SystemStream:
        """Create Delta stream ``d.<stream>``."""
        DeltaSystemAdmin("d", self.base).create_stream(StreamSpec(stream, partitions))
        return SystemStream("d", stream)

    def write(self, stream: str, partition: int, rows: list[tuple[Any, Any]]) -> None:
        """Append ``(key, value)`` rows (value None: a delete) to one partition, one Delta commit."""
        producer = DeltaSystemProducer("d", self.base)
        producer.register("test")
        producer.start()
        for key, value in rows:
            producer.send("test", OutgoingMessageEnvelope(SystemStream("d", stream), _enc(value), key=_enc(key),
                                                          partition=partition))
        producer.flush("test")
        producer.stop()

    def seal(self, stream: str, partition: int, label: str = "") -> None:
        """Write an end-of-dataset marker into one partition."""
        producer = DeltaSystemProducer("d", self.base)
        producer.register("test")
        producer.start()
        producer.send("test", end_of_dataset(SystemStream("d", stream), partition, label))
        producer.flush("test")
        producer.stop()

    def read(self, ssp: SystemStreamPartition, start: str | None = None,
             end: str | None = None) -> list[IncomingMessageEnvelope]:
        """Every envelope of ``ssp`` in ``[start, end)``."""
        return list(DeltaSystemConsumer("d", self.base).read(ssp, start, end))

    def reader(self) -> Any:
        """A ``read(ssp, start, end)`` function for ``catch_up``."""
        consumer = DeltaSystemConsumer("d", self.base)
        return lambda ssp, start, end: consumer.read(ssp, start, end)

    def upcoming(self, stream: str) -> dict[int, str]:
        """The upcoming offset of each partition (where the next batch would start)."""
        meta = DeltaSystemAdmin("d", self.base).get_system_stream_metadata({stream})[stream]
        return {p: m.upcoming for p, m in meta.partitions.items()}

    # --- managers --------------------------------------------------------------------------------
    def manager(self, task: str, config: Config, base_dir: Path, blob_store: BlobStoreManager | None = None,
                entry: dict[str, Any] | None = None) -> TaskAdjunctManager:
        """A restored manager for ``task`` (stores under ``base_dir``)."""
        manager = TaskAdjunctManager(task, config, base_dir, blob_store or self.blob_store, "adj", "1")
        manager.restore(entry)
        return manager


class BatchFeeder:
    """Plays the runtime for adjunct SSPs: remembers the next offset per SSP and feeds new messages."""

    def __init__(self, harness: AdjunctHarness) -> None:
        self.harness = harness
        self.next: dict[SystemStreamPartition, str | None] = {}

    def feed(self, manager: TaskAdjunctManager, ssps: list[SystemStreamPartition], limit: int | None = None,
             each: Any = None) -> int:
        """Deliver the messages after the last fed one (at most ``limit`` per SSP), calling
        ``each(envelope)`` after each; returns how many were delivered."""
        count = 0
        for ssp in ssps:
            envelopes = self.harness.read(ssp, self.next.get(ssp))
            if limit is not None:
                envelopes = envelopes[:limit]
            for env in envelopes:
                assert manager.on_envelope(env) is True
                count += 1
                if each is not None:
                    each(env)
            if limit is not None and len(envelopes) == limit:
                rest = self.harness.read(ssp, envelopes[-1].offset)
                self.next[ssp] = rest[1].offset if len(rest) > 1 else self.harness.upcoming(ssp.stream)[ssp.partition]
            else:
                self.next[ssp] = self.harness.upcoming(ssp.stream)[ssp.partition]
        return count


def _enc(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value).encode("utf-8")


def read_broadcast_in_process(config: dict[str, str], task: str, base_dir: str, blob_root: str, batch: int,
                              barrier: Any, results: Any) -> None:
    """Child-process body: open broadcast store ``rates`` as ``task`` for ``batch`` on a host whose
    store dir is ``base_dir``; report what it read and how many snapshots this process downloaded."""
    from sparza.blobstore import LocalBlobStoreManager

    blob_store = LocalBlobStoreManager(blob_root, fsync=False)
    manager = TaskAdjunctManager(task, Config(config), base_dir, blob_store, "adj", "1")
    manager.restore(None)
    manager.begin_batch(batch)
    barrier.wait(timeout=300)
    contents = dict(manager.get_store("rates").all())
    results.put((task, contents, manager.container_cache.downloads))
    barrier.wait(timeout=300)  # keep the snapshot open until every process has read it
    manager.close()
    blob_store.close()


def commit(manager: TaskAdjunctManager, batch: int) -> dict[str, Any]:
    """What the runtime does at a batch's end: ``commit`` (the entry goes into the task checkpoint), then,
    the checkpoint being written, ``committed`` (snapshots made permanent, broadcast snapshots published)."""
    entry = manager.commit(batch)
    manager.committed(batch)
    return entry
