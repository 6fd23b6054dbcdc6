"""Azure blob output through ``sparza run`` is exactly-once, with several tasks writing one stream at once
while one of them is retried after its flushed output was abandoned, and after a batch that failed on a
poison message and was rerun fixed.

Four tasks copy ~2 KB records into one ``azureblob`` Avro stream with small blocks and rollover by count, so
blocks are staged before the flush and every task flushes several blobs in the same second. An independent
reader (Azure SDK + fastavro) must find every input record exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.runtime.blob_jobs import exactly_once, load_input, read_container
from tests.runtime.helpers import run_sparza, write_config

from sparza.config import Config
from sparza.testing.faults import fault_keys

pytestmark = pytest.mark.slow

TASKS = 4


def blob_job(make_job: Any, account: Any, container: str, **overrides: Any) -> Config:
    """The copy job: delta.events (4 partitions) -> ``<container>.copied`` as Avro blobs."""
    prefix = f"systems.{container}.azureblob."
    values = {
        "task.class": "tests.runtime.blob_jobs.BlobCopyTask",
        "task.max.batch.messages": "1000",
        "test.blob.output": f"{container}.copied",
        f"systems.{container}.samza.factory": "azureblob",
        prefix + "account.name": account.account_name,
        prefix + "account.key": account.account_key,
        prefix + "endpoint": account.blob_endpoint,
        prefix + "maxFlushThresholdSize": "262144",
        prefix + "maxMessagesPerBlob": "500",
        **overrides,
    }
    return make_job(partitions=TASKS, **values)


def run_once(config: Config, path: Path, master: str = "local[2]") -> Any:
    # generous: the subprocess starts its own Spark, and the test machine may be busy
    return run_sparza("run", "--config", str(write_config(config, path)), "--once", "--master", master, timeout=900)


def test_four_tasks_writing_one_blob_stream_at_once_and_a_retried_one_keep_every_record_exactly_once(
        make_job, azure_account, unique_name, work_dir):
    marker = work_dir / "failed-once"
    config = blob_job(make_job, azure_account, unique_name, **{
        f"systems.{unique_name}.azureblob.maxMessagesPerBlob": "250", **fault_keys(marker)})
    load_input(config, 4000, TASKS)
    # local[4,2]: the four tasks run at once, in four Python workers, and open their blobs in the same seconds;
    # one of them fails once after its producers flushed and Spark runs it again, beside the others.
    result = run_once(config, work_dir / "job.yaml", master="local[4,2]")
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists()
    names, records = read_container(azure_account, unique_name, "copied/")
    missing, repeated = exactly_once(records, range(4000))
    assert (len(missing), len(repeated)) == (0, 0), (f"{len(missing)} missing, {len(repeated)} repeated "
                                                     f"in {len(names)} blobs: {names[:6]}")
    assert len(names) == 16  # 1000 records per task, 250 per blob: the retry rewrote its own blobs, no more


def test_poison_message_leaves_nothing_visible_and_the_fixed_rerun_writes_everything_once(
        make_job, azure_account, unique_name, work_dir):
    config = blob_job(make_job, azure_account, unique_name, **{"test.blob.poison.id": "2801",
                                                               "task.max.batch.messages": "10000"})
    load_input(config, 3000, TASKS)
    failed = run_once(config, work_dir / "job.yaml")
    assert failed.returncode != 0
    assert "poison message 2801" in failed.stderr
    # id 2801 is in partition 1, after 700 of that task's records: two rolled-over blobs were staged already
    names, records = read_container(azure_account, unique_name, "copied/")
    assert not any(int(r["id"]) % TASKS == 1 for r in records), names
    fixed = Config({k: v for k, v in config.items() if k != "test.blob.poison.id"})
    rerun = run_once(fixed, work_dir / "fixed.yaml")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    names, records = read_container(azure_account, unique_name, "copied/")
    missing, repeated = exactly_once(records, range(3000))
    assert (len(missing), len(repeated)) == (0, 0), (f"{len(missing)} missing, {len(repeated)} repeated "
                                                     f"in {len(names)} blobs: {names[:6]}")
