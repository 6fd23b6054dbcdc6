"""What a task's message handling raises is classified (sparza.errors.classify) and treated as what it is.

In-process through the runtime's own executor code (TestRunner, no Spark): a record with a data error
(a typed table's NOT NULL violation, input that does not deserialize) fails the job at once naming the
stream, partition, offset, key and column, or goes to ``task.dead.letter.stream`` with its error, counted;
configuration and system errors are never hidden by ``task.ignored.exceptions``.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from sparza.errors import ConfigError
from sparza.runtime import JobFailedError
from sparza.runtime.driver.report import Discards
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.testing import TestMessage, TestRunner

STATS = SystemStream("tables", "stats")


class ToTable:
    """Copies each JSON input (bytes, or decoded by a json serde) into the typed table tables.stats (page NOT NULL)."""

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        body = envelope.message if isinstance(envelope.message, dict) else json.loads(envelope.message)
        collector.send(OutgoingMessageEnvelope(STATS, body, key=envelope.key))


class ToWhereTheConfigSays:
    """Sends every message to the stream named by the job's own setting out.stream (a key built at run time,
    so the start check cannot see that the job writes there: the failure comes from the runtime)."""

    def init(self, context: Any) -> None:
        key = ".".join(("out", "stream"))
        self.out = SystemStream.parse(context.config.get(key))

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        collector.send(OutgoingMessageEnvelope(self.out, envelope.message, key=envelope.key))


def _records(seed: int, n: int = 60) -> list[tuple[bytes, dict[str, Any]]]:
    """(key, body) pairs; about one in six has no page (the typed table's NOT NULL column)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body: dict[str, Any] = {"views": rng.randint(0, 99)}
        if rng.random() > 1 / 6:
            body["page"] = f"p{rng.randint(0, 9)}"
        out.append((f"u{i}".encode(), body))
    return out


def _config(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"systems.tables.samza.factory": "delta", "systems.tables.delta.root": str(tmp_path / "tables"),
            "systems.tables.streams.stats.delta.table.schema": "page string not null, views long",
            "task.max.batch.messages": "7", **extra}


def _run(tmp_path: Path, records: list[tuple[bytes, dict[str, Any]]], **extra: str) -> tuple[TestRunner, Discards]:
    runner = TestRunner.of(ToTable, _config(tmp_path, **extra))
    runner.add_input("delta.events", [TestMessage(json.dumps(b).encode(), key=k) for k, b in records], partitions=3)
    if "task.dead.letter.stream" in extra:
        runner.add_output(extra["task.dead.letter.stream"], partitions=2)
    discards = Discards()
    while (report := runner.run_batch()).ran:
        for results in report.results.values():
            discards.add(Discards.of(results))
    return runner, discards


def test_a_not_null_violation_fails_at_once_naming_the_record(tmp_path: Path) -> None:
    records = _records(seed=3)
    bad = next(k for k, b in records if "page" not in b)
    with pytest.raises(JobFailedError) as failed:
        _run(tmp_path, records)
    text = str(failed.value)
    assert "data error in task 'Partition " in text and "delta.events#" in text and " offset " in text
    assert "column 'page'" in text and "NOT NULL" in text
    assert "task.dead.letter.stream" in text and "TaskAttemptError" not in text   # a failed row: no Spark retry
    # the first bad record of the failing task is the one named
    assert any(f"b'{k.decode()}'" in text for k, b in records if "page" not in b), (bad, text)


def test_records_with_data_errors_go_to_the_dead_letter_stream_with_their_error(tmp_path: Path) -> None:
    records = _records(seed=5)
    runner, discards = _run(tmp_path, records, **{"task.dead.letter.stream": "delta.dead"})
    with runner:
        dead = runner.outputs("delta.dead")
    expected_bad = {k: b for k, b in records if "page" not in b}
    assert discards.dead_lettered == len(expected_bad) > 0
    assert "sent to the dead-letter stream" in discards.describe()
    got: dict[bytes, dict[str, Any]] = {}
    for message in dead:
        doc = json.loads(message.value)
        assert doc["kind"] == "data error" and doc["column"] == "page" and "NOT NULL" in doc["error"]
        assert doc["ssp"].startswith("delta.events#") and doc["offset"] is not None
        got[base64.b64decode(doc["key_base64"])] = json.loads(base64.b64decode(doc["value_base64"]))
    assert got == expected_bad
    table = DeltaTable(str(tmp_path / "tables" / "stats")).to_pyarrow_table().to_pylist()
    assert sorted((r["page"], r["views"]) for r in table) == sorted(
        (b["page"], b["views"]) for _, b in records if "page" in b)


def test_input_that_does_not_deserialize_goes_to_the_dead_letter_stream(tmp_path: Path) -> None:
    good = [(f"k{i}".encode(), {"page": "p", "views": i}) for i in range(5)]
    runner = TestRunner.of(ToTable, _config(tmp_path, **{"task.dead.letter.stream": "delta.dead",
                                                         "systems.delta.streams.events.samza.msg.serde": "json"}))
    messages = [TestMessage(json.dumps(b).encode(), key=k) for k, b in good]
    messages.insert(2, TestMessage(b"{not json", key=b"broken"))
    runner.add_input("delta.events", messages, partitions=1).add_output("delta.dead", partitions=1)
    with runner:
        runner.run()
        dead = [json.loads(m.value) for m in runner.outputs("delta.dead")]
    assert len(dead) == 1 and base64.b64decode(dead[0]["value_base64"]) == b"{not json"
    assert "SerdeError" in dead[0]["error"] and dead[0]["offset"] is not None


@pytest.mark.parametrize(("out", "kind"), [("nosuch.stream", "configuration error"),
                                            ("delta.missing", "system error")])
def test_config_and_system_errors_are_not_task_exceptions(tmp_path: Path, out: str, kind: str) -> None:
    """Listing every exception in task.ignored.exceptions once dropped every message of a job whose output
    could not work, and committed; such errors are not the task's and cannot be ignored."""
    runner = TestRunner.of(ToWhereTheConfigSays, {"out.stream": out, "task.ignored.exceptions": "*"})
    runner.add_input("delta.events", [TestMessage(b"v", key=b"k")])
    with runner, pytest.raises(JobFailedError) as failed:
        runner.run()
    assert f"{kind} in task 'Partition 0'" in str(failed.value)
    assert "task.ignored.exceptions" not in str(failed.value).split("next:", 1)[1]
    # What sparza run exits with: 2 for a configuration error, as when found at start; 1 otherwise.
    assert isinstance(failed.value, ConfigError) == (kind == "configuration error")
