from __future__ import annotations

import json
import urllib.request

import pytest

from sparza.devstorage import free_port
from sparza.errors import ConfigError, SerdeError
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
    assert 'sparza_messages_sent_total{group="aggregate"} 5.0' in body
    assert 'sparza_watermark{group="task"} 123.0' in body


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
