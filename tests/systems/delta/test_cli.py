"""``sparza stream``: create, describe, load, tail, compact, truncate on a local directory."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sparza.cli import app
from sparza.config import Config
from sparza.streams import SystemStreamPartition
from sparza.systems.delta import DeltaSystemConsumer, StreamNotFoundError

runner = CliRunner()


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_create_load_describe_tail(work_dir: Path) -> None:
    location = str(work_dir / "events")
    assert "created: 4 partitions" in _ok("stream", "create", location, "--partitions", "4")
    assert "already exists" in _ok("stream", "create", location, "--partitions", "4")
    data = work_dir / "events.jsonl"
    data.write_text("\n".join(json.dumps({"user": f"u{i % 5}", "n": i, "at": f"2024-05-01T00:00:{i:02d}Z"})
                              for i in range(40)) + "\n")
    assert "loaded 40 messages" in _ok("stream", "load", location, str(data), "--key", "user",
                                       "--timestamp", "at", "--batch", "15")
    described = _ok("stream", "describe", location)
    assert "sparza.partitions = 4" in described and "upcoming" in described
    lines = _ok("stream", "tail", location, "-n", "3", "--serde", "json").strip().splitlines()
    assert len(lines) == 3
    assert [json.loads(line.split(": ", 1)[1])["n"] for line in lines] == [37, 38, 39]
    assert "2024-05-01T00:00:39.000+00:00" in lines[-1]
    # The loaded rows: key = the column, event time from ISO-8601, value = the JSON line.
    config = Config({"systems.delta.streams.events.delta.location": location})
    rows = [e for p in range(4) for e in DeltaSystemConsumer("delta", config).read(
        SystemStreamPartition("delta", "events", p), None)]
    assert len(rows) == 40
    first = min(rows, key=lambda e: e.timestamp)
    assert first.timestamp == 1714521600000 and first.key == b"u0" and json.loads(first.message)["n"] == 0


def test_csv_with_epoch_ms_compact_and_truncate(work_dir: Path) -> None:
    root = str(work_dir / "root")
    data = work_dir / "rows.csv"
    data.write_text("id,ts,v\n" + "".join(f"{i},{1000 + i},x{i}\n" for i in range(30)))
    _ok("stream", "load", "clicks", str(data), "--key", "id", "--timestamp", "ts", "--partitions", "2",
        "--batch", "5", "--root", root)
    before = _ok("stream", "tail", "clicks", "-n", "30", "--root", root)
    assert "merged" in _ok("stream", "compact", "clicks", "--root", root)
    assert _ok("stream", "tail", "clicks", "-n", "30", "--root", root) == before
    assert "oldest kept version 3" in _ok("stream", "truncate", "clicks", "--before-version", "3", "--root", root)
    assert len(_ok("stream", "tail", "clicks", "-n", "30", "--root", root).strip().splitlines()) == 20


def test_errors_are_clear(work_dir: Path) -> None:
    result = runner.invoke(app, ["stream", "describe", str(work_dir / "missing")])
    assert isinstance(result.exception, StreamNotFoundError)
    assert "sparza stream create" in str(result.exception)
    data = work_dir / "x.jsonl"
    data.write_text('{"a": 1}\n')
    _ok("stream", "create", str(work_dir / "s"), "-p", "1")
    result = runner.invoke(app, ["stream", "load", str(work_dir / "s"), str(data), "--key", "nope"])
    assert result.exception is not None and "--key" in str(result.exception)


def test_cli_on_azurite(work_dir: Path, azure_connection_string: str, unique_name: str) -> None:
    env = {"AZURE_STORAGE_CONNECTION_STRING": azure_connection_string}
    location = f"az://{unique_name}cli/streams/events"

    def ok(*args: str) -> str:
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == 0, (result.output, result.exception)
        return result.output

    assert "created: 2 partitions" in ok("stream", "create", location, "--partitions", "2")
    data = work_dir / "e.jsonl"
    data.write_text("".join(json.dumps({"id": i, "ts": 1000 + i}) + "\n" for i in range(12)))
    assert "loaded 12 messages" in ok("stream", "load", location, str(data), "--key", "id", "--timestamp", "ts")
    assert "sparza.partitions = 2" in ok("stream", "describe", location)
    lines = ok("stream", "tail", location, "-n", "2", "--serde", "json").strip().splitlines()
    assert [json.loads(line.split(": ", 1)[1])["id"] for line in lines] == [10, 11]
