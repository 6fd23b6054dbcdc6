"""Typed result tables through the delta producer: rows, app transactions, upserts, schema evolution.

Expectations are written out by hand; tables are read back with deltalake/pyarrow, DuckDB and Polars.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sparza.config import Config
from sparza.errors import ConfigError, DataError
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream
from sparza.systems import Transaction
from sparza.systems.delta import DeltaSystemProducer
from sparza.systems.delta.tables import TableError, TableRowError, parse_schema

OUT = SystemStream("d", "results")


def _config(root: Path, **table: str) -> Config:
    values = {"systems.d.samza.factory": "delta", "systems.d.delta.root": str(root / "tables")}
    values.update({f"systems.d.streams.results.delta.table.{k.replace('_', '.')}": v for k, v in table.items()})
    return Config(values)


def _producer(config: Config, source: str = "task-0") -> DeltaSystemProducer:
    producer = DeltaSystemProducer("d", config)
    producer.register(source)
    producer.start()
    return producer


def _rows(root: Path, order: list[str]) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    table = DeltaTable(str(root / "tables" / "results")).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: tuple(r[c] for c in order))


def _send(producer: DeltaSystemProducer, message: Any, key: Any = None, ts: int | None = 5_000,
          source: str = "task-0") -> None:
    producer.send(source, OutgoingMessageEnvelope(OUT, message, key=key, timestamp=ts))


def test_append_rows_have_real_columns_and_a_replayed_transaction_adds_nothing(work_dir: Path) -> None:
    config = _config(work_dir, schema="page string not null, views long, at timestamp", timestamp_column="at")
    producer = _producer(config)
    _send(producer, {"page": "a", "views": 1}, ts=1_000)
    _send(producer, {"page": "b", "views": None}, ts=2_000)
    producer.flush("task-0", transaction=Transaction("job/task-0", 1))
    # The same transaction again (a replay after a crash past the flush) commits nothing.
    _send(producer, {"page": "a", "views": 1}, ts=1_000)
    _send(producer, {"page": "b", "views": None}, ts=2_000)
    producer.flush("task-0", transaction=Transaction("job/task-0", 1))
    with pytest.raises(TableError, match="samza.msg.serde"):
        _send(producer, b'{"page": "c", "views": 3}')  # JSON bytes need a json serde
    utc = dt.UTC
    assert _rows(work_dir, ["page"]) == [
        {"page": "a", "views": 1, "at": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=utc)},
        {"page": "b", "views": None, "at": dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=utc)},
    ]
    from deltalake import DeltaTable

    table = DeltaTable(str(work_dir / "tables" / "results"))
    assert table.transaction_version("job/task-0") == 1
    assert table.schema().to_arrow().names == ["page", "views", "at"]  # no partition/key/value/type columns


def test_json_bytes_with_a_json_serde_and_partition_by(work_dir: Path) -> None:
    config = _config(work_dir, schema="day date not null, page string, views long",
                     partition_by="day").with_overrides({"systems.d.streams.results.samza.msg.serde": "json"})
    producer = _producer(config)
    for i in range(6):
        _send(producer, json.dumps({"day": f"2024-01-0{1 + i % 2}", "page": f"p{i}", "views": i}).encode()
              if i % 2 else {"day": dt.date(2024, 1, 1), "page": f"p{i}", "views": i})
    producer.flush("task-0", transaction=Transaction("j/t", 1))
    rows = _rows(work_dir, ["page"])
    assert [(r["page"], r["views"]) for r in rows] == [(f"p{i}", i) for i in range(6)]
    files = sorted(p.parent.name for p in (work_dir / "tables" / "results").rglob("*.parquet"))
    assert set(files) == {"day=2024-01-01", "day=2024-01-02"}


def test_bad_rows_are_refused_naming_the_column(work_dir: Path) -> None:
    """At send, so the runtime can name the input message: a data error (deterministic, never retried)."""
    producer = _producer(_config(work_dir, schema="page string not null, views long"))
    with pytest.raises(TableRowError, match="column 'views'.*'many'") as wrong_type:
        _send(producer, {"page": "a", "views": "many"})
    assert isinstance(wrong_type.value, DataError) and wrong_type.value.column == "views"
    with pytest.raises(TableRowError, match="'page' is NOT NULL") as missing:
        _send(producer, {"views": 1})
    assert missing.value.column == "page"
    _send(producer, {"page": "a", "views": 1})   # the refused rows were not buffered
    producer.flush("task-0", transaction=Transaction("j/t", 1))
    with pytest.raises(TableError, match="append-only"):
        _send(producer, None, key="a")
    with pytest.raises(TableError, match="control"):
        producer.send("task-0", OutgoingMessageEnvelope(OUT, b"", type=MessageType.WATERMARK, timestamp=1))


def test_unknown_field_is_refused_at_send(work_dir: Path) -> None:
    producer = _producer(_config(work_dir, schema="page string"))
    with pytest.raises(TableError, match="no column 'clicks'"):
        _send(producer, {"page": "a", "clicks": 3})


def test_upsert_keeps_the_latest_row_per_key_and_none_deletes(work_dir: Path) -> None:
    config = _config(work_dir, schema="page string not null, window_start timestamp not null, views long",
                     mode="upsert", key="page,window_start")
    producer = _producer(config)
    _send(producer, {"page": "a", "window_start": 0, "views": 1})
    _send(producer, {"page": "a", "window_start": 0, "views": 2})      # same key: the latest wins
    _send(producer, {"page": "b", "window_start": 60_000, "views": 7})
    _send(producer, {"page": "c", "window_start": 0, "views": 9})
    producer.flush("task-0", transaction=Transaction("j/t", 1))
    _send(producer, {"views": 5}, key={"page": "b", "window_start": 60_000})  # key columns from the message key
    _send(producer, None, key=("c", "1970-01-01T00:00:00Z"))                 # a deletion (ISO time in its key)
    _send(producer, None, key=("zzz", 0))                                    # deleting a missing key: no-op
    producer.flush("task-0", transaction=Transaction("j/t", 2))
    # A replay of batch 2 with other content must not change anything.
    _send(producer, {"page": "b", "window_start": 60_000, "views": 999})
    producer.flush("task-0", transaction=Transaction("j/t", 2))
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert _rows(work_dir, ["page"]) == [
        {"page": "a", "window_start": epoch, "views": 2},
        {"page": "b", "window_start": epoch + dt.timedelta(minutes=1), "views": 5},
    ]


def test_schema_evolution_adds_a_nullable_column_and_refuses_incompatible_changes(work_dir: Path) -> None:
    producer = _producer(_config(work_dir, schema="page string not null, views long"))
    _send(producer, {"page": "a", "views": 1})
    producer.flush("task-0", transaction=Transaction("j/t", 1))
    files_before = sorted(p.name for p in (work_dir / "tables" / "results").glob("*.parquet"))

    producer = _producer(_config(work_dir, schema="page string not null, lang string, views long"))
    _send(producer, {"page": "b", "views": 2, "lang": "en"})
    producer.flush("task-0", transaction=Transaction("j/t", 2))
    assert _rows(work_dir, ["page"]) == [{"page": "a", "views": 1, "lang": None},
                                         {"page": "b", "views": 2, "lang": "en"}]
    files_after = sorted(p.name for p in (work_dir / "tables" / "results").glob("*.parquet"))
    assert set(files_before) <= set(files_after)   # no rewrite: the old file is still the live one
    assert len(files_after) == len(files_before) + 1

    for schema, message in [("page string not null, views string, lang string", "column 'views' is long"),
                            ("page string not null, lang string", "column 'views' is in the table"),
                            ("page string not null, views long, lang string, n long not null",
                             "new column 'n' is declared NOT NULL")]:
        producer = _producer(_config(work_dir, schema=schema))
        _send(producer, {"page": "x", "n": 1} if "n long" in schema else {"page": "x"})
        with pytest.raises(TableError, match=message):
            producer.flush("task-0", transaction=Transaction("j/t", 3))


def test_schema_forms_and_config_errors(work_dir: Path) -> None:
    compact = parse_schema("page string not null, ts timestamp, price decimal(10,2), n int")
    assert compact == pa.schema([pa.field("page", pa.string(), False), pa.field("ts", pa.timestamp("us", tz="UTC")),
                                 pa.field("price", pa.decimal128(10, 2)), pa.field("n", pa.int32())])
    avro = {"type": "record", "name": "r", "fields": [
        {"name": "page", "type": "string"}, {"name": "views", "type": ["null", "long"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    assert parse_schema(json.dumps(avro)) == pa.schema([
        pa.field("page", pa.string(), False), pa.field("views", pa.int64()),
        pa.field("at", pa.timestamp("us", tz="UTC"), False)])
    path = work_dir / "schema.avsc"
    path.write_text(json.dumps(avro))
    assert parse_schema(str(path)).names == ["page", "views", "at"]
    with pytest.raises(TableError, match="unknown column type 'strng'"):
        parse_schema("page strng")
    with pytest.raises(ConfigError, match=r"upsert needs key columns \(delta.table.key\)"):
        _producer(_config(work_dir, schema="page string", mode="upsert")).send(
            "task-0", OutgoingMessageEnvelope(OUT, {"page": "a"}))
    with pytest.raises(ConfigError, match="key column 'nope' is not in the schema"):
        _producer(_config(work_dir, schema="page string", mode="upsert", key="nope")).send(
            "task-0", OutgoingMessageEnvelope(OUT, {"page": "a"}))


def test_avro_serde_carries_the_schema(work_dir: Path) -> None:
    from sparza.serde import AvroSerde

    avro = {"type": "record", "name": "r", "fields": [{"name": "page", "type": "string"},
                                                       {"name": "views", "type": "long"}]}
    config = _config(work_dir, mode="append").with_overrides({
        "systems.d.streams.results.samza.msg.serde": "avro",
        "systems.d.streams.results.samza.msg.schema": json.dumps(avro)})
    producer = _producer(config)
    _send(producer, AvroSerde(avro).to_bytes({"page": "a", "views": 4}))
    _send(producer, {"page": "b", "views": 5})
    producer.flush("task-0", transaction=Transaction("j/t", 1))
    assert _rows(work_dir, ["page"]) == [{"page": "a", "views": 4}, {"page": "b", "views": 5}]


def test_readers_duckdb_and_polars_see_the_upserted_rows(work_dir: Path) -> None:
    import duckdb
    import polars
    from deltalake import DeltaTable

    producer = _producer(_config(work_dir, schema="page string not null, views long", mode="upsert", key="page"))
    expected: dict[str, int] = {}
    for batch in range(1, 4):
        for i in range(20):
            page, views = f"p{(i * batch) % 7}", batch * 100 + i
            _send(producer, {"page": page, "views": views})
            expected[page] = views
        producer.flush("task-0", transaction=Transaction("j/t", batch))
    location = str(work_dir / "tables" / "results")
    # DuckDB reads the live Parquet files the Delta log names (its delta extension would need a download).
    files = DeltaTable(location).file_uris()
    got = duckdb.connect().execute("SELECT page, views FROM read_parquet(?)", [files]).fetchall()
    assert dict(got) == expected and len(got) == len(expected)
    frame = polars.read_delta(location)
    assert dict(zip(frame["page"].to_list(), frame["views"].to_list(), strict=True)) == expected


def test_optimize_compacts_and_vacuums_and_a_replay_still_commits_nothing(work_dir: Path) -> None:
    from deltalake import DeltaTable
    from typer.testing import CliRunner

    from sparza.cli import app
    from sparza.systems.delta.tables import optimize_table

    config = _config(work_dir, schema="page string not null, views long", mode="upsert", key="page")
    producer = _producer(config)
    for batch in range(1, 7):
        _send(producer, {"page": f"p{batch % 3}", "views": batch})
        producer.flush("task-0", transaction=Transaction("j/t", batch))
    location = work_dir / "tables" / "results"
    before = _rows(work_dir, ["page"])
    assert before == [{"page": "p0", "views": 6}, {"page": "p1", "views": 4}, {"page": "p2", "views": 5}]
    on_disk = len(list(location.glob("*.parquet")))
    live = len(DeltaTable(str(location)).file_uris())

    result = CliRunner().invoke(app, ["stream", "optimize", str(location), "--vacuum", "--retain-hours", "1"])
    assert result.exit_code == 0, result.output
    assert f"merged {live} files into 1" in result.output and "vacuumed 0 files older than 1h" in result.output
    refused = CliRunner().invoke(app, ["stream", "optimize", str(location), "--vacuum", "--retain-hours", "0"])
    assert refused.exit_code != 0 and "below 1h" in str(refused.exception)

    outcome = optimize_table(config_location(config), vacuum_retention_hours=0, min_retention_hours=0)
    assert outcome.vacuumed == on_disk  # every replaced file: merges' and compaction's
    assert [p.name for p in location.glob("*.parquet")] == [DeltaTable(str(location)).file_uris()[0].rsplit("/")[-1]]
    assert _rows(work_dir, ["page"]) == before
    # The job's replay of batch 4 after compaction and vacuum: skipped by its app transaction.
    _send(producer, {"page": "p1", "views": 999})
    producer.flush("task-0", transaction=Transaction("j/t", 4))
    assert _rows(work_dir, ["page"]) == before


def config_location(config: Config, stream: str = "results") -> Any:
    """Where ``stream`` of system ``d`` lives (with storage options)."""
    from sparza.systems.delta.settings import DeltaSystemSettings

    return DeltaSystemSettings("d", config).location(stream)


def test_optimize_refuses_stream_tables(work_dir: Path) -> None:
    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin
    from sparza.systems.delta.tables import optimize_table

    config = _config(work_dir)
    DeltaSystemAdmin("d", config).create_stream(StreamSpec("results", 2))
    with pytest.raises(TableError, match="sparza stream truncate"):
        optimize_table(config_location(config), vacuum_retention_hours=200)


@pytest.mark.azurite
def test_typed_tables_on_azurite(azure_account: Any, azure_connection_string: str, unique_name: str) -> None:
    """Append and upsert on az:// (Azurite): the container is created, replays commit nothing, rows exact."""
    from deltalake import DeltaTable

    config = Config({"systems.d.samza.factory": "delta", "systems.d.delta.root": f"az://{unique_name}/tables",
                     "azure.storage.connect": azure_connection_string,
                     "systems.d.streams.results.delta.table.schema": "page string not null, views long",
                     "systems.d.streams.results.delta.table.mode": "upsert",
                     "systems.d.streams.results.delta.table.key": "page",
                     "systems.d.streams.log.delta.table.schema": "page string, views long"})
    producer = _producer(config)
    log = SystemStream("d", "log")
    for batch in (1, 2, 2):   # batch 2 twice: the replay
        for i in range(10):
            _send(producer, {"page": f"p{i % 4}", "views": batch * 10 + i})
            producer.send("task-0", OutgoingMessageEnvelope(log, {"page": f"p{i}", "views": batch}))
        _send(producer, None, key="p3")
        producer.flush("task-0", transaction=Transaction("j/t", batch))
    location = config_location(config, "results")
    table = DeltaTable(location.uri, storage_options=location.storage_options)
    assert sorted((r["page"], r["views"]) for r in table.to_pyarrow_table().to_pylist()) == [
        ("p0", 28), ("p1", 29), ("p2", 26)]
    log_location = config_location(config, "log")
    logged = DeltaTable(log_location.uri, storage_options=log_location.storage_options).to_pyarrow_table()
    assert sorted(logged.column("views").to_pylist()) == [1] * 10 + [2] * 10
