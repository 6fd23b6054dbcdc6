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


def _loaded_values(location: str) -> list[int]:
    """The ``n`` of every message in the stream (sorted): each loaded line must appear exactly once."""
    from deltalake import DeltaTable

    table = DeltaTable(location).to_pyarrow_table(columns=["value", "type"])
    return sorted(json.loads(v)["n"] for v, t in zip(table.column("value").to_pylist(),
                                                      table.column("type").to_pylist(), strict=True) if t == 0)


def _lines(numbers: range, bad: int | None = None) -> str:
    return "".join(("{not json\n" if i == bad else json.dumps({"k": f"k{i % 3}", "n": i}) + "\n") for i in numbers)


def test_a_bad_line_commits_nothing_says_so_and_the_fixed_file_loads_once(work_dir: Path) -> None:
    import subprocess
    import sys

    location = str(work_dir / "events")
    _ok("stream", "create", location, "--partitions", "2")
    data = work_dir / "e.jsonl"
    data.write_text(_lines(range(30), bad=24))  # line 25, after two commits of 10
    result = subprocess.run([sys.executable, "-c", "from sparza.cli import main; main()", "stream", "load", location,
                             str(data), "--key", "k", "--batch", "10"], capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, "COLUMNS": "400"}, check=False)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert f"{data}:25: not a JSON line" in lines[0] and "nothing was loaded" in lines[0]
    assert _loaded_values(location) == []
    data.write_text(_lines(range(30)))
    assert "loaded 30 messages" in _ok("stream", "load", location, str(data), "--key", "k", "--batch", "10")
    assert _loaded_values(location) == list(range(30))


def test_reloading_a_file_writes_only_what_is_missing(work_dir: Path, monkeypatch) -> None:
    from sparza.systems.delta import DeltaSystemProducer

    location = str(work_dir / "events")
    _ok("stream", "create", location, "--partitions", "2")
    data = work_dir / "e.jsonl"
    data.write_text(_lines(range(35)))
    # The third commit fails (storage trouble): the real producer, with a failure injected around it.
    real_flush = DeltaSystemProducer.flush
    calls = []

    def failing_flush(self, source, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("injected: storage went away")
        return real_flush(self, source, **kwargs)

    monkeypatch.setattr(DeltaSystemProducer, "flush", failing_flush)
    result = runner.invoke(app, ["stream", "load", location, str(data), "--key", "k", "--batch", "10"])
    assert result.exception is not None
    message = str(result.exception)
    assert "committed 20 of 35 messages" in message and "injected: storage went away" in message
    assert "run the same command again" in message
    assert _loaded_values(location) == list(range(20))
    monkeypatch.setattr(DeltaSystemProducer, "flush", real_flush)
    # Again, with another batch size: only the 15 missing messages are written.
    out = _ok("stream", "load", location, str(data), "--key", "k", "--batch", "7")
    assert "loaded 15 messages" in out and "20 already loaded" in out
    assert _loaded_values(location) == list(range(35))
    # And once more: nothing to do, nothing written.
    out = _ok("stream", "load", location, str(data), "--key", "k")
    assert "already loaded" in out and "nothing written" in out
    assert _loaded_values(location) == list(range(35))
