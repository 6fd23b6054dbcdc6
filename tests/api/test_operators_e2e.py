"""Each new operator end to end through a real ``sparza run`` process (Spark, Delta streams and tables): a
stream-stream join, session windows upserted into a typed table (a merged-away session's row deleted), and
early/late triggers. Small inputs; checked against plain-Python expectations."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer
from sparza.testing.oracle import read_delta_values

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _config(tmp_path: Path, app: str, **extra: Any) -> dict[str, str]:
    values = {"job.name": "ops", "job.id": "1", "app.class": f"sparza.api.examples.{app}",
              "job.logged.store.base.dir": str(tmp_path / "state"), "blob.store.manager.factory": "local",
              "blob.store.local.root": str(tmp_path / "blobs"), "systems.delta.samza.factory": "delta",
              "systems.delta.samza.offset.default": "oldest", "systems.delta.delta.root": str(tmp_path / "streams"),
              "app.example.partitions": "2", "task.commit.ms": "0", "spark.master": "local[2]", **extra}
    return {k: str(v) for k, v in values.items()}


def _write(config: dict[str, str], stream: str, rows: list[tuple[int, Any, int]], partitions: int = 2) -> None:
    """Append ``(partition, JSON value, event time)`` rows to ``delta.<stream>`` (created if new)."""
    cfg = Config(config)
    DeltaSystemAdmin("delta", cfg).create_stream(StreamSpec(stream, partitions))
    producer = DeltaSystemProducer("delta", cfg)
    producer.register("test")
    for partition, value, ts in rows:
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", stream), json.dumps(value).encode(),
                                                      partition=partition, timestamp=ts))
    producer.flush("test")


def _sparza_run(tmp_path: Path, config: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"job-{len(list(tmp_path.glob('job-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    sparza = str(Path(sys.executable).with_name("sparza"))
    done = subprocess.run([sparza, "run", "--config", str(path), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_orders_join_payments_within_the_bound_through_sparza_run(tmp_path: Path) -> None:
    orders = [{"order": i, "amount": 10 * i} for i in range(12)]
    payments = [{"order": i, "paid": 10 * i} for i in range(12) if i % 3]
    order_ts = {o["order"]: 1000 * o["order"] for o in orders}
    pay_ts = {p["order"]: 1000 * p["order"] + (400 if p["order"] % 2 else 1600) for p in payments}  # odd: in time
    config = _config(tmp_path, "PaidOrders", **{"app.example.within.ms": 1000, "app.example.join.kind": "left",
                                                "systems.delta.streams.orders.bounded": "true",
                                                "systems.delta.streams.payments.bounded": "true",
                                                "task.max.batch.messages": 3})
    _write(config, "orders", [(o["order"] % 2, o, order_ts[o["order"]]) for o in orders])
    _write(config, "payments", [(p["order"] % 2, p, pay_ts[p["order"]]) for p in payments])
    DeltaSystemAdmin("delta", Config(config)).create_stream(StreamSpec("out", 2))
    _sparza_run(tmp_path, config)
    got = Counter(json.dumps(json.loads(v), sort_keys=True) for v in read_delta_values(tmp_path / "streams" / "out"))
    expected: Counter[str] = Counter()
    for o in orders:
        paid = [p for p in payments if p["order"] == o["order"] and abs(pay_ts[p["order"]] - order_ts[o["order"]])
                <= 1000]
        for p in paid or [None]:
            expected[json.dumps({"order": o["order"], "amount": o["amount"], "paid": p and p["paid"]},
                                sort_keys=True)] += 1
    assert got == expected
    assert sum(1 for v in got if json.loads(v)["paid"] is None) == 8  # orders 0, 3, 6, 9 unpaid; 2, 4, 8, 10 late


def test_sessions_upserted_into_a_typed_table_and_a_merged_session_deleted_through_sparza_run(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    config = _config(tmp_path, "KeySessions", **{"app.example.gap.ms": 100, "app.example.lateness.ms": 2000,
                                                 "task.max.batch.messages": 1})
    # First run (unbounded, --once): two sessions of "a", [0, 100) and [180, 280), fire on time when the watermark
    # reaches 1000; "b" has one.
    _write(config, "events", [(0, {"key": "a", "n": 1}, 0), (0, {"key": "a", "n": 2}, 180),
                              (1, {"key": "b", "n": 4}, 500), (0, {"key": "a", "n": 8}, 1000),
                              (1, {"key": "b", "n": 16}, 1000)])
    _sparza_run(tmp_path, config, "--once")
    table = tmp_path / "streams" / "sessions"
    rows = {(r["key"], r["window_start"]): r for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist()}
    assert {k: (r["window_end"], r["count"], r["pane"]) for k, r in rows.items() if r["window_end"] <= 1000} == {
        ("a", 0): (100, 1, "on_time"), ("a", 180): (280, 1, "on_time"), ("b", 500): (600, 1, "on_time")}
    # Second run (bounded now): a late message at 90 bridges both sessions of "a": [180, 280) is retracted (its
    # row deleted) and [0, 280) fires late; end-of-stream fires the rest.
    _write(config, "events", [(0, {"key": "a", "n": 32}, 90)])
    _sparza_run(tmp_path, {**config, "systems.delta.streams.events.bounded": "true"})
    final = DeltaTable(str(table))
    rows = {(r["key"], r["window_start"]): (r["window_end"], r["count"], r["sum"], r["pane"])
            for r in final.to_pyarrow_table().to_pylist()}
    assert rows == {("a", 0): (280, 3, 35, "late"), ("a", 1000): (1100, 1, 8, "on_time"),
                    ("b", 500): (600, 1, 4, "on_time"), ("b", 1000): (1100, 1, 16, "on_time")}
    deleted = sum(int((h.get("operationMetrics") or {}).get("num_target_rows_deleted", 0)) for h in final.history())
    assert deleted == 1


def test_early_and_on_time_panes_through_sparza_run(tmp_path: Path) -> None:
    events = [(i % 2, {"key": f"k{i % 3}", "n": i}, 100 * i) for i in range(30)]
    config = _config(tmp_path, "EarlyCounts", **{"app.example.window.ms": 1000, "app.example.early.messages": 2,
                                                 "systems.delta.streams.events.bounded": "true",
                                                 "task.max.batch.messages": 4})
    _write(config, "events", events)
    DeltaSystemAdmin("delta", Config(config)).create_stream(StreamSpec("out", 2))
    _sparza_run(tmp_path, config)
    panes = [json.loads(v) for v in read_delta_values(tmp_path / "streams" / "out")]
    windows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in panes:
        windows.setdefault((p["key"], p["start"]), []).append(p)
    expected: dict[tuple[str, int], tuple[int, int]] = {}
    for _, e, ts in events:
        count, total = expected.get((e["key"], ts - ts % 1000), (0, 0))
        expected[(e["key"], ts - ts % 1000)] = (count + 1, total + e["n"])
    assert set(windows) == set(expected)
    for ident, fired in windows.items():
        fired.sort(key=lambda p: p["index"])
        count, total = expected[ident]
        assert [p["index"] for p in fired] == list(range(len(fired)))
        # every 2 messages an early pane while the window is open, then the on-time pane with everything
        assert [p["pane"] for p in fired] == ["early"] * (count // 2) + ["on_time"]
        assert [p["count"] for p in fired[:-1]] == [2 * (k + 1) for k in range(count // 2)]
        assert (fired[-1]["count"], fired[-1]["sum"]) == (count, total)
