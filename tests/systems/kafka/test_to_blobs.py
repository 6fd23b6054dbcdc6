"""A job reading a Kafka topic and writing Azure blobs (Azurite): the keyed count's output as JSON lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.runtime.helpers import expected_counts, job_values  # noqa: E402
from tests.systems.kafka.test_runtime_e2e import load_events  # noqa: E402

from sparza.azure import StorageAccount  # noqa: E402
from sparza.config import Config  # noqa: E402
from sparza.systems import StreamSpec  # noqa: E402
from sparza.systems.kafka import KafkaSystemAdmin  # noqa: E402

pytestmark = pytest.mark.spark


def test_keyed_count_from_kafka_to_azure_blobs(spark: Any, work_dir: Path, kafka_bootstrap: str,
                                               azure_account: StorageAccount, unique_name: str) -> None:
    from sparza.runtime import JobRunner

    events = f"{unique_name}-events"
    container = f"{unique_name}-out"
    config = Config(job_values(work_dir, **{
        "job.name": unique_name, "task.max.batch.messages": "200",
        "task.inputs": f"kafka.{events}", "keyed_count.output": f"{container}.counts",
        "systems.kafka.samza.factory": "kafka", "systems.kafka.consumer.bootstrap.servers": kafka_bootstrap,
        "systems.kafka.samza.offset.default": "oldest",
        f"systems.{container}.samza.factory": "azureblob",
        f"systems.{container}.azureblob.account.name": azure_account.account_name,
        f"systems.{container}.azureblob.account.key": azure_account.account_key,
        f"systems.{container}.azureblob.endpoint": azure_account.blob_endpoint,
        f"systems.{container}.azureblob.writer.format": "jsonl"}))
    KafkaSystemAdmin("kafka", config).create_stream(StreamSpec(events, 2))
    load_events(config, 600, 7)
    JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None).run()
    client = azure_account.blob_service_client().get_container_client(container)
    best: dict[str, int] = {}
    rows = 0
    for blob in client.list_blobs():
        for line in client.download_blob(blob.name).readall().splitlines():
            body = json.loads(line)
            rows += 1
            best[body["key"]] = max(best.get(body["key"], 0), int(body["count"]))
    assert rows == 600
    assert best == expected_counts(600, 7)
