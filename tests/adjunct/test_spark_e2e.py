"""End to end on Spark: the runtime drives adjunct stores (real Spark, Delta, RocksDB, blob store).

What the task saw is written to the ``seen`` stream by :class:`adjunct_tasks.LookupTask`, and the
tests assert on it.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer
from sparza.testing import eventually

pytestmark = pytest.mark.spark


def _job(root: Path, *, broadcast: bool = False, bootstrap: bool = True, max_batch: int = 1000,
         order_partitions: int = 2, **extra: str) -> Config:
    values = {
        "job.name": "adj-e2e",
        "job.id": "1",
        "job.logged.store.base.dir": str(root / "state"),
        "task.class": "adjunct_tasks.LookupTask",
        "task.max.batch.messages": str(max_batch),
        "task.commit.ms": "0",
        "systems.delta.samza.factory": "delta",
        "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(root / "streams"),
        "stores.lookup.adstore.input": "delta.customers",
        "stores.lookup.key.serde": "string",
        "stores.lookup.msg.serde": "json",
        "stores.lookup.backup.factories": "blobstore",
        "systems.delta.streams.customers.samza.bootstrap": "true" if bootstrap else "false",
        "blob.store.manager.factory": "local",
        "blob.store.local.root": str(root / "blobstore"),
    }
    if broadcast:
        values["task.inputs"] = "delta.orders"
        values["task.broadcast.inputs"] = "delta.customers#[0-1]"
    else:
        values["task.inputs"] = "delta.orders,delta.customers"
    values.update(extra)
    config = Config(values)
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("orders", order_partitions))
    admin.create_stream(StreamSpec("customers", 2))
    admin.create_stream(StreamSpec("seen", 1))
    return config


def _send(config: Config, stream: str, rows: list[tuple[str, Any, int]]) -> None:
    producer = DeltaSystemProducer("delta", config)
    producer.register("t")
    producer.start()
    for key, value, partition in rows:
        body = None if value is None else json.dumps(value).encode()
        producer.send("t", OutgoingMessageEnvelope(SystemStream("delta", stream), body, key=key.encode(),
                                                   partition=partition))
    producer.flush("t")
    producer.stop()


def _customers(config: Config, values: dict[str, Any]) -> None:
    _send(config, "customers", [(k, v, int(k[1:]) % 2) for k, v in values.items()])


def _orders(config: Config, orders: list[tuple[int, str]], partitions: int = 2) -> None:
    _send(config, "orders", [(str(i), {"id": i, "customer": c}, i % partitions if partitions > 2 else int(c[1:]) % 2)
                             for i, c in orders])


def _seen(config: Config) -> dict[int, dict[str, Any]]:
    from deltalake import DeltaTable

    table = DeltaTable(str(Path(config["systems.delta.delta.root"]) / "seen")).to_pyarrow_table(columns=["value"])
    out: dict[int, dict[str, Any]] = {}
    for value in table.column("value").to_pylist():
        body = json.loads(value)
        out[body["order"]] = body
    return out


def _run(spark: Any, config: Config, **kwargs: Any) -> Any:
    from sparza.runtime import JobRunner

    status = kwargs.pop("status", lambda line: None)
    runner = JobRunner(config, spark=spark, once=kwargs.pop("once", True), install_signal_handlers=False,
                       status=status, **kwargs)
    runner.run()
    return runner


def _applied(runner: Any) -> int:
    snapshot = runner.metrics.snapshot()
    return sum(int(m.get("messages-applied", 0)) for g, m in snapshot.items() if "lookup" in g)


def _adjunct_entries(config: Config) -> dict[str, Any]:
    from sparza.runtime import checkpoint_store_from_config

    checkpoints = checkpoint_store_from_config(config, "adj-e2e-1").read_all()
    return {task: getattr(cp, "adjunct", None) for task, cp in checkpoints.items()}


def test_bootstrap_finishes_before_the_first_main_message(spark: Any, work_dir: Path) -> None:
    config = _job(work_dir, max_batch=40)  # 100 customers per partition: 3 batches of bootstrap
    customers = {f"c{i}": {"name": f"n{i}"} for i in range(200)}
    _customers(config, customers)
    _orders(config, [(i, f"c{i}") for i in range(0, 200, 5)])
    lines: list[str] = []
    _run(spark, config, status=lines.append)
    seen = _seen(config)
    assert len(seen) == 40
    progress = [line.split("bootstrap ", 1)[1] for line in lines if "bootstrap [" in line]
    assert progress and progress[-1].endswith("100% (200/200)"), lines  # a bar while bootstrapping, to the end
    missing = [o for o, body in seen.items() if body["found"] is None]
    assert missing == []  # every order, including the very first, saw its customer
    assert all(body["found"] == customers[body["customer"]] for body in seen.values())


def test_cdc_changes_are_visible_at_the_documented_batch(spark: Any, work_dir: Path) -> None:
    """Partitioned: a change read in a batch is visible to main messages of the same batch."""
    config = _job(work_dir, bootstrap=False)
    _customers(config, {"c1": {"v": 1}})
    _orders(config, [(1, "c1")])
    _run(spark, config)
    _customers(config, {"c1": {"v": 2}})  # update and order land in the same batch
    _orders(config, [(2, "c1")])
    _run(spark, config)
    _customers(config, {"c1": None})  # delete
    _orders(config, [(3, "c1")])
    _run(spark, config)
    seen = _seen(config)
    assert [seen[i]["found"] for i in (1, 2, 3)] == [{"v": 1}, {"v": 2}, None]


def test_broadcast_changes_are_visible_from_the_next_batch_in_every_task(spark: Any, work_dir: Path) -> None:
    # The micro-batch mode's visibility (a common batch number); containers read the newest publication.
    config = _job(work_dir, broadcast=True, bootstrap=False, order_partitions=4,
                  **{"job.execution.mode": "batches"})
    _customers(config, {"c1": {"v": 1}, "c2": {"v": 1}})
    _run(spark, config)  # batch: the builder applies and publishes
    _customers(config, {"c1": {"v": 2}, "c2": {"v": 2}})
    _orders(config, [(i, f"c{1 + i % 2}") for i in range(4)], partitions=4)  # same batch as the update
    _run(spark, config)
    _orders(config, [(i, f"c{1 + i % 2}") for i in range(4, 8)], partitions=4)
    _run(spark, config)
    seen = _seen(config)
    assert {seen[i]["task"] for i in range(4)} == {f"Partition {p}" for p in range(4)}
    assert [seen[i]["found"] for i in range(8)] == [{"v": 1}] * 4 + [{"v": 2}] * 4
    [container] = list((work_dir / "state").glob("*/_container/lookup"))  # <base>/<job>-<id>/_container
    assert len([p for p in container.iterdir() if p.is_dir()]) == 1  # one copy for the 4 tasks of this host
    assert not list((work_dir / "state").glob("*/lookup/Partition_1"))  # readers keep no copy of their own


def test_versioned_dataset_switches_atomically(spark: Any, work_dir: Path) -> None:
    from sparza.state.adjunct import end_of_dataset

    config = _job(work_dir, bootstrap=False, **{"stores.lookup.adstore.versioned": "true"})

    def seal() -> None:
        producer = DeltaSystemProducer("delta", config)
        producer.register("t")
        producer.start()
        for p in (0, 1):
            producer.send("t", end_of_dataset(SystemStream("delta", "customers"), p))
        producer.flush("t")
        producer.stop()

    keys = [f"c{i}" for i in range(10)]
    _customers(config, {k: {"ver": 1} for k in keys})
    seal()
    _run(spark, config)  # version 1 sealed: served from the next batch
    _customers(config, {k: {"ver": 2} for k in keys[:5]})  # half of version 2
    _orders(config, [(i, k) for i, k in enumerate(keys)])
    _run(spark, config)
    _customers(config, {k: {"ver": 2} for k in keys[5:9]})  # the rest of version 2, without c9
    seal()
    _orders(config, [(10 + i, k) for i, k in enumerate(keys)])  # same batch as the seal: still version 1
    _run(spark, config)
    _orders(config, [(20 + i, k) for i, k in enumerate(keys)])
    _run(spark, config)
    seen = _seen(config)
    assert [seen[i]["found"] for i in range(20)] == [{"ver": 1}] * 20
    assert [seen[20 + i]["found"] for i in range(10)] == [{"ver": 2}] * 9 + [None]


def test_restart_mid_bootstrap_resumes(spark: Any, work_dir: Path) -> None:
    # 100 bootstrap batches: a container runs batches back to back, so the stop (heard between two batches)
    # must come while many remain.
    size = 5000
    config = _job(work_dir, max_batch=50)
    customers = {f"c{i}": {"name": f"n{i}"} for i in range(size)}
    _customers(config, customers)
    _orders(config, [(i, f"c{i}") for i in range(50)])

    from sparza.runtime import JobRunner

    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()

    def every_task_applied_some() -> bool:
        entries = [e for e in _adjunct_entries(config).values() if e]
        return bool(entries) and all(e["stores"]["lookup"]["applied"] > 0 for e in entries)

    try:
        eventually(every_task_applied_some, 120, 0.2, "no task applied a bootstrap batch within 120 s")
    finally:
        runner.request_stop("test: stop mid-bootstrap")
        thread.join(timeout=120)
    first = _adjunct_entries(config)
    applied_first = sum(e["stores"]["lookup"]["applied"] for e in first.values() if e)
    assert 0 < applied_first < size
    assert any(not e["stores"]["lookup"]["bootstrap"]["done"] for e in first.values() if e)

    second = _run(spark, config)
    assert _applied(second) == size - applied_first  # resumed, did not start over
    seen = _seen(config)
    assert len(seen) == 50 and all(body["found"] is not None for body in seen.values())


def test_new_host_restores_the_store_from_the_blob_store(spark: Any, work_dir: Path) -> None:
    config = _job(work_dir)
    _customers(config, {f"c{i}": {"v": i} for i in range(300)})
    _orders(config, [(i, f"c{i}") for i in range(10)])
    _run(spark, config)
    shutil.rmtree(work_dir / "state")  # a new host: no local stores, no Spark checkpoint
    _customers(config, {"c1": {"v": "new"}})
    _orders(config, [(100, "c1"), (101, "c250")])
    runner = _run(spark, config)
    assert _applied(runner) == 1  # only the new change was read: the rest came from the snapshot
    seen = _seen(config)
    assert seen[100]["found"] == {"v": "new"} and seen[101]["found"] == {"v": 250}


@pytest.mark.parametrize("broadcast", [False, True], ids=["partitioned", "broadcast"])
def test_committed_snapshot_survives_gc_past_the_ttl_while_the_job_is_stopped(spark: Any, work_dir: Path,
                                                                              broadcast: bool) -> None:
    from sparza.blobstore import blob_store_manager_from_config, collect_garbage, system_clock_ms

    config = _job(work_dir, broadcast=broadcast, bootstrap=False)
    _customers(config, {f"c{i}": {"v": i} for i in range(40)})
    _run(spark, config)  # the store is built and committed (a broadcast builder also publishes it)
    # Stopped longer than blob.store.ttl.days (30) while the daily `sparza gc` runs, then a new host.
    manager = blob_store_manager_from_config(config)
    try:
        collect_garbage(manager, now_ms=system_clock_ms() + 31 * 86_400_000)
    finally:
        manager.close()
    shutil.rmtree(work_dir / "state")
    _orders(config, [(100, "c1"), (101, "c33")])
    _run(spark, config)
    seen = _seen(config)
    assert seen[100]["found"] == {"v": 1} and seen[101]["found"] == {"v": 33}


def _end_of_dataset(config: Config, *partitions: int) -> None:
    from sparza.state.adjunct import end_of_dataset

    producer = DeltaSystemProducer("delta", config)
    producer.register("t")
    producer.start()
    for p in partitions:
        producer.send("t", end_of_dataset(SystemStream("delta", "customers"), p))
    producer.flush("t")
    producer.stop()


def test_versioned_broadcast_dataset_seals_when_every_partition_has_its_marker(spark: Any, work_dir: Path) -> None:
    config = _job(work_dir, broadcast=True, bootstrap=False, **{"stores.lookup.adstore.versioned": "true"})
    keys = [f"c{i}" for i in range(10)]  # even keys in partition 0, odd keys in partition 1
    _customers(config, {k: {"ver": 1} for k in keys})
    _end_of_dataset(config, 0, 1)
    _run(spark, config)  # version 1 complete in both partitions: served from the next batch
    _orders(config, [(i, k) for i, k in enumerate(keys)])
    _customers(config, {k: {"ver": 2} for k in keys[0::2]})
    _end_of_dataset(config, 0)  # partition 0 has all of version 2 ...
    _send(config, "customers", [("c0", {"ver": 3}, 0)])  # ... and already starts version 3
    _customers(config, {k: {"ver": 2} for k in keys[1::2]})  # partition 1: version 2 without its marker yet
    _run(spark, config)
    _orders(config, [(10 + i, k) for i, k in enumerate(keys)])
    _end_of_dataset(config, 1)  # now version 2 is complete: served from the next batch
    _run(spark, config)
    _orders(config, [(20 + i, k) for i, k in enumerate(keys)])
    _run(spark, config)
    seen = _seen(config)
    assert [seen[i]["found"] for i in range(10)] == [{"ver": 1}] * 10  # version 2 incomplete through run 2
    # Run 3 read orders 10-19 and partition 1's marker. A lookup sees the newest complete version when its batch
    # runs: in container mode each task has its own batches, so a reader task's batch after the builder's sealing
    # batch may fall in the same run and see version 2; a task never goes back to version 1 once it saw version 2.
    for parity in (0, 1):
        versions = [seen[i]["found"]["ver"] for i in range(10 + parity, 20, 2)]
        assert set(versions) <= {1, 2} and versions == sorted(versions), versions
    assert [seen[20 + i]["found"] for i in range(10)] == [{"ver": 2}] * 10
