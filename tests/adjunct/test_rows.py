"""Adjunct messages handed over as runs of rows (``TaskAdjunctManager.on_rows``, what the runtime does
per SSP run, many times faster than one envelope per message) leave every store, offset, count and
checkpoint entry exactly as ``on_envelope`` of each message does: replays (already applied prefixes),
deletes, keys an extractor skips, objects that need the store's serde, and versioned datasets split
by end-of-dataset markers. Real RocksDB stores, real local blob store."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from adjunct_harness import AdjunctHarness

from sparza.state.adjunct import TaskAdjunctManager
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStreamPartition

P0 = SystemStreamPartition("d", "customers", 0)
MARKER = (b"__end_of_dataset__", b'{"endOfDataset":true,"label":""}', int(MessageType.END_OF_STREAM))


def _config(h: AdjunctHarness, **extra: str):
    return h.config(**{"task.inputs": "d.orders,d.customers", "stores.customers.adstore.input": "d.customers",
                       "stores.customers.key.serde": "string", "stores.customers.msg.serde": "json",
                       "stores.customers.backup.factories": "blobstore", **extra})


def _rows(rng: random.Random, n: int, versioned: bool, objects: bool) -> list[tuple[str, object, object, int]]:
    """(offset, key, value, type) in offset order: puts, deletes, skipped keys, markers."""
    out = []
    version = 1
    for i in range(n):
        offset = f"{version}:{i}"
        roll = rng.random()
        if versioned and roll < 0.03:
            out.append((offset, *MARKER))
            version += 1
            continue
        key = f"c{rng.randrange(40)}".encode()
        value: object = json.dumps({"n": i}).encode()
        if roll < 0.15:
            value = None  # delete
        elif objects and roll < 0.25:
            value = {"n": i, "object": True}  # through the store's serde
        elif objects and roll < 0.3:
            key = f"c{rng.randrange(40)}"  # a str key: through the key serde
        out.append((offset, key, value, int(MessageType.USER)))
    return out


def _feed_envelopes(manager: TaskAdjunctManager, rows) -> None:
    for offset, key, value, kind in rows:
        assert manager.on_envelope(IncomingMessageEnvelope(P0, offset, key, value, 0, 0, MessageType(kind)))


def _feed_runs(manager: TaskAdjunctManager, rows, rng: random.Random) -> None:
    i = 0
    while i < len(rows):
        j = min(len(rows), i + rng.randrange(1, 60))
        part = rows[i:j]
        assert manager.on_rows(P0, [r[0] for r in part], [r[1] for r in part], [r[2] for r in part],
                               [0] * len(part), [r[3] for r in part])
        i = j


def _state(manager: TaskAdjunctManager, batch: int) -> tuple:
    entry = manager.commit(batch)
    contents = dict(manager.get_store("customers").all())
    status = manager.status()["customers"]
    counts = manager.metrics.snapshot().get("adjunct-customers", {})
    for volatile in ("versions", "uncleaned", "retired"):  # snapshot-index ids differ per upload
        entry["stores"]["customers"].pop(volatile)
    return entry, contents, {k: status[k] for k in ("applied", "skipped", "offsets", "serving_version")}, counts


@pytest.mark.parametrize(("seed", "versioned", "objects"), [(s, s % 3 == 1, s % 2 == 0) for s in range(8)])
def test_runs_of_rows_leave_exactly_what_envelopes_leave(harness: AdjunctHarness, work_dir: Path, seed: int,
                                                         versioned: bool, objects: bool) -> None:
    harness.create("customers", 1)
    harness.create("orders", 1)
    rng = random.Random(seed)
    config = _config(harness, **({"stores.customers.adstore.versioned": "true"} if versioned else {}))
    rows = _rows(rng, 600, versioned, objects)
    replay_from = rng.randrange(100, 500)
    one = harness.manager("Partition 0", config, work_dir / "envelopes")
    two = harness.manager("Partition 0", config, work_dir / "rows")
    # the second half is delivered again from an earlier offset (a replayed or overlapping read)
    for manager, feed in ((one, _feed_envelopes), (two, lambda m, r: _feed_runs(m, r, rng))):
        feed(manager, rows[:500])
        feed(manager, rows[replay_from:])
    assert _state(one, 1) == _state(two, 1)
    one.close()
    two.close()


def test_an_already_applied_prefix_of_a_run_is_skipped(harness: AdjunctHarness, work_dir: Path) -> None:
    harness.create("customers", 1)
    harness.create("orders", 1)
    manager = harness.manager("Partition 0", _config(harness), work_dir / "host")
    rows = [(f"7:{i}", f"c{i}".encode(), json.dumps({"n": i}).encode()) for i in range(100)]

    def feed(part) -> None:
        manager.on_rows(P0, [r[0] for r in part], [r[1] for r in part], [r[2] for r in part], [0] * len(part),
                        [0] * len(part))

    feed(rows[:60])
    feed(rows[40:])  # 40..59 were applied: skipped, not applied twice
    status = manager.status()["customers"]
    assert (status["applied"], status["skipped"], status["offsets"]) == (100, 20, {str(P0): "7:99"})
    assert manager.metrics.snapshot()["adjunct-customers"] == {"messages-applied": 100, "messages-skipped": 20}
    assert dict(manager.get_store("customers").all()) == {f"c{i}": {"n": i} for i in range(100)}
    assert manager.on_rows(SystemStreamPartition("d", "orders", 0), ["1:0"], [b"k"], [b"v"], [0], [0]) is False
    manager.close()
