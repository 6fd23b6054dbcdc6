"""Task classes and helpers of the azureblob end-to-end tests (tasks are imported on Spark executors).

The checks read the container with the Azure SDK and decode blobs with plain gzip + fastavro/json, never
through sparza's own reader, so they see what any Azure user would see.
"""

from __future__ import annotations

import collections
import gzip
import io
import json
from typing import Any

import fastavro

from sparza.config import Config
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream

RECORD_SCHEMA = {"type": "record", "name": "Copied", "namespace": "tests.blob",
                 "fields": [{"name": "id", "type": "long"}, {"name": "body", "type": "string"}]}
BODY = 2000  # ~2 KB records, as in the report


class BlobCopyTask:
    """Copies each input message ``{"id": i, "body": ...}`` to the blob stream named by ``test.blob.output``
    (``system.stream``) as an Avro record (or a dict for JSON lines), with no partition unless
    ``test.blob.partitioned`` is true; raises on the id in ``test.blob.poison.id`` (the poison message)."""

    def init(self, context: Any) -> None:
        config = context.config
        system, _, stream = config.get_str("test.blob.output").partition(".")
        self.output = SystemStream(system, stream)
        self.poison = config.get_int("test.blob.poison.id", -1)
        self.avro = config.get_str(f"systems.{system}.azureblob.writer.format", "avro") == "avro"
        self.partitioned = config.get_bool("test.blob.partitioned", False)

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        body = json.loads(envelope.message)
        if body["id"] == self.poison:
            raise ValueError(f"poison message {body['id']}")
        message: Any = AvroRecord(RECORD_SCHEMA, body) if self.avro else json.dumps(body).encode()
        collector.send(OutgoingMessageEnvelope(
            self.output, message, timestamp=envelope.timestamp,
            partition_key=f"p{body['id'] % 3}" if self.partitioned else None))


def load_input(config: Config, messages: int, partitions: int, *, start: int = 0) -> None:
    """Append ``messages`` JSON records (ids ``start``…) round robin over ``partitions`` of delta.events."""
    from sparza.systems.delta import DeltaSystemProducer

    producer = DeltaSystemProducer("delta", config)
    producer.register("loader")
    stream = SystemStream("delta", "events")
    for i in range(start, start + messages):
        value = json.dumps({"id": i, "body": f"{i:08d}" + "x" * (BODY - 8)}).encode()
        # every record of the run carries the same event time, so every task's blobs start in the same second
        producer.send("loader", OutgoingMessageEnvelope(stream, value, key=f"k{i}".encode(), partition=i % partitions,
                                                        timestamp=1_795_000_000_000))
    producer.flush("loader")


def read_container(account: Any, container: str, prefix: str | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Every committed blob name under ``prefix`` and every record in them (gzip by the name's ``.gz``)."""
    client = account.blob_service_client().get_container_client(container)
    names = sorted(b.name for b in client.list_blobs(name_starts_with=prefix) if not b.name.startswith("_sparza/"))
    records: list[dict[str, Any]] = []
    for name in names:
        data = client.get_blob_client(name).download_blob().readall()
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        if ".avro" in name:
            records.extend(fastavro.reader(io.BytesIO(data)))
        else:
            records.extend(json.loads(line) for line in data.splitlines() if line)
    return names, records


def exactly_once(records: list[dict[str, Any]], ids: range) -> tuple[list[int], dict[int, int]]:
    """The ids missing from ``records`` and the ids present more than once (with their counts)."""
    seen = collections.Counter(int(r["id"]) for r in records)
    missing = [i for i in ids if seen[i] == 0]
    repeated = {i: n for i, n in seen.items() if n > 1}
    unknown = [i for i in seen if i not in ids]
    assert not unknown, f"ids that were never input: {unknown[:10]}"
    return missing, repeated
