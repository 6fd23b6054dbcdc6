"""State that changes shape: stores record their format, read old values through a new schema, convert them once,
and refuse what they cannot read.

Oracles: the value a change must give is computed by ``schema_cases`` from the change alone (a field added with a
default gets it, a widened int becomes a float...), and the bytes on disk after a conversion are decoded by fastavro
with the new schema alone, not through the store.
"""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

import fastavro
import pytest
from tests.state import schema_cases as cases

from sparza.blobstore import BlobStoreManager
from sparza.errors import SerdeError
from sparza.serde import JsonSerde, StringSerde
from sparza.state.backup import StateBackup
from sparza.state.kv import (
    FORMAT_FILE,
    RocksDbStore,
    StoreFormatError,
    check_store_format,
    open_store,
    parse_format,
    read_format,
    schema_problems,
    store_dir,
)

TASK = "Partition 0"


def avro_config(factory: str, schema: Any, **extra: str) -> dict[str, str]:
    return {"stores.s.factory": factory, "stores.s.key.serde": "string", "stores.s.msg.serde": "avro",
            "stores.s.msg.schema": json.dumps(schema), **extra}


class Versions:
    """One store across versions of a job: ``open(config)`` opens it as the next version would (a RocksDB store on
    its live dir, a memory store from its last checkpoint), ``commit()`` checkpoints and closes it."""

    def __init__(self, base: Path, factory: str) -> None:
        self.base, self.factory = base, factory
        self.checkpoints = 0
        self.store: Any = None

    @property
    def last_checkpoint(self) -> Path:
        return self.base / f"cp-{self.checkpoints}"

    def open(self, config: dict[str, str], *, read_only: bool = False) -> Any:
        directory = self.last_checkpoint if self.factory == "memory" and self.checkpoints else None
        self.store = open_store("s", config, TASK, self.base, read_only=read_only, directory=directory)
        return self.store

    def commit(self) -> Path:
        self.checkpoints += 1
        self.store.flush()
        self.store.checkpoint(self.last_checkpoint)
        self.store.close()
        return self.last_checkpoint


def raw_entries(checkpoint: Path, factory: str) -> dict[bytes, bytes]:
    """The bytes a checkpoint holds, read without sparza's store classes' serdes."""
    if factory == "memory":
        lines = (checkpoint / "entries.jsonl").read_text().splitlines()
        return {bytes.fromhex(k): bytes.fromhex(v) for k, v in map(json.loads, lines)}
    store = RocksDbStore(checkpoint, read_only=True)
    try:
        return dict(store.all())
    finally:
        store.close()


def decode(schema: Any, data: bytes) -> Any:
    buf = io.BytesIO(data)
    value = fastavro.schemaless_reader(buf, fastavro.parse_schema(schema), None)
    assert buf.tell() == len(data), "a value does not use exactly its bytes"
    return value


# --- the compatibility check, against fastavro's resolution ----------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_compatible_changes_pass_the_check_and_read_as_the_oracle_says(seed: int) -> None:
    rng = random.Random(seed)
    schema = cases.record_schema(rng, fields=rng.randint(2, 6))
    values = [cases.value_of(rng, schema) for _ in range(30)]
    counter = [0]
    for _ in range(rng.randint(1, 4)):
        new, transform, what = cases.evolve(rng, schema, counter)
        assert schema_problems(schema, new) == [], what
        for value in values:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
            buf.seek(0)
            assert fastavro.schemaless_reader(buf, fastavro.parse_schema(schema), fastavro.parse_schema(new)) \
                == transform(value), what
        values = [transform(v) for v in values]
        schema = new


@pytest.mark.parametrize("seed", range(12))
def test_incompatible_changes_name_the_field_and_fastavro_cannot_read_them(seed: int) -> None:
    rng = random.Random(1000 + seed)
    schema = {"type": "record", "name": "Value", "fields": [
        {"name": "n", "type": "long"}, {"name": "x", "type": "double"}, {"name": "s", "type": "string"},
        {"name": "b", "type": "boolean"}]}
    new, field, says = cases.break_schema(rng, schema)
    problems = schema_problems(schema, new)
    assert [p.path for p in problems] == [field]
    assert says in str(problems[0])
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), {"n": 1 << 40, "x": 1e300, "s": "t", "b": True})
    buf.seek(0)
    try:
        fastavro.schemaless_reader(buf, fastavro.parse_schema(schema), fastavro.parse_schema(new))
    except Exception:  # SchemaResolutionError, or a decode error
        return
    raise AssertionError(f"fastavro read values of {schema} with {new}, which the check refused")


def test_nested_and_union_problems_have_paths() -> None:
    old = {"type": "record", "name": "V", "fields": [
        {"name": "addr", "type": {"type": "record", "name": "Addr", "fields": [{"name": "zip", "type": "long"}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "maybe", "type": ["null", "long"]},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    new = {"type": "record", "name": "V", "fields": [
        {"name": "addr", "type": {"type": "record", "name": "Addr", "fields": [{"name": "zip", "type": "int"}]}},
        {"name": "tags", "type": {"type": "array", "items": "long"}},
        {"name": "maybe", "type": "long"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
    problems = {p.path: p.reason for p in schema_problems(old, new)}
    assert set(problems) == {"addr.zip", "tags[]", "maybe", "kind", "at"}
    assert "null" in problems["maybe"] and "B" in problems["kind"] and "timestamp-micros" in problems["at"]
    widened = json.loads(json.dumps(old).replace('["null", "long"]', '["null", "long", "string"]'))
    assert schema_problems(old, widened) == []


# --- stores across versions --------------------------------------------------------------------------------------

@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
@pytest.mark.parametrize("seed", range(3))
def test_a_store_reads_old_values_through_each_new_schema_and_writes_the_new_one(tmp_path: Path, factory: str,
                                                                                   seed: int) -> None:
    rng = random.Random(seed)
    schema = cases.record_schema(rng, fields=4)
    expected = {f"k{i:04d}": cases.value_of(rng, schema) for i in range(300)}
    versions = Versions(tmp_path, factory)
    store = versions.open(avro_config(factory, schema))
    store.put_all(expected)
    expected = dict(store.all())  # as Avro stores them (floats in 32 bits)
    versions.commit()
    counter = [0]
    for step in range(3):
        new, transform, what = cases.evolve(rng, schema, counter)
        store = versions.open(avro_config(factory, new))
        expected = {k: transform(v) for k, v in expected.items()}
        assert dict(store.all()) == expected, what
        fresh = {f"new{step}-{i}": cases.value_of(rng, new) for i in range(20)}
        store.put_all(fresh)
        expected.update(dict(store.get_all(fresh)))
        checkpoint = versions.commit()
        recorded = read_format(checkpoint, "s")
        assert recorded is not None and recorded.format.msg.schema == new and recorded.migrating_to is None
        on_disk = {k.decode(): decode(new, v) for k, v in raw_entries(checkpoint, factory).items()}
        assert on_disk == expected, "every value is rewritten in the new schema"
        schema = new


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_a_documentation_or_default_change_rewrites_nothing(tmp_path: Path, factory: str) -> None:
    v1 = {"type": "record", "name": "C", "fields": [{"name": "n", "type": "long"}]}
    v2 = {"type": "record", "name": "C", "doc": "counts", "fields": [{"name": "n", "type": "long", "default": 0}]}
    versions = Versions(tmp_path, factory)
    versions.open(avro_config(factory, v1)).put_all({"a": {"n": 1}, "b": {"n": 2}})
    before = raw_entries(versions.commit(), factory)
    assert dict(versions.open(avro_config(factory, v2)).all()) == {"a": {"n": 1}, "b": {"n": 2}}
    checkpoint = versions.commit()
    assert raw_entries(checkpoint, factory) == before
    recorded = read_format(checkpoint, "s")
    assert recorded is not None and recorded.format.msg.schema == v2


V1 = {"type": "record", "name": "Count", "fields": [{"name": "count", "type": "long"},
                                                     {"name": "page", "type": "string"}]}


def _with_fields(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Count", "fields": list(fields)}


REFUSALS = {
    "added without a default": (
        {"stores.s.msg.schema": json.dumps(_with_fields(*V1["fields"], {"name": "seen", "type": "long"}))},
        "stores.s.msg.schema", "field 'seen': is new and has no \"default\""),
    "narrowed": (
        {"stores.s.msg.schema": json.dumps(_with_fields({"name": "count", "type": "int"}, V1["fields"][1]))},
        "stores.s.msg.schema", "field 'count': changes type from long to int (a narrowing"),
    "renamed without an alias": (
        {"stores.s.msg.schema": json.dumps(_with_fields(V1["fields"][0], {"name": "title", "type": "string"}))},
        "stores.s.msg.schema", "if it is a renamed field ('page' is gone), list the old name in its \"aliases\""),
    "value serde json without a migration": (
        {"stores.s.msg.serde": "json", "stores.s.msg.schema": ""},
        "stores.s.msg.serde", "declaring stores.s.msg.migrate.from: avro"),
    "key serde changed": (
        {"stores.s.key.serde": "json"}, "stores.s.key.serde", "its keys were written with string"),
    "a migration that names another serde": (
        {"stores.s.msg.serde": "json", "stores.s.msg.schema": "", "stores.s.msg.migrate.from": "string"},
        "stores.s.msg.migrate.from", "but the store records avro (record Count)"),
}


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_change_sparza_cannot_read_is_refused_naming_store_key_and_field(tmp_path: Path, factory: str,
                                                                            case: str) -> None:
    changes, key, says = REFUSALS[case]
    versions = Versions(tmp_path, factory)
    contents = {f"p{i}": {"count": i, "page": f"page {i}"} for i in range(50)}
    versions.open(avro_config(factory, V1)).put_all(contents)
    versions.commit()
    config = {k: v for k, v in {**avro_config(factory, V1), **changes}.items() if v}
    with pytest.raises(StoreFormatError) as refused:
        versions.open(config)
    assert refused.value.key == key and refused.value.store == "s"
    assert str(refused.value).startswith("store 's': ") and says in str(refused.value), str(refused.value)
    # Nothing was touched: the old config still reads every value.
    assert dict(versions.open(avro_config(factory, V1)).all()) == contents


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_json_to_avro_with_a_declared_migration_converts_every_value_once(tmp_path: Path, factory: str) -> None:
    versions = Versions(tmp_path, factory)
    json_config = {"stores.s.factory": factory, "stores.s.key.serde": "string", "stores.s.msg.serde": "json"}
    contents = {f"p{i}": {"count": i * 3, "page": f"page {i}"} for i in range(200)}
    versions.open(json_config).put_all(contents)
    versions.commit()
    to_avro = avro_config(factory, _with_fields(*V1["fields"], {"name": "seen", "type": "string", "default": "v1"}),
                          **{"stores.s.msg.migrate.from": "json"})
    assert dict(versions.open(to_avro).all()) == {k: {**v, "seen": "v1"} for k, v in contents.items()}
    checkpoint = versions.commit()
    recorded = read_format(checkpoint, "s")
    assert recorded is not None and recorded.format.msg.serde == "avro"
    schema = json.loads(to_avro["stores.s.msg.schema"])
    assert {k.decode(): decode(schema, v) for k, v in raw_entries(checkpoint, factory).items()} == \
        {k: {**v, "seen": "v1"} for k, v in contents.items()}
    # Opened again with the declaration still in the config: nothing left to convert, nothing refused.
    assert len(dict(versions.open(to_avro).all())) == 200
    versions.commit()


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_a_value_that_does_not_fit_the_new_serde_stops_the_conversion_naming_its_key(tmp_path: Path,
                                                                                      factory: str) -> None:
    versions = Versions(tmp_path, factory)
    json_config = {"stores.s.factory": factory, "stores.s.key.serde": "string", "stores.s.msg.serde": "json"}
    contents = {f"p{i:03d}": {"count": i, "page": "x"} for i in range(100)}
    contents["p050"] = {"count": 50, "page": "x", "extra": True}
    versions.open(json_config).put_all(contents)
    versions.commit()
    with pytest.raises(StoreFormatError, match=r"key \[payload: 4 bytes: b'p050'\].*extra are not in record Count"):
        versions.open(avro_config(factory, V1, **{"stores.s.msg.migrate.from": "json"}))
    if factory == "rocksdb":
        # The live dir was half converted: it says so and is refused until rebuilt from its snapshot.
        with pytest.raises(StoreFormatError, match="being converted from json to avro"):
            versions.open(avro_config(factory, V1, **{"stores.s.msg.migrate.from": "json"}))
        shutil.rmtree(store_dir(tmp_path, "s", TASK))
        shutil.copytree(versions.last_checkpoint, store_dir(tmp_path, "s", TASK))
    assert dict(versions.open(json_config).all()) == contents


def test_a_store_without_a_record_is_sampled_before_it_is_trusted(tmp_path: Path) -> None:
    # Written as a store was before sparza recorded formats: JSON values, no STORE-FORMAT.json.
    live = store_dir(tmp_path, "s", TASK)
    old = RocksDbStore(live, key_serde=StringSerde(), msg_serde=JsonSerde())
    old.put_all({f"p{i}": {"count": i, "page": "x"} for i in range(10)})
    old.close()
    assert not (live / FORMAT_FILE).exists()
    with pytest.raises(StoreFormatError, match=r"no record of its format .* values are not avro \(record Count\)"):
        open_store("s", avro_config("rocksdb", V1), TASK, tmp_path)
    converted = open_store("s", avro_config("rocksdb", V1, **{"stores.s.msg.migrate.from": "json"}), TASK, tmp_path)
    assert converted.get("p3") == {"count": 3, "page": "x"}
    converted.close()
    recorded = read_format(live, "s")
    assert recorded is not None and recorded.format.msg.schema == V1


def test_a_legacy_avro_store_needs_its_old_schema_to_be_converted(tmp_path: Path) -> None:
    live = store_dir(tmp_path, "s", TASK)
    from sparza.serde import AvroSerde

    old = RocksDbStore(live, key_serde=StringSerde(), msg_serde=AvroSerde({**V1, "fields": V1["fields"][:1]}))
    old.put_all({f"p{i}": {"count": i} for i in range(10)})
    old.close()
    with pytest.raises(StoreFormatError, match="values are not avro"):
        open_store("s", avro_config("rocksdb", V1), TASK, tmp_path)
    declared = {"stores.s.msg.migrate.from": "avro"}
    with pytest.raises(StoreFormatError, match="give it in stores.s.msg.migrate.from.schema"):
        open_store("s", avro_config("rocksdb", V1, **declared), TASK, tmp_path)
    v2 = _with_fields(V1["fields"][0], {"name": "page", "type": "string", "default": "?"})
    declared["stores.s.msg.migrate.from.schema"] = json.dumps({**V1, "fields": V1["fields"][:1]})
    store = open_store("s", avro_config("rocksdb", v2, **declared), TASK, tmp_path)
    assert dict(store.all()) == {f"p{i}": {"count": i, "page": "?"} for i in range(10)}
    store.close()


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_a_read_only_open_reads_an_old_checkpoint_through_the_new_schema(tmp_path: Path, factory: str) -> None:
    versions = Versions(tmp_path, factory)
    versions.open(avro_config(factory, V1)).put_all({"a": {"count": 1, "page": "p"}})
    checkpoint = versions.commit()
    v2 = _with_fields(*V1["fields"], {"name": "seen", "type": "string", "default": "v1"})
    view = open_store("s", avro_config(factory, v2), TASK, tmp_path, read_only=True, directory=checkpoint)
    assert dict(view.all()) == {"a": {"count": 1, "page": "p", "seen": "v1"}}
    view.close()
    # A config that cannot read it: a tool still reads it as written, never misread.
    json_config = {"stores.s.factory": factory, "stores.s.key.serde": "string", "stores.s.msg.serde": "json"}
    view = open_store("s", json_config, TASK, tmp_path, read_only=True, directory=checkpoint)
    assert dict(view.all()) == {"a": {"count": 1, "page": "p"}}
    view.close()
    recorded = read_format(checkpoint, "s")
    assert recorded is not None and recorded.format.msg.schema == V1  # a read-only open changes nothing


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_avro_keys_evolve_too_and_must_stay_distinct(tmp_path: Path, factory: str) -> None:
    k1 = {"type": "record", "name": "K", "fields": [{"name": "user", "type": "string"}]}
    k2 = {"type": "record", "name": "K", "fields": [{"name": "user", "type": "string"},
                                                    {"name": "region", "type": "string", "default": "eu"}]}
    base = {"stores.s.factory": factory, "stores.s.key.serde": "avro", "stores.s.msg.serde": "long"}
    versions = Versions(tmp_path, factory)
    versions.open({**base, "stores.s.key.schema": json.dumps(k1)}).put_all(
        [({"user": f"u{i}"}, i) for i in range(40)])
    versions.commit()
    store = versions.open({**base, "stores.s.key.schema": json.dumps(k2)})
    assert store.get({"user": "u7", "region": "eu"}) == 7
    assert sorted(v for _, v in store.all()) == list(range(40))
    versions.commit()
    with pytest.raises(StoreFormatError, match="makes some of them equal"):
        versions.open({**base, "stores.s.key.schema": json.dumps(
            {"type": "record", "name": "K", "fields": [{"name": "region", "type": "string"}]})})


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_a_json_store_with_a_declared_schema_checks_writes_and_evolves(tmp_path: Path, factory: str) -> None:
    def config(schema: Any) -> dict[str, str]:
        return {"stores.s.factory": factory, "stores.s.key.serde": "string", "stores.s.msg.serde": "json",
                "stores.s.msg.schema": json.dumps(schema)}

    versions = Versions(tmp_path, factory)
    store = versions.open(config(V1))
    store.put("a", {"count": 1, "page": "p"})
    for bad, says in (({"count": 1}, "field 'page' is missing"), ({"count": "1", "page": "p"}, "is not a long"),
                      ({"count": 1, "page": "p", "x": 0}, "x are not in record Count")):
        with pytest.raises(SerdeError, match=says):
            store.put("b", bad)
    versions.commit()
    v2 = _with_fields({"name": "count", "type": "double"}, {"name": "seen", "type": "string", "default": "v1"})
    store = versions.open(config(v2))
    assert store.get("a") == {"count": 1.0, "seen": "v1"}
    store.put("b", {"count": 2})
    assert store.get("b") == {"count": 2.0, "seen": "v1"}
    checkpoint = versions.commit()
    assert {k.decode(): json.loads(v) for k, v in raw_entries(checkpoint, factory).items()} == \
        {"a": {"count": 1.0, "seen": "v1"}, "b": {"count": 2.0, "seen": "v1"}}
    with pytest.raises(StoreFormatError, match="field 'count': changes type from double to long"):
        versions.open(config(V1))


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_restored_from_the_blob_store_on_a_fresh_dir_with_the_new_schema(tmp_path: Path, factory: str,
                                                                          blob_store: BlobStoreManager) -> None:
    versions = Versions(tmp_path / "host-a", factory)
    contents = {f"p{i}": {"count": i, "page": f"page {i}"} for i in range(500)}
    versions.open(avro_config(factory, V1)).put_all(contents)
    checkpoint = versions.commit()
    backup = StateBackup(blob_store, "job", "1", TASK)
    try:
        snapshot = backup.upload("s", checkpoint)
        backup.cleanup(snapshot)
        assert FORMAT_FILE in [f.file_name for f in backup.read_index(snapshot).dir_index.files_present]
        host_b = tmp_path / "host-b"
        target = store_dir(host_b, "s", TASK) if factory == "rocksdb" else host_b / "restored"
        backup.restore(snapshot, target)
    finally:
        backup.close()
    v2 = _with_fields(*V1["fields"], {"name": "seen", "type": "string", "default": "v1"})
    # Checked before anything opens: the recorded format, read from the snapshot alone.
    backup = StateBackup(blob_store, "job", "1", TASK)
    try:
        recorded = parse_format(backup.read_file(snapshot, FORMAT_FILE) or b"", "s")
    finally:
        backup.close()
    assert check_store_format("s", avro_config(factory, v2), recorded).rewrite == {"msg"}
    with pytest.raises(StoreFormatError, match="field 'count': changes type from long to int"):
        check_store_format("s", avro_config(factory, _with_fields({"name": "count", "type": "int"})), recorded)
    store = open_store("s", avro_config(factory, v2), TASK, host_b,
                       directory=target if factory == "memory" else None)
    try:
        assert dict(store.all()) == {k: {**v, "seen": "v1"} for k, v in contents.items()}
    finally:
        store.close()


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_fields_appended_with_defaults_of_every_kind_convert_to_exactly_fastavros_bytes(tmp_path: Path,
                                                                                         factory: str) -> None:
    appended = [
        {"name": "maybe", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": ["a", "ü"]},
        {"name": "attrs", "type": {"type": "map", "values": "long"}, "default": {"x": 1}},
        {"name": "where", "type": {"type": "record", "name": "Where", "fields": [{"name": "zip", "type": "int"}]},
         "default": {"zip": 75001}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}, "default": "B"},
        {"name": "note", "type": "string", "default": "héllo"},
        {"name": "ratio", "type": "float", "default": 0.25},
    ]
    v2 = {**V1, "fields": [*V1["fields"], *appended]}
    versions = Versions(tmp_path, factory)
    rng = random.Random(11)
    contents = {f"p{i:03d}": {"count": rng.randint(0, 1 << 50), "page": "é" * rng.randint(0, 40)} for i in range(100)}
    versions.open(avro_config(factory, V1)).put_all(contents)
    old_bytes = raw_entries(versions.commit(), factory)
    versions.open(avro_config(factory, v2))
    new_bytes = raw_entries(versions.commit(), factory)
    parsed = fastavro.parse_schema(v2)
    for key, value in contents.items():
        expected = {**value, **{f["name"]: f["default"] for f in appended}}
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, expected)
        assert new_bytes[key.encode()] == buf.getvalue()
        assert new_bytes[key.encode()].startswith(old_bytes[key.encode()])
