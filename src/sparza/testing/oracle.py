"""The oracle: what a harness job must output, computed in plain Python from the scenario's input,
and the readers that fetch what the job really wrote.

Deliberately independent of sparza: nothing here imports it. Expectations follow the documented
rules (the job definitions in ``sparza.testing.jobs``, window starts at multiples of the slide,
partition = CRC-32 of the JSON key), and outputs are read with deltalake, the Azure SDK,
fastavro and confluent-kafka (``read_committed``, as Kafka's own clients read) directly.
Comparisons are exact multisets, so a lost or a duplicated record both show.
"""

from __future__ import annotations

import gzip
import io
import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TABLE_READERS",
    "Comparison",
    "KafkaRead",
    "Record",
    "compare",
    "download_prefix",
    "expected_records",
    "expected_table_rows",
    "fires_panes",
    "missing_table_readers",
    "read_blob_records",
    "read_delta_records",
    "read_delta_values",
    "read_kafka_records",
    "read_table_rows",
    "reduce_panes",
    "task_partition",
]

Record = tuple[int, str, int, int, str]
"""An output record as ``(id, key, val, aux, tag)``."""


def _join_table(scenario: Any) -> dict[str, str]:
    table: dict[str, str] = {}
    for profile in scenario.profiles:       # change capture in order: the last update wins
        table[profile.key] = profile.c
    return table


def _filtermap(m: Any) -> list[Record]:
    if m.n % 3 == 0:
        return []
    out: list[Record] = [(m.id, m.key, m.n * m.n, 0, "fm0")]
    if m.n % 5 == 0:
        out.append((m.id, m.key, m.n + 1, 0, "fm1"))
    return out


def task_partition(scenario: Any, m: Any) -> int:
    """The partition number of the task that reads ``m``: its own partition, or, for one the input gained
    (``partition-growth``: ``p >= n``, the first count), the task of ``p % n`` as SEP-5 groups it. A job with stores
    always ends grouped so; a stateless one may get tasks of their own instead, but its output does not depend on
    which task reads a message."""
    return m.partition % scenario.partitions


def _offset_order(scenario: Any) -> list[Any]:
    # Within a partition, messages are appended chunk by chunk in id order: that is their offset order.
    return sorted(scenario.messages, key=lambda m: (m.partition, m.chunk, m.id))


def window_starts(timestamp: int, size: int, slide: int) -> list[int]:
    """Starts of the windows ``[s, s + size)`` (s a multiple of ``slide``) that contain ``timestamp``."""
    first = timestamp - (timestamp % slide)
    starts = []
    s = first
    while s + size > timestamp:
        starts.append(s)
        s -= slide
    return sorted(starts)


def expected_records(scenario: Any, *, excluded_ids: Iterable[int] = ()) -> Counter[Record]:
    """Every record the job must write, as a multiset; ``excluded_ids`` are input messages the job's
    own lateness rules routed away (only windows may do that)."""
    excluded = set(excluded_ids)
    out: Counter[Record] = Counter()
    kind = scenario.kind
    if kind == "copy":
        out.update((m.id, m.key, m.n, 0, "copy") for m in scenario.messages)
    elif kind == "count":
        counts: Counter[tuple[int, str]] = Counter()
        for m in _offset_order(scenario):   # a task reads each key from one partition (scenario._plan_growth)
            task = task_partition(scenario, m)
            counts[(task, m.key)] += 1
            out[(m.id, m.key, counts[(task, m.key)], 0, "count")] += 1
    elif kind == "filtermap":
        for m in scenario.messages:
            out.update(_filtermap(m))
    elif kind == "pipeline":
        table = _join_table(scenario) if scenario.join != "none" else None
        for m in scenario.messages:
            records = _filtermap(m) if scenario.flatmap else (
                [(m.id, m.key, m.n * 2, 0, "p")] if m.n % 3 != 0 else [])
            for r in records:
                if table is None:
                    out[r] += 1
                elif m.key in table:
                    out[(r[0], r[1], r[2], r[3], table[m.key])] += 1
    elif kind == "join":
        out.update(_expected_join(scenario, excluded))
    elif kind == "session":
        out.update(_expected_sessions(scenario, excluded))
    elif kind == "window":
        table = _join_table(scenario) if scenario.join != "none" else None
        panes: dict[tuple[str, int], list[int]] = {}
        for m in scenario.messages:
            if m.id in excluded or (table is not None and m.key not in table):
                continue
            for start in window_starts(m.timestamp, scenario.window_size_ms, scenario.window_slide_ms):
                acc = panes.setdefault((m.key, start), [0, 0])
                acc[0] += 1
                acc[1] += m.n
        out.update((start, key, acc[0], acc[1], "w") for (key, start), acc in panes.items())
    else:
        raise ValueError(f"unknown job kind {kind!r}")
    return out


def _expected_join(scenario: Any, excluded: set[int]) -> Counter[Record]:
    """Left = messages with an even ``n``, right = odd; a pair: equal keys, event times at most ``within``
    apart, ``(left id, key, left n, right id, "j")``; unmatched ones (left join: left; outer: both) as
    ``(id, key, n, -1, "jl" / "jr")``."""
    kept = [m for m in scenario.messages if m.id not in excluded]
    left = [m for m in kept if m.n % 2 == 0]
    right = [m for m in kept if m.n % 2 == 1]
    out: Counter[Record] = Counter()
    matched: set[int] = set()
    for a in left:
        for b in right:
            if a.key == b.key and abs(a.timestamp - b.timestamp) <= scenario.join_within_ms:
                out[(a.id, a.key, a.n, b.id, "j")] += 1
                matched.update((a.id, b.id))
    if scenario.join_type in ("left", "outer"):
        out.update((m.id, m.key, m.n, -1, "jl") for m in left if m.id not in matched)
    if scenario.join_type == "outer":
        out.update((m.id, m.key, m.n, -1, "jr") for m in right if m.id not in matched)
    return out


def _expected_sessions(scenario: Any, excluded: set[int]) -> Counter[Record]:
    """Per key, its messages in event-time order; a new session when the next one is ``gap`` or more after
    the previous: ``(first event time, key, count, sum of n, "s")``."""
    table = _join_table(scenario) if scenario.join != "none" else None
    by_key: dict[str, list[Any]] = {}
    for m in scenario.messages:
        if m.id not in excluded and (table is None or m.key in table):
            by_key.setdefault(m.key, []).append(m)
    out: Counter[Record] = Counter()
    for key, items in by_key.items():
        items.sort(key=lambda m: m.timestamp)
        first, last, count, total = items[0].timestamp, items[0].timestamp, 0, 0
        for m in items:
            if m.timestamp - last >= scenario.session_gap_ms:
                out[(first, key, count, total, "s")] += 1
                first, count, total = m.timestamp, 0, 0
            last = m.timestamp
            count += 1
            total += m.n
        out[(first, key, count, total, "s")] += 1
    return out


def fires_panes(scenario: Any) -> bool:
    """Whether the job writes every pane of its windows (tagged ``<w|s>:<pane>:<index>``): sessions always,
    windows with triggers or an allowed lateness."""
    return scenario.kind == "session" or (scenario.kind == "window" and bool(
        getattr(scenario, "early", "") or getattr(scenario, "allowed_lateness_ms", 0)))


def reduce_panes(scenario: Any, records: Counter[Record], *, upserted: bool) -> tuple[Counter[Record], list[str]]:
    """A window's result is its newest pane (panes are updates) unless that is a retraction: the records of a job
    that writes every pane, reduced to one final record per window (tag ``w`` / ``s``), and what is wrong with
    the pane sequences. ``upserted``: the output is an upsert table, which keeps only the newest row of each
    window, so only the last pane can be checked; otherwise every window's panes must be numbered 0..n-1, each
    once (a lost or repeated firing shows), with a retraction only last and nothing early last."""
    if not fires_panes(scenario):
        return records, []
    problems: list[str] = []
    groups: dict[tuple[int, str], list[tuple[int, str, Record]]] = {}
    for record, times in records.items():
        base, pane, index = record[4].split(":")
        for _ in range(times):
            groups.setdefault((record[0], record[1]), []).append((int(index), pane, (*record[:4], base)))
    out: Counter[Record] = Counter()
    for (start, key), panes in sorted(groups.items()):
        panes.sort()
        indexes = [i for i, _, _ in panes]
        kinds = [k for _, k, _ in panes]
        if not upserted and indexes != list(range(len(panes))):
            problems.append(f"window {key}@{start}: pane indexes {indexes[:12]} (a firing lost or repeated)")
        if "retract" in kinds[:-1] or (scenario.kind == "window" and "retract" in kinds):
            problems.append(f"window {key}@{start}: panes after a retraction: {kinds[:12]}")
        if kinds[-1] == "early":
            problems.append(f"window {key}@{start}: the last pane is early (end-of-stream fires on time)")
        if kinds[-1] != "retract":
            out[panes[-1][2]] += 1
    return out, problems


def expected_table_rows(scenario: Any, *, excluded_ids: Iterable[int] = ()) -> Counter[Record]:
    """The rows a typed-table output must hold at the end. Append: every record once (the multiset of
    :func:`expected_records`). Upsert: the final row per key: for the keyed count the last message of
    each (input partition, key) in offset order with its task's count (``aux`` = the partition); for windows one
    row per (key, window start), which every pane already is."""
    if scenario.output == "table-upsert" and scenario.kind == "count":
        last: dict[tuple[int, str], Record] = {}
        counts: Counter[tuple[int, str]] = Counter()
        for m in _offset_order(scenario):
            # The count is its task's; ``aux`` the message's partition (the job writes envelope.ssp.partition).
            task = task_partition(scenario, m)
            counts[(task, m.key)] += 1
            last[(m.partition, m.key)] = (m.id, m.key, counts[(task, m.key)], m.partition, "count")
        return Counter(last.values())
    return expected_records(scenario, excluded_ids=excluded_ids)


def _record(obj: dict[str, Any]) -> Record:
    return (int(obj["id"]), str(obj["key"]), int(obj["val"]), int(obj["aux"]), str(obj["tag"]))


def read_delta_values(table_path: Path) -> list[bytes]:
    """The values of the user messages (type 0) of a Delta stream, read with deltalake directly."""
    from deltalake import DeltaTable

    if not (table_path / "_delta_log").exists():
        return []
    table = DeltaTable(str(table_path)).to_pyarrow_table(columns=["value", "type"])
    return [v for v, t in zip(table.column("value").to_pylist(), table.column("type").to_pylist(), strict=True)
            if t == 0]


def read_delta_records(table_path: Path) -> Counter[Record]:
    """A Delta output stream's records (JSON values)."""
    return Counter(_record(json.loads(v)) for v in read_delta_values(table_path))


TABLE_READERS = ("deltalake", "duckdb", "polars")
"""The readers :func:`read_table_rows` reads a typed table with; DuckDB and Polars are development
dependencies (``pip install 'sparza[dev]'``), so an installed sparza may lack them."""


def missing_table_readers() -> list[str]:
    """The readers of :data:`TABLE_READERS` that are not installed here (a harness run says so, rather than
    counting a check by fewer readers as a check by all of them)."""
    import importlib.util

    return [name for name in TABLE_READERS if importlib.util.find_spec(name) is None]


def read_table_rows(table_path: Path) -> dict[str, Counter[Record]]:
    """A typed Delta table's rows, read through its Delta log by every reader installed: ``deltalake``
    always, DuckDB (over the log's live files) and Polars (``read_delta``) when importable
    (:func:`missing_table_readers` names those that are not). Each reader's rows as a multiset, so the caller
    can check that they agree."""
    from deltalake import DeltaTable

    if not (table_path / "_delta_log").exists():
        return {"deltalake": Counter()}
    table = DeltaTable(str(table_path))
    readers: dict[str, Counter[Record]] = {
        "deltalake": Counter(_record(r) for r in table.to_pyarrow_table().to_pylist())}
    try:
        import duckdb
    except ImportError:
        pass
    else:
        files = table.file_uris()
        if files:
            rel = duckdb.sql("SELECT id, key, val, aux, tag FROM read_parquet($files)", params={"files": files})
            assert rel is not None  # a SELECT always gives a relation
            readers["duckdb"] = Counter(_record(dict(zip(("id", "key", "val", "aux", "tag"), row, strict=True)))
                                        for row in rel.fetchall())
        else:
            readers["duckdb"] = Counter()
    try:
        import polars
    except ImportError:
        pass
    else:
        readers["polars"] = Counter(_record(r) for r in polars.read_delta(str(table_path)).to_dicts())
    return readers


@dataclass
class KafkaRead:
    """What :func:`read_kafka_records` found in a topic."""

    records: Counter[Record]
    control: int = 0      # control records (header ``sparza.type`` not 0)


def read_kafka_records(bootstrap_servers: str, topic: str, *, timeout_s: float = 60.0) -> KafkaRead:
    """Every committed record of a Kafka topic, read ``read_committed`` with confluent-kafka directly
    from the beginning of each partition to its end (records of aborted transactions are not delivered to
    such a reader); control records (header ``sparza.type`` ≠ 0, the documented in-band format) are counted
    apart. The end is the broker's ``read_committed`` end (the last stable offset): a transaction still open
    is not read."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"oracle-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    out = KafkaRead(Counter())
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        pending = {p for p in partitions if ends[p] > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                # Offsets are not dense (transaction markers): a partition is done when its position,
                # which moves past markers, reached the end.
                for tp in consumer.position([TopicPartition(topic, p) for p in list(pending)]):
                    if tp.offset >= ends[tp.partition]:
                        pending.discard(tp.partition)
                continue
            if msg.error():
                raise RuntimeError(f"reading {topic}: {msg.error()}")
            offset = msg.offset()
            partition = msg.partition()
            assert offset is not None and partition is not None  # a consumed record has both
            headers = dict(msg.headers() or [])
            if headers.get("sparza.type", b"\x00") not in (b"\x00", b"0"):
                out.control += 1
            else:
                value = msg.value()
                assert value is not None, f"{topic}: a record without a value"
                out.records[_record(json.loads(value))] += 1
            if offset + 1 >= ends[partition]:
                pending.discard(partition)
        if pending:
            raise RuntimeError(f"reading {topic}: partitions {sorted(pending)} did not reach their end offsets "
                               f"{ {p: ends[p] for p in pending} } within {timeout_s}s")
    finally:
        consumer.close()
    return out


def read_blob_records(connection_string: str, container: str, prefix: str) -> tuple[Counter[Record], list[str]]:
    """Records of every committed blob under ``prefix`` (Avro or JSON lines, gzip or not), and the
    blob names, read with the Azure SDK and fastavro."""
    import fastavro
    from azure.core.exceptions import ResourceNotFoundError
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(connection_string)
    client = service.get_container_client(container)
    records: Counter[Record] = Counter()
    names: list[str] = []
    try:
        blobs = list(client.list_blobs(name_starts_with=prefix))
    except ResourceNotFoundError:
        return records, names
    for blob in blobs:
        names.append(blob.name)
        data = client.download_blob(blob.name).readall()
        if blob.name.endswith(".gz"):
            data = gzip.decompress(data)
        if ".avro" in blob.name:
            records.update(_record(r) for r in fastavro.reader(io.BytesIO(data)))  # type: ignore[arg-type]
        elif ".jsonl" in blob.name:
            records.update(_record(json.loads(line)) for line in data.splitlines() if line.strip())
        else:
            raise ValueError(f"blob {blob.name!r} has neither .avro nor .jsonl in its name")
    return records, names


def download_prefix(connection_string: str, container: str, prefix: str, dest: Path) -> int:
    """Copy every blob under ``prefix`` into ``dest`` (names relative to the prefix), with the Azure SDK:
    a Delta table on ``az://`` is then read locally by every reader. Returns how many blobs."""
    from azure.core.exceptions import ResourceNotFoundError
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(connection_string).get_container_client(container)
    count = 0
    try:
        names = [b.name for b in client.list_blobs(name_starts_with=prefix)]
    except ResourceNotFoundError:
        return 0
    for name in names:
        target = dest / name[len(prefix):]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(client.download_blob(name).readall())
        count += 1
    return count


@dataclass
class Comparison:
    """Expected vs. actual output: what is missing, what is extra or repeated."""

    expected: int
    actual: int
    missing: Counter[Record] = field(default_factory=Counter)
    extra: Counter[Record] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """True when the outputs match exactly."""
        return not self.missing and not self.extra

    def summary(self) -> str:
        """One line: counts and a few examples of each difference."""
        if self.ok:
            return f"exact: {self.actual} records"
        dup = sum(1 for r in self.extra if r in self.missing or self.extra[r] > 0)
        return (f"expected {self.expected} records, got {self.actual}: {sum(self.missing.values())} missing "
                f"(e.g. {sorted(self.missing)[:3]}), {sum(self.extra.values())} extra or repeated "
                f"(e.g. {sorted(self.extra)[:3]}; {dup} distinct)")


def compare(expected: Counter[Record], actual: Counter[Record]) -> Comparison:
    """Exact multiset comparison."""
    return Comparison(sum(expected.values()), sum(actual.values()), expected - actual, actual - expected)
