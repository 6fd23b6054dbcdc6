from __future__ import annotations

import json
import urllib.request

import pytest

from sparza.errors import ConfigError, SerdeError
from sparza.host import free_port
from sparza.metrics import JsonLinesReporter, MetricsRegistry, PrometheusExporter
from sparza.serde import AvroRecord, AvroSerde, BytesSerde, JsonSerde, StringSerde, serde_from_name
from sparza.streams import MessageType, SystemStream, SystemStreamPartition, parse_input_list

SCHEMA = {"type": "record", "name": "Edit", "fields": [{"name": "page", "type": "string"},
                                                       {"name": "delta", "type": "long"}]}


def test_stream_names_round_trip():
    ssp = SystemStreamPartition.parse("delta.page-edits#3")
    assert ssp == SystemStreamPartition("delta", "page-edits", 3)
    assert str(ssp) == "delta.page-edits#3"
    assert ssp.system_stream == SystemStream("delta", "page-edits")
    assert SystemStream.parse("delta.a.b") == SystemStream("delta", "a.b")
    with pytest.raises(ValueError):
        SystemStream.parse("nodot")
    with pytest.raises(ValueError):
        SystemStreamPartition.parse("delta.x#y")
    assert MessageType(2) is MessageType.END_OF_STREAM


def test_input_lists():
    parsed = parse_input_list("task.broadcast.inputs", ["delta.a", "delta.b#2", "delta.c#[0-2]"])
    assert parsed == [(SystemStream("delta", "a"), None), (SystemStream("delta", "b"), [2]),
                      (SystemStream("delta", "c"), [0, 1, 2])]
    with pytest.raises(ConfigError, match="task.broadcast.inputs"):
        parse_input_list("task.broadcast.inputs", ["delta.c#[3-1]"])


def test_registry_snapshot_and_jsonl(tmp_path):
    reg = MetricsRegistry()
    reg.counter("aggregate", "messages_sent").inc(3)
    reg.counter("aggregate", "messages_sent").inc()
    reg.gauge("out", "lag").set(7)
    with reg.timer("out", "flush").time():
        pass
    snap = reg.snapshot()
    assert snap["aggregate"]["messages_sent"] == 4
    assert snap["out"]["lag"] == 7
    assert snap["out"]["flush"]["count"] == 1
    with pytest.raises(TypeError):
        reg.gauge("aggregate", "messages_sent")
    target = tmp_path / "metrics.jsonl"
    JsonLinesReporter(reg, target, source="job").report()
    line = json.loads(target.read_text().splitlines()[0])
    assert line["metrics"]["aggregate"]["messages_sent"] == 4
    assert line["source"] == "job"


def test_prometheus_endpoint():
    reg = MetricsRegistry()
    reg.counter("aggregate", "messages-sent").inc(5)
    reg.gauge("task", "watermark").set(123)
    port = free_port()
    exporter = PrometheusExporter(reg, port)
    exporter.start()
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        exporter.stop()
    assert 'sparza_messages_sent_total{group="aggregate",sparza_job="",task=""} 5.0' in body
    assert 'sparza_watermark{group="task",sparza_job="",task=""} 123.0' in body


def test_changes_carry_each_count_once_with_its_kind():
    worker = MetricsRegistry()  # long-lived, as a producer's on an executor
    driver = MetricsRegistry()
    worker.counter("delta", "commits").inc(2)
    worker.gauge("control", "task-watermark").set(1000)
    worker.timer("delta", "flush-ms").update(5.0)
    driver.merge_changes(worker.changes(), "Partition 0:")
    worker.counter("delta", "commits").inc()
    worker.gauge("control", "task-watermark").set(2000)
    worker.timer("delta", "flush-ms").update(7.0)
    worker.timer("delta", "flush-ms").update(1.0)
    driver.merge_changes(worker.changes(), "Partition 0:")
    assert worker.changes() == {"control": {"task-watermark": ["g", 2000]}}  # nothing moved: gauges only
    snap = driver.snapshot()["Partition 0:delta"]
    assert snap["commits"] == 3  # added once each, not re-added from the cumulative value
    assert driver.snapshot()["Partition 0:control"]["task-watermark"] == 2000  # a gauge: set, never summed
    assert snap["flush-ms"]["count"] == 3 and snap["flush-ms"]["total_ms"] == 13.0
    assert snap["flush-ms"]["max_ms"] == 7.0 and snap["flush-ms"]["last_ms"] == 1.0
    assert driver.total("commits", ":delta") == 3


def test_prometheus_labels_split_task_groups_and_one_port_serves_several_registries():
    from sparza.metrics import attach_prometheus

    stage1, stage2 = MetricsRegistry(), MetricsRegistry()
    stage1.counter("Partition 3:task", "messages-processed").inc(4)
    stage2.counter("aggregate", "eventWriteRate").inc(2)
    port = free_port()
    detach1 = attach_prometheus(stage1, port, labels={"sparza_job": "app-1-stage1"})
    detach2 = attach_prometheus(stage2, port, labels={"sparza_job": "app-1-stage2"})
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        detach1()
    assert 'sparza_messages_processed_total{group="task",sparza_job="app-1-stage1",task="Partition 3"} 4.0' in body
    assert 'sparza_event_write_rate_total{group="aggregate",sparza_job="app-1-stage2",task=""} 2.0' in body
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "app-1-stage1" not in body and "app-1-stage2" in body  # still served for the second
    detach2()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_serdes_round_trip_and_errors():
    assert BytesSerde().to_bytes(bytearray(b"x")) == b"x"
    with pytest.raises(SerdeError):
        BytesSerde().to_bytes("text")
    assert StringSerde().from_bytes("é".encode()) == "é"
    with pytest.raises(SerdeError, match="utf-8"):
        StringSerde().from_bytes(b"\xff\xfe")
    assert JsonSerde().from_bytes(JsonSerde().to_bytes({"a": [1, 2]})) == {"a": [1, 2]}
    with pytest.raises(SerdeError, match="not valid JSON"):
        JsonSerde().from_bytes(b"{nope")
    with pytest.raises(SerdeError, match="JSON"):
        JsonSerde().to_bytes(object())
    avro = AvroSerde(SCHEMA)
    data = avro.to_bytes({"page": "Main", "delta": -3})
    assert avro.from_bytes(data) == {"page": "Main", "delta": -3}
    assert avro.to_bytes(AvroRecord(SCHEMA, {"page": "Main", "delta": -3})) == data
    with pytest.raises(SerdeError, match="does not match"):
        avro.to_bytes({"page": 1})
    with pytest.raises(SerdeError):
        avro.from_bytes(b"\xff")


def test_serde_by_name():
    assert serde_from_name("json").name == "json"
    assert serde_from_name(None).name == "bytes"
    assert serde_from_name("avro", schema=json.dumps(SCHEMA)).name == "avro"
    with pytest.raises(ConfigError, match="stores.s.msg.serde"):
        serde_from_name("xml", key="stores.s.msg.serde")
    with pytest.raises(ConfigError, match="Avro schema"):
        serde_from_name("avro", key="k")


def test_json_serde_keeps_nan_and_infinity_and_reports_cycles():
    serde = JsonSerde()
    assert serde.to_bytes({"a": float("nan"), "b": None}) == b'{"a":NaN,"b":null}'
    assert serde.to_bytes([1.5, float("inf")]) == b"[1.5,Infinity]"
    back = serde.from_bytes(serde.to_bytes({"x": float("-inf")}))
    assert back == {"x": float("-inf")}
    assert serde.to_bytes({"key": "k", "count": 3}) == b'{"key":"k","count":3}'
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(SerdeError, match="Circular"):
        serde.to_bytes(loop)
