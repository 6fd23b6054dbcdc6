"""``sparza blobs ls|cat`` read back what the producer wrote (Avro gzip and not, JSON lines)."""

from __future__ import annotations

import json

from azureblob_helpers import SCHEMA
from typer.testing import CliRunner

from sparza.cli import app
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream


def test_ls_and_cat(make_producer, azure_connection_string, unique_name):
    producer = make_producer(unique_name, **{"compression.type": "gzip"})
    for i in range(3):
        producer.send("t", OutgoingMessageEnvelope(SystemStream(unique_name, "clicks"),
                                                   AvroRecord(SCHEMA, {"id": i, "body": f"é{i}"}), partition_key="p0"))
    producer.flush("t")
    runner = CliRunner()
    listed = runner.invoke(app, ["blobs", "ls", "--connection-string", azure_connection_string, unique_name, "clicks/"])
    assert listed.exit_code == 0, listed.output
    [line] = [x for x in listed.stdout.splitlines() if x.startswith("clicks/")]
    name, _size, records = line.split("\t")
    assert name.startswith("clicks/p0/") and name.endswith(".avro.gz") and records == "3"
    shown = runner.invoke(app, ["blobs", "cat", "--connection-string", azure_connection_string, unique_name, name])
    assert shown.exit_code == 0, shown.output
    assert [json.loads(x) for x in shown.stdout.splitlines()] == [{"id": i, "body": f"é{i}"} for i in range(3)]
    missing = runner.invoke(app, ["blobs", "cat", "--connection-string", azure_connection_string, unique_name, "nope"])
    assert missing.exit_code != 0 and "no committed blob" in str(missing.exception)


def test_cat_with_config_file_and_jsonl(make_producer, azure_account, unique_name, tmp_path):
    producer = make_producer(unique_name, **{"writer.format": "jsonl"})
    producer.send("t", OutgoingMessageEnvelope(SystemStream(unique_name, "j"), {"k": [1, 2]}))
    producer.flush("t")
    config = tmp_path / "job.yaml"
    config.write_text(f"systems.{unique_name}.azureblob.account.name: {azure_account.account_name}\n"
                      f"systems.{unique_name}.azureblob.account.key: {azure_account.account_key}\n"
                      f"systems.{unique_name}.azureblob.endpoint: {azure_account.blob_endpoint}\n")
    runner = CliRunner()
    listed = runner.invoke(app, ["blobs", "ls", "--config", str(config), unique_name])
    name = listed.stdout.split("\t")[0]
    shown = runner.invoke(app, ["blobs", "cat", "-c", str(config), unique_name, name])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.strip() == '{"k":[1,2]}'
