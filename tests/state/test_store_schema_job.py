"""A job whose store value changes shape between versions, end to end through the runtime (``TestRunner``).

Version 1 counts visits per key in an Avro store; version 2 adds a field with a default (``since``: the version
that first saw the key) and goes on from version 1's committed state, on the same host or on a fresh state dir
restored from the blob store. The oracle replays the input in plain Python: every key's count continues exactly,
old keys read the default, keys version 2 first saw hold 2, and each key's outputs are 1, 2, ... n with nothing
lost or repeated.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from typing import Any

import pytest

from sparza.runtime import JobFailedError
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream
from sparza.testing import TestMessage, TestRunner

OUT = SystemStream("mem", "visits")
V1 = {"type": "record", "name": "Visits", "namespace": "test.jobs", "fields": [{"name": "count", "type": "long"}]}
V2 = {"type": "record", "name": "Visits", "namespace": "test.jobs",
      "fields": [{"name": "count", "type": "long"}, {"name": "since", "type": "int", "default": 1}]}


class VisitCount:
    """Counts messages per key in store ``visits``; from ``visits.version: 2`` on, also keeps ``since``."""

    def init(self, context: Any) -> None:
        """Take the store and the version."""
        self.store = context.get_store("visits")
        self.version = int(context.config.get("visits.version", "1"))

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        """Add one to the key's count and send it."""
        key = envelope.key.decode()
        old = self.store.get(key)
        record: dict[str, Any] = {"count": (old["count"] if old else 0) + 1}
        if self.version >= 2:
            record["since"] = old["since"] if old else self.version
        self.store.put(key, record)
        collector.send(OutgoingMessageEnvelope(OUT, {"key": key, **record}, key=key))


def _config(factory: str, schema: Any, **extra: str) -> dict[str, str]:
    return {"stores.visits.factory": factory, "stores.visits.key.serde": "string",
            "stores.visits.msg.serde": "avro", "stores.visits.msg.schema": json.dumps(schema),
            "stores.visits.backup.factories": "blobstore", "task.max.batch.messages": "7",
            "systems.mem.streams.visits.samza.key.serde": "string",
            "systems.mem.streams.visits.samza.msg.serde": "json", **extra}


def _messages(rng: random.Random, n: int, keys: list[str]) -> list[TestMessage]:
    return [TestMessage(b"v", key=rng.choice(keys).encode()) for _ in range(n)]


def _check_outputs(runner: TestRunner, counts: Counter[str]) -> None:
    per_key: dict[str, list[int]] = {}
    for value in runner.values("mem.visits"):
        per_key.setdefault(value["key"], []).append(value["count"])
    assert {k: sorted(v) for k, v in per_key.items()} == {k: list(range(1, n + 1)) for k, n in counts.items()}


def _store(runner: TestRunner) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for contents in runner.store("visits").values():
        assert not set(merged) & set(contents), "a key is in two tasks' stores"
        merged.update(contents)
    return merged


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
@pytest.mark.parametrize("fresh_host", [False, True], ids=["same-host", "fresh-state-dir"])
def test_version_two_reads_version_one_state_and_counts_continue_exactly(factory: str, fresh_host: bool) -> None:
    rng = random.Random(7)
    old_keys = [f"user{i}" for i in range(12)]
    new_keys = [f"newcomer{i}" for i in range(5)]
    first = _messages(rng, 90, old_keys)
    second = _messages(rng, 70, old_keys[:6] + new_keys)
    with TestRunner.of(VisitCount, _config(factory, V1)) as runner:
        runner.add_input("mem.events", first, partitions=3).add_output("mem.visits", partitions=3)
        runner.run()
        v1_counts = Counter(m.key.decode() for m in first)
        assert _store(runner) == {k: {"count": n} for k, n in v1_counts.items()}
        if fresh_host:
            shutil.rmtree(runner.state_dir)  # the local stores are gone: restored from the blob store
        runner.restart(crashed=False, config={"stores.visits.msg.schema": json.dumps(V2), "visits.version": "2"})
        runner.add_input("mem.events", second)
        runner.run()
        counts = Counter(m.key.decode() for m in first + second)
        since = {k: 1 if k in v1_counts else 2 for k in counts}
        assert _store(runner) == {k: {"count": n, "since": since[k]} for k, n in counts.items()}
        _check_outputs(runner, counts)
        # Version 2's outputs of keys version 1 saw carry the default of the new field.
        assert {v["since"] for v in runner.values("mem.visits") if "since" in v and v["key"] in v1_counts} == {1}


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
def test_an_incompatible_version_is_refused_at_start_and_the_old_one_still_runs(factory: str) -> None:
    rng = random.Random(3)
    first = _messages(rng, 40, ["a", "b", "c", "d"])
    broken = {**V2, "fields": [V2["fields"][0], {"name": "since", "type": "int"}]}  # no default
    with TestRunner.of(VisitCount, _config(factory, V1)) as runner:
        runner.add_input("mem.events", first, partitions=2).add_output("mem.visits", partitions=2)
        runner.run()
        runner.restart(crashed=False, config={"stores.visits.msg.schema": json.dumps(broken), "visits.version": "2"})
        runner.add_input("mem.events", [TestMessage(b"v", key=b"a")])
        with pytest.raises(JobFailedError) as refused:
            runner.run()
        text = str(refused.value)
        assert "store 'visits'" in text and "field 'since': is new and has no \"default\"" in text, text
        runner.restart(crashed=False, config={"stores.visits.msg.schema": json.dumps(V1), "visits.version": "1"})
        runner.run()
        counts = Counter(m.key.decode() for m in first)
        counts["a"] += 1
        assert _store(runner) == {k: {"count": n} for k, n in counts.items()}
        _check_outputs(runner, counts)


def test_a_samza_store_moving_from_json_to_avro_needs_a_declared_migration() -> None:
    rng = random.Random(5)
    first = _messages(rng, 50, ["a", "b", "c", "d", "e"])
    as_json = {**_config("rocksdb", V1), "stores.visits.msg.serde": "json"}
    del as_json["stores.visits.msg.schema"]
    with TestRunner.of(VisitCount, as_json) as runner:
        runner.add_input("mem.events", first, partitions=2).add_output("mem.visits", partitions=2)
        runner.run()
        runner.restart(crashed=False, config={"stores.visits.msg.serde": "avro",
                                              "stores.visits.msg.schema": json.dumps(V2), "visits.version": "2"})
        # One message for each task (a and d live in different partitions): in the container mode a task with no
        # new input runs no batch, so only the tasks that run open (and convert) their stores.
        runner.add_input("mem.events", [TestMessage(b"v", key=b"a"), TestMessage(b"v", key=b"d")])
        with pytest.raises(JobFailedError, match="declaring stores.visits.msg.migrate.from: json"):
            runner.run()
        runner.restart(crashed=False, config={"stores.visits.msg.migrate.from": "json"})
        runner.run()
        counts = Counter(m.key.decode() for m in first)
        counts["a"] += 1
        counts["d"] += 1
        assert _store(runner) == {k: {"count": n, "since": 1} for k, n in counts.items()}
        _check_outputs(runner, counts)


@pytest.mark.parametrize("factory", ["rocksdb", "memory"])
@pytest.mark.parametrize("step", ["after-flush", "after-snapshot", "after-checkpoint"])
def test_a_crash_in_the_first_batch_of_version_two_converts_again_and_loses_nothing(factory: str, step: str) -> None:
    from sparza.testing.faults import InjectedFault

    rng = random.Random(11)
    first = _messages(rng, 60, [f"u{i}" for i in range(8)])
    second = _messages(rng, 40, [f"u{i}" for i in range(4)] + ["fresh"])
    with TestRunner.of(VisitCount, _config(factory, V1)) as runner:
        runner.add_input("mem.events", first, partitions=2).add_output("mem.visits", partitions=2)
        runner.run()
        runner.restart(crashed=False, config={"stores.visits.msg.schema": json.dumps(V2), "visits.version": "2"})
        runner.add_input("mem.events", second)
        runner.fail_at(step, task="Partition 1")
        with pytest.raises(InjectedFault):
            runner.run()
        runner.restart()  # the process died in the middle of the converted store's first commit
        runner.advance_time(60_000)
        runner.run()
        counts = Counter(m.key.decode() for m in first + second)
        v1_keys = {m.key.decode() for m in first}
        assert _store(runner) == {k: {"count": n, "since": 1 if k in v1_keys else 2} for k, n in counts.items()}
        _check_outputs(runner, counts)
