"""Every seed is observable from a real run: the Azure blob producer's counters (also
under Samza's names and groups), the backup and restore metrics, the adjunct store's, the per-stream
input lag and the task timers reach the job's Prometheus endpoint and JSON lines, and the status line
and the summary say when a store was restored from the blob store.

The metrics of what lives on executors (producers, consumers, backups) travel to the driver with each
batch result; a test reading them on the driver therefore proves the whole path.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import metrics_after_once

from sparza.config import Config
from sparza.host import free_port
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

pytestmark = [pytest.mark.spark, pytest.mark.azurite]


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``{(name, labels): value}`` of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = frozenset(tuple(part.split("=", 1)) for part in rest.rstrip("}").replace('"', "").split(",")
                           if part) if rest else frozenset()
        out[(name, labels)] = float(value)
    return out


def _sum(samples: dict, name: str, **labels: str) -> float:
    """The sum of ``name`` over the samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def _write_profiles(config: Config, count: int) -> None:
    DeltaSystemAdmin("delta", config).create_stream(StreamSpec("profiles", 2))
    producer = DeltaSystemProducer("delta", config)
    producer.register("loader")
    for i in range(count):
        producer.send("loader", OutgoingMessageEnvelope(SystemStream("delta", "profiles"), f"profile {i}".encode(),
                                                        key=f"u{i}".encode(), partition=i % 2))
    producer.flush("loader")


def _run(config: Config, port: int, lines: list[str]) -> dict:
    return _samples(metrics_after_once(config, _run.spark, port, lines.append))


def _last_jsonl(path: Path, source: str) -> dict:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["source"] == source][-1]["metrics"]


def test_every_seed_reaches_prometheus_and_json_lines(spark, make_job, work_dir, azure_connection_string,
                                                      unique_name):
    _run.spark = spark  # type: ignore[attr-defined]
    port = free_port()
    jsonl = work_dir / "metrics.jsonl"
    container = unique_name
    config = make_job(**{
        "task.inputs": "delta.events,delta.profiles",
        "keyed_count.output": f"{container}.counts",
        f"systems.{container}.samza.factory": "azureblob",
        f"systems.{container}.azureblob.writer.format": "jsonl",
        # Small blocks: a blob that fills no block is one Put Blob at commit, and block uploads are counted too.
        f"systems.{container}.azureblob.maxFlushThresholdSize": "1024",
        "azure.storage.connect": azure_connection_string,
        "stores.profiles.adstore.input": "delta.profiles",
        "stores.profiles.factory": "rocksdb",
        "metrics.reporter.prometheus.port": str(port),
        "metrics.reporter.jsonl.path": str(jsonl),
    })
    append_messages(config, 400, 5, commit_size=200)
    _write_profiles(config, 20)
    lines: list[str] = []
    samples = _run(config, port, lines)
    job = {"sparza_job": "kc-1"}

    # The Azure blob producer: its counters in its three groups, under sparza's and Samza's names.
    assert _sum(samples, "sparza_messages_sent_total", group="aggregate", **job) == 400
    assert _sum(samples, "sparza_messages_sent_total", group=container, **job) == 400
    assert _sum(samples, "sparza_event_write_rate_total", group="aggregate", **job) == 400
    assert _sum(samples, "sparza_event_write_rate_total", group=f"devstoreaccount1_{container}", **job) == 400
    by_source = _sum(samples, "sparza_event_write_rate_total", group="Partition 0") + \
        _sum(samples, "sparza_event_write_rate_total", group="Partition 1")
    assert by_source == 400  # the source groups: one per task
    for samza_name in ("event_write_byte_rate", "event_compress_byte_rate", "azure_block_upload_rate",
                       "azure_blob_commit_rate"):
        assert _sum(samples, f"sparza_{samza_name}_total", group="aggregate") > 0, samza_name
    for samza_name in ("event_produce_error", "azure_container_error"):
        assert ("sparza_" + samza_name + "_total", frozenset({("group", "aggregate"), ("task", ""), *job.items()})) \
            in samples, samza_name  # exported, and zero
    # Backup of the counts store (SEP-003): files and bytes uploaded, upload time.
    backup = {"group": "BlobStoreBackupManagerMetrics"}
    assert _sum(samples, "sparza_files_uploaded_total", **backup) > 0
    assert _sum(samples, "sparza_bytes_uploaded_total", **backup) > 0
    assert _sum(samples, "sparza_upload_ms_count", **backup) > 0
    # The adjunct store (SEP-002): every profile applied, bootstrapped, no bootstrap lag left.
    assert _sum(samples, "sparza_messages_applied_total", group="adjunct-profiles") == 20
    assert _sum(samples, "sparza_bootstrapped", group="adjunct-profiles") == 2  # both tasks
    assert ("sparza_bootstrap_lag", frozenset({("group", "adjunct-profiles"), ("task", ""), *job.items()})) in samples
    assert _sum(samples, "sparza_bootstrap_lag", group="adjunct-profiles") == 0
    # Per-stream input lag, the consumers' reads and the task timers.
    assert _sum(samples, "sparza_input_lag", group="delta.events") == 0
    assert _sum(samples, "sparza_input_lag", group="delta.profiles") == 0
    assert _sum(samples, "sparza_messages_read_total", group="delta") >= 420  # the consumers, every read
    assert _sum(samples, "sparza_process_ms_count", group="task", task="Partition 0") >= 1
    assert _sum(samples, "sparza_messages_processed_total", group="aggregate") == 400

    # The same in the JSON lines (the last line of the run is its final state).
    metrics = _last_jsonl(jsonl, "kc-1")
    assert metrics["aggregate"]["eventWriteRate"] == 400
    assert metrics[f"devstoreaccount1_{container}"]["eventWriteRate"] == 400
    assert metrics["BlobStoreBackupManagerMetrics"]["files-uploaded"] > 0
    assert metrics["delta.events"]["input-lag"] == 0
    assert sum(m.get("messages-applied", 0) for g, m in metrics.items() if g.endswith(":adjunct-profiles")) == 20
    assert metrics["Partition 1:task"]["process-ms"]["count"] >= 1
    assert not any("restored from the blob store" in line for line in lines)

    # A new host: the state is gone, the store comes back from the blob store, and the run says so.
    shutil.rmtree(work_dir / "state")
    append_messages(config, 100, 5, start=400, commit_size=100)
    lines.clear()
    samples = _run(config, port, lines)
    restore = {"group": "BlobStoreRestoreManagerMetrics"}
    assert _sum(samples, "sparza_files_restored_total", **restore) > 0
    assert _sum(samples, "sparza_bytes_restored_total", **restore) > 0
    assert _sum(samples, "sparza_restore_ms_count", **restore) > 0
    assert _sum(samples, "sparza_stores_restored_from_blob_store_total", group="aggregate") == 2
    batch_lines = [line for line in lines if line.startswith("batch ")]
    # Containers report each task's commits as they come: the restores may be on one line or on two.
    said = [int(m.group(1)) for line in batch_lines
            for m in [re.search(r"(\d+) store\(s\) restored from the blob store", line)] if m]
    assert sum(said) == 2, batch_lines
    summary = [line for line in lines if "batch(es) committed" in line]
    assert summary and "2 store(s) restored from the blob store" in summary[-1], summary
    # Every Azure Storage request is counted by scope and operation (here the blob producer's: state and checkpoints
    # are local), and the summary says how many the run sent, per task-commit and per second.
    group = f"storage.system.{container}"
    requests = _sum(samples, "sparza_storage_requests_total", group=group)
    by_operation = {n: v for (n, ls), v in samples.items()
                    if ("group", group) in ls and n != "sparza_storage_requests_total"}
    assert requests > 0 and requests == sum(by_operation.values()), by_operation
    assert by_operation.keys() <= {"sparza_put_blob_total", "sparza_put_block_total", "sparza_put_block_list_total",
                                   "sparza_create_container_total"}, by_operation
    commits = _sum(samples, "sparza_task_commits_total", group="aggregate")
    assert commits >= 2
    said = re.search(r"; ([\d,]+) storage requests \(([\d.]+) per task-commit, [\d.]+/s\)", summary[-1])
    assert said is not None, summary[-1]
    total = _sum(samples, "sparza_storage_requests_total")
    assert int(said.group(1).replace(",", "")) == total and float(said.group(2)) == round(total / commits, 2)
    assert _last_jsonl(jsonl, "kc-1")["BlobStoreRestoreManagerMetrics"]["files-restored"] > 0
