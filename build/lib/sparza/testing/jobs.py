"""The jobs the fault harness generates: small low-level tasks and one high-level application, all
driven by ``app.harness.*`` config keys so one class covers every generated shape.

Input messages are JSON objects ``{"id": int, "key": str, "n": int}`` (unique ``id``). Every output
is a :data:`RECORD_SCHEMA` record, so one reader serves Delta, Avro and JSON-lines outputs:

- ``copy`` (task; :class:`HarnessTask` per message, :class:`HarnessBatchTask` the same through the batch
  API): ``{id, key, val: n, aux: 0, tag: "copy"}`` per message;
- ``count`` (task, store ``counts``): ``{id, key, val: running count of key in the task, tag: "count"}``;
- ``filtermap`` (task): messages with ``n % 3 != 0`` as ``{…, val: n*n, tag: "fm0"}``, plus
  ``{…, val: n+1, tag: "fm1"}`` when ``n % 5 == 0``;
- ``pipeline`` (app): filter (or the ``filtermap`` rule) → ``partition_by(key)`` → [join ``profiles``]
  → ``{…, tag: "p" or the profile's}``;
- ``window`` (app): ``partition_by(key)`` → [join] → tumbling or sliding window (count, sum of n)
  → ``{id: start, key, val: count, aux: sum, tag: "w"}``; with triggers or an allowed lateness
  (``app.harness.early`` / ``.late`` / ``.lateness.ms``) every pane is a record tagged
  ``w:<pane>:<index>`` (pane ``early``, ``on_time``, ``late``): the newest pane of a window is its result;
- ``session`` (app): ``partition_by(key)`` → [join] → session window of ``app.harness.session.gap.ms``
  (count, sum of n; ``app.harness.session.merge``: merged accumulators) → ``{id: start, key, val: count,
  aux: sum, tag: "s:<pane>:<index>"}``, a retraction ``{…, val: 0, aux: 0, tag: "s:retract:<index>"}``;
- ``join`` (app): the input split by the parity of ``n`` (even: left, odd: right), each side
  ``partition_by(key)``, joined within ``app.harness.join.within.ms`` (``app.harness.join.type`` inner, left
  or outer) → ``{id: left id, key, val: left n, aux: right id, tag: "j"}``; unmatched sides
  ``{id, key, val: n, aux: -1, tag: "jl" / "jr"}``.

`app.harness.poison.ids` (comma-separated ids) makes the job raise on those messages: the poison-message fault.

Typed-table outputs (docs/tables.md) take the same records as rows of :data:`TABLE_SCHEMA`. For an
upsert table the keyed count puts its task's partition in ``aux`` (``app.harness.count.aux:
partition``): the table's key is ``(key, aux)``, one row per key and task holding its current count.
"""

from __future__ import annotations

import json
from typing import Any

from sparza.api import StreamApplication, Trigger, WindowPane, Windows, every
from sparza.serde import AvroSerde, JsonSerde
from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream
from sparza.task import MessageBatch

__all__ = ["RECORD_SCHEMA", "TABLE_SCHEMA", "HarnessApp", "HarnessBatchTask", "HarnessTask", "PoisonMessageError"]

RECORD_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "HarnessRecord", "namespace": "sparza.testing",
    "doc": "One output record of a harness job.",
    "fields": [{"name": "id", "type": "long"}, {"name": "key", "type": "string"},
               {"name": "val", "type": "long"}, {"name": "aux", "type": "long"},
               {"name": "tag", "type": "string"}],
}
"""Avro schema of every harness output record (JSON-lines outputs carry the same fields)."""


TABLE_SCHEMA = "id long not null, key string not null, val long, aux long, tag string"
"""The typed-table columns of a harness output record (``delta.table.schema`` text)."""


def _table_arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("key", pa.string(), nullable=False),
                      pa.field("val", pa.int64()), pa.field("aux", pa.int64()), pa.field("tag", pa.string())])


COUNT_STORE = "counts"
"""The keyed count's store (``stores.counts.*``)."""


class PoisonMessageError(RuntimeError):
    """Raised by a harness job on a message listed in ``app.harness.poison.ids`` (an injected bug)."""


def _poison_ids(config: Any) -> frozenset[int]:
    raw = str(config.get_str("app.harness.poison.ids", "") or "")
    return frozenset(int(x) for x in raw.split(",") if x.strip())


def _check_poison(message: dict[str, Any], poison: frozenset[int]) -> None:
    if message["id"] in poison:
        raise PoisonMessageError(f"harness poison message id {message['id']} (app.harness.poison.ids)")


def filtermap_records(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``filtermap`` rule: drop ``n % 3 == 0``, square the rest, and emit a second record for
    ``n % 5 == 0``."""
    n = int(message["n"])
    if n % 3 == 0:
        return []
    out = [{"id": message["id"], "key": message["key"], "val": n * n, "aux": 0, "tag": "fm0"}]
    if n % 5 == 0:
        out.append({"id": message["id"], "key": message["key"], "val": n + 1, "aux": 0, "tag": "fm1"})
    return out


class HarnessTask:
    """StreamTask + InitableTask of the low-level harness jobs (``copy``, ``count``, ``filtermap``).

    ``app.harness.output`` is the output ``system.stream``; ``app.harness.output.partition`` is
    ``none`` (no partition: the producer decides), ``key`` (partition key = message key) or
    ``number`` (partition ``id % 3``), which exercises the Azure blob producer's name segments.
    """

    def init(self, context: Any) -> None:
        """Read the job's shape from config; open the ``counts`` store for ``count``."""
        config = context.config
        self.kind = str(config.get_str("app.harness.kind"))
        self.output = SystemStream.parse(str(config.get_str("app.harness.output")))
        self.partition_mode = str(config.get_str("app.harness.output.partition", "none"))
        self.poison = _poison_ids(config)
        # The store is opened only by the count job, so its name is data, not a literal: sparza run's
        # start check refuses a class whose literal get_store("name") is undeclared, even in a branch
        # the job's config never takes (copy and filtermap declare no store).
        self.store = context.get_store(COUNT_STORE) if self.kind == "count" else None
        self.count_aux_partition = str(config.get_str("app.harness.count.aux", "zero")) == "partition"

    def _send(self, collector: Any, record: dict[str, Any], timestamp: int | None) -> None:
        key = record["key"]
        if self.partition_mode == "key":
            envelope = OutgoingMessageEnvelope(self.output, record, key=key, partition_key=key, timestamp=timestamp)
        elif self.partition_mode == "number":
            envelope = OutgoingMessageEnvelope(self.output, record, key=key, partition=record["id"] % 3,
                                               timestamp=timestamp)
        else:
            envelope = OutgoingMessageEnvelope(self.output, record, key=key, timestamp=timestamp)
        collector.send(envelope)

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        """Apply the job's rule to one message."""
        message = json.loads(envelope.message)
        _check_poison(message, self.poison)
        if self.kind == "copy":
            self._send(collector, {"id": message["id"], "key": message["key"], "val": message["n"], "aux": 0,
                                   "tag": "copy"}, envelope.timestamp)
        elif self.kind == "count":
            assert self.store is not None
            count = int(self.store.get(message["key"]) or 0) + 1
            self.store.put(message["key"], count)
            aux = envelope.ssp.partition if self.count_aux_partition else 0
            self._send(collector, {"id": message["id"], "key": message["key"], "val": count, "aux": aux,
                                   "tag": "count"}, envelope.timestamp)
        elif self.kind == "filtermap":
            for record in filtermap_records(message):
                self._send(collector, record, envelope.timestamp)
        else:
            raise ValueError(f"app.harness.kind {self.kind!r} is not a task kind: use copy, count or filtermap")


class HarnessBatchTask(HarnessTask):
    """The low-level harness jobs through the batch API (``BatchStreamTask.process_batch``), with exactly the
    outputs of :class:`HarnessTask`: ``count`` reads and writes its store once per key and batch
    (``get_all``/``put_all``), and the records go out as one Arrow batch (``send_batch``) when the output
    is a Delta stream whose producer partitions by key (``app.harness.output.partition: none``), else
    one by one through ``send``."""

    def init(self, context: Any) -> None:
        """As :meth:`HarnessTask.init`; also decide whether the output takes Arrow rows."""
        super().init(context)
        config, out = context.config, self.output
        self.arrow = (self.partition_mode == "none"
                      and str(config.get_str(f"systems.{out.system}.samza.factory", "")) == "delta"
                      and not config.get_str(f"systems.{out.system}.streams.{out.stream}.delta.table.schema", None))
        self._json = JsonSerde()

    def process_batch(self, batch: MessageBatch, collector: Any, coordinator: Any) -> None:
        """Apply the job's rule to a batch of messages."""
        messages = [json.loads(value) for value in batch.values.to_pylist()]
        timestamps = batch.timestamps.to_pylist()
        for message in messages:
            _check_poison(message, self.poison)
        records: list[tuple[dict[str, Any], int | None]] = []
        if self.kind == "copy":
            records = [({"id": m["id"], "key": m["key"], "val": m["n"], "aux": 0, "tag": "copy"}, ts)
                       for m, ts in zip(messages, timestamps, strict=True)]
        elif self.kind == "count":
            assert self.store is not None
            stored = self.store.get_all({m["key"] for m in messages})
            counts = {key: int(value or 0) for key, value in stored.items()}
            aux = batch.ssp.partition if self.count_aux_partition else 0
            for m, ts in zip(messages, timestamps, strict=True):
                count = counts[m["key"]] = counts.get(m["key"], 0) + 1
                records.append(({"id": m["id"], "key": m["key"], "val": count, "aux": aux, "tag": "count"}, ts))
            self.store.put_all(counts)
        elif self.kind == "filtermap":
            records = [(record, ts) for m, ts in zip(messages, timestamps, strict=True)
                       for record in filtermap_records(m)]
        else:
            raise ValueError(f"app.harness.kind {self.kind!r} is not a task kind: use copy, count or filtermap")
        if not self.arrow:
            for record, ts in records:
                self._send(collector, record, ts)
        elif records:
            import pyarrow as pa

            collector.send_batch(self.output, pa.RecordBatch.from_pydict({
                "key": pa.array([r["key"].encode() for r, _ in records], pa.binary()),
                "value": pa.array([self._json.to_bytes(r) for r, _ in records], pa.binary()),
                "timestamp": pa.array([ts for _, ts in records], pa.int64())}))


def _fold(message: dict[str, Any], acc: list[int]) -> list[int]:
    return [acc[0] + 1, acc[1] + int(message["n"])]


def _pane_record(pane: WindowPane) -> dict[str, Any]:
    count, total = pane.value
    return {"id": int(pane.start), "key": str(pane.key), "val": int(count), "aux": int(total), "tag": "w"}


def _pane_records(tag: str) -> Any:
    """Panes of a window that fires more than once (or may retract) as records tagged ``<tag>:<pane>:<index>``."""
    def record(pane: WindowPane) -> dict[str, Any]:
        count, total = pane.value if pane.value is not None else (0, 0)
        return {"id": int(pane.start), "key": str(pane.key), "val": int(count), "aux": int(total),
                "tag": f"{tag}:{pane.pane}:{pane.index}"}
    return record


def _merge(a: list[int], b: list[int]) -> list[int]:
    return [a[0] + b[0], a[1] + b[1]]


def _trigger(text: str) -> Trigger | None:
    """``count:N`` / ``ms:N`` (``app.harness.early`` / ``.late``) as a trigger; empty: none."""
    if not text:
        return None
    what, _, value = text.partition(":")
    return every(int(value)) if what == "count" else every(ms=int(value))


def _join_record(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    if left is not None and right is not None:
        return {"id": int(left["id"]), "key": str(left["key"]), "val": int(left["n"]), "aux": int(right["id"]),
                "tag": "j"}
    one = left if left is not None else right
    assert one is not None
    return {"id": int(one["id"]), "key": str(one["key"]), "val": int(one["n"]), "aux": -1,
            "tag": "jl" if left is not None else "jr"}


class HarnessApp:
    """The high-level harness application (``app.harness.kind``: ``pipeline`` or ``window``).

    Keys: ``app.harness.output`` (``system.stream``), ``app.harness.output.avro`` (``true``: Avro
    serde), ``app.harness.partitions`` (partitions of the ``by-key`` stream), ``app.harness.join``
    (``true``: inner join with the table store ``profiles``), ``app.harness.flatmap`` (pipeline: the
    ``filtermap`` rule instead of a plain filter), ``app.harness.window.size.ms`` / ``.slide.ms``,
    ``app.harness.input`` (``system.stream``, default ``delta.in``) and ``app.harness.table.mode``
    (``append`` or ``upsert``: the output is a typed table declared through ``app.output(schema=…,
    mode=…, key=…)``, with key columns ``app.harness.table.key``).
    """

    def describe(self, app: StreamApplication) -> None:
        """Build the generated graph."""
        config = app.config
        kind = str(config.get_str("app.harness.kind"))
        poison = _poison_ids(config)
        avro = str(config.get_str("app.harness.output.avro", "false")) == "true"
        table_mode = str(config.get_str("app.harness.table.mode", "") or "")
        if table_mode:
            table_key = [k for k in str(config.get_str("app.harness.table.key", "") or "").split(",") if k]
            out = app.output(str(config.get_str("app.harness.output")), serde="json", key_serde="string",
                             schema=_table_arrow_schema(), mode=table_mode, key=table_key or None)
        else:
            out = app.output(str(config.get_str("app.harness.output")),
                             serde=AvroSerde(RECORD_SCHEMA) if avro else "json", key_serde="string")
        partitions = int(config.get_str("app.harness.partitions", "2"))
        join = str(config.get_str("app.harness.join", "false")) == "true"

        def parse(raw: bytes) -> dict[str, Any]:
            message = json.loads(raw)
            _check_poison(message, poison)
            return dict(message)

        stream = app.input(str(config.get_str("app.harness.input", "delta.in")), serde="bytes").map(parse)
        if kind == "pipeline":
            if str(config.get_str("app.harness.flatmap", "false")) == "true":
                stream = stream.flat_map(filtermap_records)
            else:
                stream = stream.filter(lambda m: int(m["n"]) % 3 != 0).map(
                    lambda m: {"id": m["id"], "key": m["key"], "val": int(m["n"]) * 2, "aux": 0, "tag": "p"})
            stream = stream.partition_by(lambda m: m["key"], "by-key", partitions=partitions)
            if join:
                stream = stream.join(app.table("profiles"), lambda m: m["key"], lambda m, p: {**m, "tag": str(p["c"])})
            stream.map(lambda m: {"id": int(m["id"]), "key": str(m["key"]), "val": int(m["val"]),
                                  "aux": int(m["aux"]), "tag": str(m["tag"])}).send_to(out)
        elif kind in ("window", "session"):
            early = _trigger(str(config.get_str("app.harness.early", "") or ""))
            late = _trigger(str(config.get_str("app.harness.late", "") or ""))
            lateness = int(config.get_str("app.harness.lateness.ms", "0"))
            stream = stream.partition_by(lambda m: m["key"], "by-key", partitions=partitions)
            if join:
                stream = stream.join(app.table("profiles"), lambda m: m["key"], lambda m, p: {**m, "c": p["c"]})
            if kind == "session":
                merge = _merge if str(config.get_str("app.harness.session.merge", "false")) == "true" else None
                session = Windows.session(int(config.get_str("app.harness.session.gap.ms")), lambda m: m["key"],
                                          [0, 0], _fold, merge, early=early, late=late,
                                          allowed_lateness_ms=lateness)
                stream.window(session, name="s").map(_pane_records("s")).send_to(out)
                return
            size = int(config.get_str("app.harness.window.size.ms"))
            slide = int(config.get_str("app.harness.window.slide.ms", str(size)))
            spec = (Windows.tumbling(size, lambda m: m["key"], [0, 0], _fold, early=early, late=late,
                                     allowed_lateness_ms=lateness) if slide == size
                    else Windows.sliding(size, slide, lambda m: m["key"], [0, 0], _fold, early=early, late=late,
                                         allowed_lateness_ms=lateness))
            stream.window(spec, name="w").map(_pane_records("w") if spec.triggered else _pane_record).send_to(out)
        elif kind == "join":
            within = int(config.get_str("app.harness.join.within.ms"))
            left = stream.filter(lambda m: int(m["n"]) % 2 == 0).partition_by(lambda m: m["key"], "left",
                                                                               partitions=partitions)
            right = stream.filter(lambda m: int(m["n"]) % 2 == 1).partition_by(lambda m: m["key"], "right",
                                                                                partitions=partitions)
            (left.join(right, lambda m: m["key"], lambda m: m["key"], _join_record, within=within,
                       kind=str(config.get_str("app.harness.join.type", "inner")), name="lr",
                       allowed_lateness_ms=int(config.get_str("app.harness.lateness.ms", "0")))
             .send_to(out))
        else:
            raise ValueError(f"app.harness.kind {kind!r} is not an application kind: use pipeline, window, session "
                             f"or join")
