"""Smoke tests proving each shared fixture really works against the real service."""

from __future__ import annotations

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import ResourceModifiedError


def test_blob_round_trip(azure_account, unique_name):
    client = azure_account.blob_service_client()
    container = client.create_container(unique_name)
    container.upload_blob("a/b.txt", b"hello sparza")
    assert container.download_blob("a/b.txt").readall() == b"hello sparza"
    assert [b.name for b in container.list_blobs()] == ["a/b.txt"]


def test_table_upsert_with_etag_conflict(azure_account, unique_name):
    tables = azure_account.table_service_client()
    table = tables.create_table(unique_name)
    table.upsert_entity({"PartitionKey": "p", "RowKey": "r", "n": 1})
    first = table.get_entity("p", "r")
    table.update_entity({"PartitionKey": "p", "RowKey": "r", "n": 2}, etag=first.metadata["etag"],
                        match_condition=MatchConditions.IfNotModified)
    with pytest.raises(ResourceModifiedError):
        table.update_entity({"PartitionKey": "p", "RowKey": "r", "n": 3}, etag=first.metadata["etag"],
                            match_condition=MatchConditions.IfNotModified)
    assert table.get_entity("p", "r")["n"] == 2


def test_tiny_spark_job(spark):
    df = spark.range(100).selectExpr("id % 3 AS k").groupBy("k").count()
    assert sorted((r.k, r["count"]) for r in df.collect()) == [(0, 34), (1, 33), (2, 33)]
