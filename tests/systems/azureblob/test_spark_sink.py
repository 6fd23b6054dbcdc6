"""The Spark sink: batch write, and a streaming batch replayed after its commit was forgotten by Spark
(with and without the driver's manifest), which must leave exactly the same blobs; an aborted batch
leaves nothing visible."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from azureblob_helpers import download, list_blobs, read_avro

from sparza.systems.azureblob import register_azureblob_sink

pytestmark = pytest.mark.spark


def sink_options(account, container, **extra):
    options = {"container": container, "account.name": account.account_name, "account.key": account.account_key,
               "endpoint": account.blob_endpoint}
    options.update(extra)
    return options


def test_batch_write_avro(spark, azure_account, unique_name):
    register_azureblob_sink(spark)
    df = spark.range(0, 60, numPartitions=2).selectExpr(
        "id", "cast(id % 3 as string) AS country", "concat('user-', id) AS name",
        "timestamp_millis(1600000000000 + id * 1000) AS ts")
    (df.write.format("azureblob").options(**sink_options(azure_account, unique_name, stream="users",
                                                         partitionColumn="country", timestampColumn="ts"))
     .mode("append").save())
    blobs = list_blobs(azure_account, unique_name)
    assert {b.name.split("/")[1] for b in blobs} == {"0", "1", "2"}
    assert all(b.name.startswith("users/") and "/2020/09/13/12/" in b.name for b in blobs)
    rows = [r for b in blobs for r in read_avro(download(azure_account, unique_name, b.name))]
    assert sorted(r["id"] for r in rows) == list(range(60))
    assert all(r["country"] == str(r["id"] % 3) and r["name"] == f"user-{r['id']}" for r in rows)


def run_stream(spark, source_dir: Path, checkpoint: Path, options: dict) -> None:
    query = (spark.readStream.schema("id long, country string, ts timestamp").json(str(source_dir))
             .writeStream.format("azureblob").options(**options)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None


def forget_commit(checkpoint: Path, batch_id: int) -> None:
    """Remove Spark's commit-log entry of a batch, as a driver crash right before writing it would."""
    (checkpoint / "commits" / str(batch_id)).unlink()
    (checkpoint / "commits" / f".{batch_id}.crc").unlink(missing_ok=True)


def blob_state(account, container):
    return {b.name: download(account, container, b.name) for b in list_blobs(account, container)}


def test_streaming_replayed_batch_overwrites_the_same_blobs(spark, azure_account, unique_name, tmp_path):
    register_azureblob_sink(spark)
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    (source_dir / "a.json").write_text("".join(
        json.dumps({"id": i, "country": f"c{i % 2}", "ts": f"2024-05-01T10:00:{i % 60:02d}Z"}) + "\n"
        for i in range(50)))
    checkpoint = tmp_path / "ckpt"
    options = sink_options(azure_account, unique_name, stream="events", partitionColumn="country",
                           timestampColumn="ts", maxMessagesPerBlob="20")
    run_stream(spark, source_dir, checkpoint, options)
    first = blob_state(azure_account, unique_name)
    data = {n: v for n, v in first.items() if not n.startswith("_sparza/")}
    manifests = [n for n in first if n.startswith("_sparza/sinks/")]
    assert len(manifests) == 1 and manifests[0].endswith("/00000000000000000000.json")
    assert sorted(r["id"] for v in data.values() for r in read_avro(v)) == list(range(50))

    # Spark forgets that batch 0 committed (a driver crash before its commit log entry): it replays it
    forget_commit(checkpoint, 0)
    run_stream(spark, source_dir, checkpoint, options)
    assert blob_state(azure_account, unique_name) == first

    # and again without the manifest: deterministic names and bytes alone make the replay an overwrite
    forget_commit(checkpoint, 0)
    azure_account.blob_service_client().get_blob_client(unique_name, manifests[0]).delete_blob()
    run_stream(spark, source_dir, checkpoint, options)
    assert blob_state(azure_account, unique_name) == first


def test_failed_batch_leaves_nothing_visible(spark, azure_account, unique_name, tmp_path):
    register_azureblob_sink(spark)
    df = spark.range(0, 40, numPartitions=2).selectExpr(
        "CASE WHEN id = 33 THEN NULL ELSE cast(cast(id as string) as binary) END AS value")
    with pytest.raises(Exception, match="raw writer takes bytes"):
        (df.write.format("azureblob")
         .options(**sink_options(azure_account, unique_name, stream="raw", **{"writer.format": "raw"}))
         .mode("append").save())
    assert list_blobs(azure_account, unique_name) == []
    shutil.rmtree(tmp_path, ignore_errors=True)
