"""``sparza store get|scan|count`` and ``sparza.storeview`` on committed state written by the runtime (through
TestRunner): backed-up and local-only RocksDB stores, memory stores, an application's window store, a chosen
checkpoint, and the errors a user meets. The Spark data source's type mapping is checked here too (no JVM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from examples.keyed_count.task import KeyedCountTask
from tests.testing.jobs import KEYED_COUNT as BASE_KEYED_COUNT
from typer.testing import CliRunner

from sparza.cli import app
from sparza.storeview import CommittedStores, StoreViewError
from sparza.testing import TestMessage, TestRunner

KEYED_COUNT = {**BASE_KEYED_COUNT, "task.max.batch.messages": "7"}


def _events(start: int, n: int, keys: int = 5) -> list[TestMessage]:
    """Message i has key k{i % keys} and goes to partition i % 3."""
    return [TestMessage(f"m{i}".encode(), key=f"k{i % keys}".encode(), partition=i % 3)
            for i in range(start, start + n)]


def _expected(n: int, keys: int = 5) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for i in range(n):
        task = out.setdefault(f"Partition {i % 3}", {})
        task[f"k{i % keys}"] = task.get(f"k{i % keys}", 0) + 1
    return out


def _keyed_count(tmp_path: Path, messages: int, **overrides: str) -> tuple[TestRunner, Path]:
    runner = TestRunner.of(KeyedCountTask, {**KEYED_COUNT, **overrides}, work_dir=tmp_path)
    runner.add_input("delta.events", _events(0, messages), partitions=3).add_output("delta.counts", partitions=3)
    runner.run()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(runner.config.items())))  # the config the job ran with
    return runner, path


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, ["store", *args])
    return result


@pytest.mark.parametrize("overrides", [
    {}, {"stores.counts.backup.factories": ""}, {"stores.counts.factory": "memory"},
    {"stores.counts.factory": "memory", "stores.counts.backup.factories": ""}],
    ids=["rocksdb-backed-up", "rocksdb-local-only", "memory-backed-up", "memory-local-only"])
def test_scan_get_and_count_read_the_committed_state(tmp_path: Path, overrides: dict[str, str]) -> None:
    runner, path = _keyed_count(tmp_path, 40, **overrides)
    expected = _expected(40)
    assert runner.store("counts") == expected
    lines = [json.loads(line) for line in _cli("scan", "counts", "--config", str(path), "--json").output.splitlines()]
    assert {(r["task"], r["key"]): r["value"] for r in lines} == {
        (task, key): n for task, counts in expected.items() for key, n in counts.items()}
    assert [r["key"] for r in lines if r["task"] == "Partition 0"] == sorted(expected["Partition 0"])  # key order
    got = _cli("get", "counts", "--config", str(path), "--key", "k1")
    assert got.exit_code == 0, got.output
    assert got.output.splitlines() == [f"{task}\t{counts['k1']}" for task, counts in expected.items()]
    one = _cli("get", "counts", "--config", str(path), "--key", "k1", "--task", "Partition 2", "--json")
    assert json.loads(one.output) == {"task": "Partition 2", "key": "k1", "value": expected["Partition 2"]["k1"]}
    counted = json.loads(_cli("count", "counts", "--config", str(path), "--json").output)
    assert counted["tasks"] == {task: len(counts) for task, counts in expected.items()} and counted["total"] == 15
    text = _cli("count", "counts", "--config", str(path), "--task", "Partition 1").output.splitlines()
    assert text == ["Partition 1\t5", "total\t5"]
    runner.close()


def test_prefix_limit_and_a_missing_key(tmp_path: Path) -> None:
    runner, path = _keyed_count(tmp_path, 40, **{"stores.counts.key.serde": "string"})
    runner.add_input("delta.events", [TestMessage(b"x", key=b"other", partition=0)])
    runner.run()
    path.write_text(yaml.safe_dump(dict(runner.config.items())))
    counted = json.loads(_cli("count", "counts", "--config", str(path), "--prefix", "k", "--json").output)
    assert counted["total"] == 15
    assert json.loads(_cli("count", "counts", "--config", str(path), "--prefix", "oth", "--json").output)["tasks"] == {
        "Partition 0": 1, "Partition 1": 0, "Partition 2": 0}
    assert len(_cli("scan", "counts", "--config", str(path), "--limit", "4").output.splitlines()) == 4
    missing = _cli("get", "counts", "--config", str(path), "--key", "nope")
    assert missing.exit_code == 1 and "key 'nope' is in no committed snapshot of store 'counts'" in missing.output
    runner.close()


def test_the_state_is_the_committed_one_while_the_job_goes_on(tmp_path: Path) -> None:
    """A batch that failed after its snapshot was uploaded (before the task checkpoint) is not visible; the
    checkpoint's batch number or snapshot id picks what to read, other batch numbers are refused."""
    runner, path = _keyed_count(tmp_path, 30)
    stores = CommittedStores(path)
    ref = stores.store("counts")
    before = {s.task: s for s in stores.snapshots(ref)}
    runner.add_input("delta.events", _events(30, 30))
    runner.fail_at("after-snapshot", task="Partition 0")
    with pytest.raises(Exception, match="injected"):
        runner.run()
    assert dict(stores.count(ref)) == {task: len(c) for task, c in _expected(30).items()}
    assert stores.get(ref, "k0", task="Partition 0") == {"Partition 0": _expected(30)["Partition 0"]["k0"]}
    snapshot = before["Partition 0"]
    old = _cli("get", "counts", "--config", str(path), "--key", "k0", "--task", "Partition 0", "--checkpoint",
               snapshot.snapshot)
    assert old.output.strip() == f"Partition 0\t{_expected(30)['Partition 0']['k0']}"
    runner.run()                                 # the retry commits the batch
    after = {s.task: s for s in stores.snapshots(ref)}
    assert after["Partition 0"].batch > snapshot.batch
    assert stores.get(ref, "k0", task="Partition 0") == {"Partition 0": _expected(60)["Partition 0"]["k0"]}
    refused = _cli("scan", "counts", "--config", str(path), "--task", "Partition 0", "--checkpoint",
                   str(snapshot.batch))
    assert refused.exit_code != 0
    assert f"has committed batch {after['Partition 0'].batch}, not {snapshot.batch}" in str(refused.exception)
    runner.close()


def test_an_applications_window_store_is_found_in_its_stage(tmp_path: Path) -> None:
    from tests.testing.jobs import EventTimeCount

    runner = TestRunner.of(EventTimeCount, {"task.max.batch.messages": "5"}, work_dir=tmp_path)
    runner.add_input("mem.events", [TestMessage({"key": f"k{i % 2}", "n": i}, key=f"k{i % 2}".encode(), partition=0,
                                                timestamp=1000 + 100 * i) for i in range(8)], bounded=True)
    runner.add_output("mem.windows")
    runner.run()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(runner.config.items())))
    stores = CommittedStores(path)
    names = [r.store for r in stores.refs]
    assert len(names) == 1, names
    counted = json.loads(_cli("count", names[0], "--config", str(path), "--json").output)
    assert counted["job"] == stores.refs[0].job_key and set(counted["tasks"]) == {"Partition 0"}
    runner.close()


def test_errors_name_what_exists(tmp_path: Path) -> None:
    runner, path = _keyed_count(tmp_path, 10)
    stores = CommittedStores(path)
    with pytest.raises(StoreViewError, match="no task store 'nope'; the job's stores are: counts"):
        stores.store("nope")
    with pytest.raises(StoreViewError, match="the tasks with checkpoints are: Partition 0, Partition 1, Partition 2"):
        stores.snapshots(stores.store("counts"), task="Partition 9")
    with pytest.raises(StoreViewError, match="no snapshot 'bogus' in the blob store"):
        list(stores.scan(stores.store("counts"), checkpoint="bogus"))
    runner.close()


def test_spark_column_types_follow_the_serdes() -> None:
    """The data source's schema and row conversion (pure Python: no JVM needed)."""
    from pyspark.sql.types import StringType, StructType

    from sparza.serde import serde_from_name
    from sparza.storeview.spark import _convert, avro_to_spark, serde_type

    schema = {"type": "record", "name": "Pane", "fields": [
        {"name": "count", "type": "long"}, {"name": "last", "type": ["null", "string"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}}]}
    avro_ddl = serde_type(serde_from_name("avro", schema=json.dumps(schema)), None)
    assert avro_ddl == "struct<count:bigint,last:string,tags:array<string>>"
    avro = avro_to_spark(schema)
    assert avro.simpleString() == avro_ddl
    assert _convert({"count": 3, "last": None, "tags": ["a"]}, avro) == (3, None, ["a"])
    assert serde_type(serde_from_name("string"), None) == "string"
    assert serde_type(serde_from_name("long"), None) == "bigint"
    assert serde_type(serde_from_name("json"), None) == "string"
    assert serde_type(serde_from_name("json"), "count BIGINT, last STRING") == "struct<count BIGINT, last STRING>"
    assert serde_type(serde_from_name("json"), "bigint") == "bigint"
    as_struct = StructType.fromJson({"type": "struct", "fields": [
        {"name": "count", "type": "long", "nullable": True, "metadata": {}},
        {"name": "last", "type": "string", "nullable": True, "metadata": {}}]})
    assert _convert({"count": 2, "last": "x"}, as_struct) == (2, "x")   # a json value with valueSchema given
    assert _convert({"a": 1}, StringType()) == '{"a": 1}'
