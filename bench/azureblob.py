"""Benchmark of the azureblob producer against a fresh Azurite (one run, baselines measured alongside).

1. Throughput, 1 stream: 1-KiB Avro records sent -> committed through AzureBlobSystemProducer, against
   (a) the ceiling: the Azure SDK uploading the same bytes with upload_blob(max_concurrency=threadPoolCount).
2. Throughput, 100 streams: the producer against (b) the seed's rejected design 3: the same in-memory
   buffering and Avro encoding, but each block staged with a blocking call in the sending thread (the
   same requests as the producer: 1 MiB blocks with a Content-MD5), and against (c) the Azure SDK:
   each stream's records encoded with ``fastavro.writer`` and sent with ``upload_blob``, threadPoolCount
   blobs at a time (the same concurrency), and (c0) the same uploads of bytes encoded beforehand. The
   producer also with its default 10 MiB blocks: each stream's ~2 MiB blob is then one Put Blob in the
   transaction, the same requests as (c).
   All again with 20 ms added before every request, as a network round trip would add (Azurite on
   loopback has none; the asynchronous design exists to overlap exactly that).
   Every row also reports the CPU seconds Azurite spent: on loopback on 2 cores, storage's own CPU is
   what bounds every design.
3. Peak memory with 1,000 open partitions (one blob each), measured in a child process each: with the
   default memory cap (maxBufferedBytes 256 MiB, i.e. nothing staged before flush, as Samza) and a
   32 MiB cap.

Usage: .venv/bin/python bench/azureblob.py --scale small|full
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fastavro
from _report import record, table

from sparza.devservers.storage import AzuriteProcess
from sparza.serde import AvroRecord
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.azureblob import AzureBlobSystemProducer

SCHEMA = {"type": "record", "name": "Event", "namespace": "bench",
          "fields": [{"name": "id", "type": "long"}, {"name": "ts", "type": "long"},
                     {"name": "payload", "type": "string"}]}
PAYLOAD = "x" * 1000  # with the other fields: ~1 KiB per encoded record
SCALES = {"small": {"records": 20_000, "mem_partitions": 1000, "mem_per_partition": 10_000},
          "full": {"records": 200_000, "mem_partitions": 1000, "mem_per_partition": 100_000}}
THREADS = 2  # the seed's default threadPoolCount


MEASURES = ("The Azure blob producer's throughput into Azurite, for one stream and for 100, against the Azure "
            "SDK's `upload_blob` of the same bytes at the same concurrency and against the rejected blocking "
            'per-block design, on loopback and with 20 ms added before every request; and its memory with 1,000 '
            'open partitions.')
"""What this benchmark measures (the first paragraph of its section in docs/benchmarks.md)."""


def records(n: int) -> list[AvroRecord]:
    return [AvroRecord(SCHEMA, {"id": i, "ts": 1_700_000_000_000 + i, "payload": PAYLOAD}) for i in range(n)]


def config(account, container: str, **extra: str) -> dict[str, str]:
    p = f"systems.{container}.azureblob."
    cfg = {p + "account.name": account.account_name, p + "account.key": account.account_key,
           p + "endpoint": account.blob_endpoint, p + "threadPoolCount": str(THREADS)}
    cfg.update({p + k: v for k, v in extra.items()})
    return cfg


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants so far (Linux /proc)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return total


_VERSIONS = iter(range(1, 1 << 30))


def run_producer(account, container: str, recs: list[AvroRecord], streams: int, latency_s: float = 0.0,
                 transactional: bool = True, **extra: str) -> tuple[float, int]:
    """Send every record, then flush; ``transactional``: in a transaction, as the task runtime always
    calls the producer (begin before sending, flush with the same transaction)."""
    client = Latency(account.blob_service_client(), latency_s) if latency_s else None
    producer = AzureBlobSystemProducer(container, config(account, container, **extra), service_client=client)
    producer.start()
    targets = [SystemStream(container, f"s{i:03d}") for i in range(streams)]
    txn = ("bench/task", next(_VERSIONS)) if transactional else None
    start = time.perf_counter()
    if txn is not None:
        producer.begin("task", txn)
    for i, rec in enumerate(recs):
        producer.send("task", OutgoingMessageEnvelope(targets[i % streams], rec))
    producer.flush("task", transaction=txn)
    elapsed = time.perf_counter() - start
    sent = producer.registry.snapshot()["aggregate"]["bytes_sent"]
    producer.stop()
    return elapsed, sent


def avro_file_bytes(recs: list[AvroRecord]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(SCHEMA), (r.datum for r in recs), codec="null")
    return buf.getvalue()


def run_sdk_ceiling(account, container: str, data: bytes) -> float:
    client = account.blob_service_client().get_container_client(container)
    start = time.perf_counter()
    client.upload_blob("ceiling.avro", data, overwrite=True, max_concurrency=THREADS)
    return time.perf_counter() - start


def run_sdk_streams(account, container: str, recs: list[AvroRecord], streams: int, *, encode: bool,
                    latency_s: float = 0.0) -> float:
    """(c)/(c0): what a user of the plain SDK would write for ``streams`` blobs: per stream an Avro file
    (``fastavro.writer``) sent with ``upload_blob``, THREADS blobs at a time. With ``encode`` False the
    files are encoded before the clock starts (upload only)."""
    from concurrent.futures import ThreadPoolExecutor

    service = account.blob_service_client()
    client = (Latency(service, latency_s) if latency_s else service).get_container_client(container)
    parsed = fastavro.parse_schema(SCHEMA)

    def encoded(i: int) -> bytes:
        buf = io.BytesIO()
        fastavro.writer(buf, parsed, (r.datum for r in recs[i::streams]), codec="null")
        return buf.getvalue()

    ready = None if encode else [encoded(i) for i in range(streams)]

    def one(i: int) -> None:
        data = encoded(i) if ready is None else ready[i]
        client.get_blob_client(f"s{i:03d}/sdk.avro").upload_blob(data, overwrite=True, max_concurrency=1)

    start = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, range(streams)))
    return time.perf_counter() - start


class Latency:
    """Wraps a real BlobServiceClient and sleeps ``delay_s`` before each stage/commit request, as a
    network round trip to a real region would (Azurite on loopback has none). Sleeping releases the
    GIL, so concurrent uploads overlap their latency as they would over a network."""

    def __init__(self, real, delay_s: float) -> None:
        self.real = real
        self.delay_s = delay_s

    def get_container_client(self, name: str):
        return _LatencyContainer(self.real.get_container_client(name), self.delay_s)


class _LatencyContainer:
    def __init__(self, real, delay_s: float) -> None:
        self.real = real
        self.delay_s = delay_s

    def create_container(self, **kwargs):
        return self.real.create_container(**kwargs)

    def get_blob_client(self, name: str):
        return _LatencyBlob(self.real.get_blob_client(name), self.delay_s)


class _LatencyBlob:
    def __init__(self, real, delay_s: float) -> None:
        self.real = real
        self.delay_s = delay_s

    def stage_block(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return self.real.stage_block(*args, **kwargs)

    def commit_block_list(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return self.real.commit_block_list(*args, **kwargs)

    def upload_blob(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return self.real.upload_blob(*args, **kwargs)

    def get_blob_properties(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return self.real.get_blob_properties(*args, **kwargs)


class BlockingWriter:
    """Rejected design 3: buffer in memory, stage each full block with a blocking call, commit at flush."""

    def __init__(self, container_client, name: str, threshold: int) -> None:
        self.blob = container_client.get_blob_client(name)
        self.threshold = threshold
        self.parsed = fastavro.parse_schema(SCHEMA)
        self.buffer = io.BytesIO()
        fastavro.writer(self.buffer, self.parsed, [], codec="null")  # header only
        self.blocks: list[str] = []
        self.records: list[bytes] = []

    def write(self, datum: dict) -> None:
        one = io.BytesIO()
        fastavro.schemaless_writer(one, self.parsed, datum)
        self.buffer.write(one.getvalue())
        if self.buffer.tell() >= self.threshold:
            self._stage()

    def _stage(self) -> None:
        import base64

        block_id = base64.b64encode(f"{len(self.blocks):06d}".encode()).decode()
        # blocks the sending thread; with a Content-MD5 like the producer's, so both send the same requests
        self.blob.stage_block(block_id, self.buffer.getvalue(), validate_content=True)
        self.blocks.append(block_id)
        self.buffer = io.BytesIO()

    def flush(self) -> None:
        from azure.storage.blob import BlobBlock

        if self.buffer.tell():
            self._stage()
        self.blob.commit_block_list([BlobBlock(b) for b in self.blocks])


def run_blocking(account, container: str, recs: list[AvroRecord], streams: int, threshold: int,
                 latency_s: float = 0.0) -> float:
    service = account.blob_service_client()
    client = (Latency(service, latency_s) if latency_s else service).get_container_client(container)
    writers = [BlockingWriter(client, f"s{i:03d}/blocking.avro", threshold) for i in range(streams)]
    start = time.perf_counter()
    for i, rec in enumerate(recs):
        writers[i % streams].write(rec.datum)
    for writer in writers:
        writer.flush()
    return time.perf_counter() - start


def _vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def memory_probe(endpoint_json: str, partitions: int, per_partition: int, cap: str) -> dict:
    """Child-process body: send ~per_partition bytes to each of ``partitions`` open blobs, then flush."""
    from sparza.azure import StorageAccount

    acc = json.loads(endpoint_json)
    account = StorageAccount(acc["name"], acc["key"], acc["blob"], acc["table"])
    container = f"mem{int(time.time() * 1000) % 10**9}"
    producer = AzureBlobSystemProducer(container, config(account, container, maxBufferedBytes=cap))
    producer.start()
    stream = SystemStream(container, "wide")
    base_rss = _vm_kib("VmRSS")
    rec = AvroRecord(SCHEMA, {"id": 0, "ts": 0, "payload": PAYLOAD})
    per_record = 1024
    start = time.perf_counter()
    for _ in range(max(per_partition // per_record, 1)):
        for p in range(partitions):
            producer.send("task", OutgoingMessageEnvelope(stream, rec, partition_key=f"p{p:04d}"))
    producer.flush("task")
    elapsed = time.perf_counter() - start
    peak_rss = _vm_kib("VmHWM")  # high-water mark of this process (ru_maxrss would carry the parent's over exec)
    snap = producer.registry.snapshot()["aggregate"]
    producer.stop()
    return {"rss_growth_mb": (peak_rss - base_rss) / 1024, "buffered_peak_mb": producer.budget.peak / 2**20,
            "bytes_mb": snap["bytes_sent"] / 2**20, "blobs": snap["blobs_committed"],
            "blocks": snap["blocks_uploaded"], "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--memory-probe", nargs=4, metavar=("ACCOUNT_JSON", "PARTITIONS", "BYTES", "CAP"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        acc, partitions, per_partition, cap = args.memory_probe
        print(json.dumps(memory_probe(acc, int(partitions), int(per_partition), cap)))
        return
    scale = SCALES[args.scale]
    with tempfile.TemporaryDirectory(prefix="bench-azureblob-") as tmp:
        azurite = AzuriteProcess(Path(tmp) / "azurite")
        azurite.start()
        try:
            body = run_all(azurite, scale, args.scale, 3 if args.scale == "full" else 1)
        finally:
            azurite.stop()
    record("azureblob", "Azure blob producer (SEP-26) against Azurite",
           f".venv/bin/python bench/azureblob.py --scale {args.scale}", body, measures=MEASURES)


CONTAINERS = ("ceiling", "one", "many", "manyplain", "manydefault", "blocking", "sdk", "sdkup", "manylat",
              "blockinglat", "sdklat", "sdkuplat", "many8", "manylat8")


def run_all(azurite: AzuriteProcess, scale: dict, scale_name: str, repeats: int) -> str:
    account = azurite.account
    n = scale["records"]
    recs = records(n)
    service = account.blob_service_client()
    for name in CONTAINERS:
        service.create_container(f"bench{name}")

    # warm-up (connection pools, Azurite's first-write costs) on a throw-away container
    run_producer(account, "benchone", recs[: min(n, 2000)], 1)

    data = avro_file_bytes(recs)
    mb = len(data) / 2**20
    threshold = 1024 * 1024  # 1 MiB blocks for the 100-stream runs (both designs)
    lat = 0.020
    many = {"maxFlushThresholdSize": str(threshold)}
    runs = {
        "ceiling": lambda: run_sdk_ceiling(account, "benchceiling", data),
        "one": lambda: run_producer(account, "benchone", recs, 1)[0],
        "many": lambda: run_producer(account, "benchmany", recs, 100, **many)[0],
        "manyplain": lambda: run_producer(account, "benchmanyplain", recs, 100, transactional=False, **many)[0],
        # default maxFlushThresholdSize (10 MiB): each stream's ~2 MiB blob is one Put Blob in the transaction,
        # the same requests as (c); shows what the 1 MiB blocks of the other rows cost
        "manydefault": lambda: run_producer(account, "benchmanydefault", recs, 100)[0],
        "blocking": lambda: run_blocking(account, "benchblocking", recs, 100, threshold),
        "sdk": lambda: run_sdk_streams(account, "benchsdk", recs, 100, encode=True),
        "sdkup": lambda: run_sdk_streams(account, "benchsdkup", recs, 100, encode=False),
        "manylat": lambda: run_producer(account, "benchmanylat", recs, 100, latency_s=lat, **many)[0],
        "blockinglat": lambda: run_blocking(account, "benchblockinglat", recs, 100, threshold, latency_s=lat),
        "sdklat": lambda: run_sdk_streams(account, "benchsdklat", recs, 100, encode=True, latency_s=lat),
        "sdkuplat": lambda: run_sdk_streams(account, "benchsdkuplat", recs, 100, encode=False, latency_s=lat),
        "many8": lambda: run_producer(account, "benchmany8", recs, 100, threadPoolCount="8", **many)[0],
        "manylat8": lambda: run_producer(account, "benchmanylat8", recs, 100, latency_s=lat, threadPoolCount="8",
                                         **many)[0],
    }
    # best of `repeats`, interleaved, so load from other processes on this shared machine hits every
    # configuration alike; containers are emptied between rounds to keep Azurite's store small
    best: dict[str, tuple[float, float]] = {}  # key -> (seconds, Azurite CPU seconds) of the fastest round
    for _ in range(repeats):
        for key, run in runs.items():
            cpu0 = _cpu_seconds(azurite.pid)
            took = run()
            cpu = _cpu_seconds(azurite.pid) - cpu0
            if took < best.get(key, (float("inf"), 0.0))[0]:
                best[key] = (took, cpu)
        for name in CONTAINERS:
            container = service.get_container_client(f"bench{name}")
            for blob in container.list_blobs():
                container.delete_blob(blob.name)

    def row(label: str, key: str, *refs: str) -> list[str]:
        secs, cpu = best[key]
        ratios = []
        for ref in refs:
            if ref == "":
                ratios.append("")
            elif ref.startswith("b"):
                ratios.append(f"{best[ref][0] / secs:.1f}x")
            else:
                ratios.append(f"{best[ref][0] / secs:.0%}")
        return [label, f"{mb:.0f}", f"{secs:.2f}", f"{mb / secs:.1f}", f"{cpu:.1f}", *ratios]

    one_rows = [
        row("producer, 1 stream (default 10 MiB blocks)", "one", "ceiling"),
        row(f"(a) SDK upload_blob(max_concurrency={THREADS}) of the same bytes, encoded beforehand", "ceiling", ""),
    ]
    one = table(["run", "MiB", "seconds", "MiB/s", "Azurite CPU s", "vs (a)"], one_rows)
    many_rows = [
        row("producer, 100 streams (1 MiB blocks)", "many", "blocking", "sdk", "sdkup"),
        row("producer, 100 streams, no transaction (library use)", "manyplain", "blocking", "sdk", "sdkup"),
        row("producer, 100 streams, default 10 MiB blocks (each blob one Put Blob, as (c))", "manydefault", "", "sdk",
            "sdkup"),
        row("(b) blocking stage per block (rejected design 3)", "blocking", "", "", ""),
        row(f"(c) SDK: fastavro.writer + upload_blob per stream, {THREADS} at a time", "sdk", "", "", ""),
        row("(c0) as (c), files encoded beforehand (upload only)", "sdkup", "", "", ""),
        row("producer, threadPoolCount=8", "many8", "blocking", "sdk", "sdkup"),
        row("producer, **+20 ms per request**", "manylat", "blockinglat", "sdklat", "sdkuplat"),
        row("(b') blocking design, +20 ms per request", "blockinglat", "", "", ""),
        row("(c') SDK encode + upload, +20 ms per request", "sdklat", "", "", ""),
        row("(c0') SDK upload only, +20 ms per request", "sdkuplat", "", "", ""),
        row("producer, threadPoolCount=8, +20 ms per request", "manylat8", "blockinglat", "sdklat", "sdkuplat"),
    ]
    many_table = table(["100 streams", "MiB", "seconds", "MiB/s", "Azurite CPU s", "vs blocking (b)",
                        "vs SDK (c)", "vs SDK upload only (c0)"], many_rows)

    acc = json.dumps({"name": account.account_name, "key": account.account_key, "blob": account.blob_endpoint,
                      "table": account.table_endpoint})
    mem_rows = []
    for label, cap in (("default cap (256 MiB: nothing staged before flush)", "268435456"),
                       ("maxBufferedBytes = 32 MiB", "33554432")):
        out = subprocess.run([sys.executable, __file__, "--memory-probe", acc, str(scale["mem_partitions"]),
                              str(scale["mem_per_partition"]), cap], capture_output=True, text=True, check=True)
        m = json.loads(out.stdout.strip().splitlines()[-1])
        mem_rows.append([label, f"{m['bytes_mb']:.0f}", f"{m['buffered_peak_mb']:.1f}", f"{m['rss_growth_mb']:.0f}",
                         m["blobs"], m["blocks"], f"{m['seconds']:.1f}"])
    memory = table(["1,000 open partitions", "MiB written", "peak buffered MiB", "peak RSS growth MiB", "blobs",
                    "blocks", "seconds"], mem_rows)
    records_note = (f"{n:,} records of ~1 KiB (Avro: id, ts, 1,000-char payload), threadPoolCount={THREADS}, "
                    f"compression none, scale `{scale_name}`. Producer times run from the first send to the end "
                    "of flush (all blobs committed) and include Avro encoding; the producer sends in a transaction "
                    "(begin, send, flush(transaction)) as the task runtime does, unless the row says otherwise. "
                    "Each figure is the best of "
                    f"{repeats} interleaved rounds (the machine is shared with other jobs). Ratios are speed "
                    "ratios against the baseline in "
                    "the same setting: loopback rows against loopback baselines, **+20 ms** rows against "
                    "**+20 ms** baselines (20 ms slept before every request, in both designs and the SDK).")
    return (f"{records_note}\n\nOne stream:\n\n{one}\n\n100 streams:\n\n{many_table}\n\n"
            f"Memory, each in its own process:\n\n{memory}\n")


if __name__ == "__main__":
    main()
