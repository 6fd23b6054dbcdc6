"""``sparza stream create|grow|describe|tail|load|compact|optimize|truncate``: Delta Lake streams from the shell.

A STREAM argument is a stream name of a delta system (``--system``, tables under its
``systems.<s>.delta.root`` or ``--root``) or a table location: a path or ``az://container/path``
(the stream is then named after the last path segment). With ``--system`` naming a kafka or
eventhubs system, ``create``, ``grow``, ``describe``, ``tail`` and ``load`` work on its topics.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from sparza.cli._help import SparzaTyper
from sparza.config import Config
from sparza.errors import ConfigError, SerdeError
from sparza.serde import serde_from_name
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

__all__ = ["app", "register"]

app = SparzaTyper(help="Create, inspect, fill and maintain Delta Lake streams.", no_args_is_help=True)

_CONFIG = typer.Option(None, "--config", "-c", metavar="FILE", help="Job config file (YAML or .properties).")
_SYSTEM = typer.Option(None, "--system", "-s",
                       help="System name: a delta system (default: the config's only one), or a kafka/eventhubs one.")
_ROOT = typer.Option(None, "--root", help="Override systems.<system>.delta.root (a dir or az://container/prefix).")


def _system_name(config: Config, system: str | None) -> str:
    if system:
        return system
    deltas = sorted({k.split(".")[1] for k, v in config.items()
                     if k.startswith("systems.") and k.endswith(".samza.factory") and v.strip().lower() == "delta"})
    return deltas[0] if len(deltas) == 1 else "delta"


def _resolve(stream: str, config_path: Path | None, system: str | None, root: str | None) -> tuple[Config, str, str]:
    """(config, system name, stream name) for a STREAM argument that is a name or a location."""
    config = Config.load(config_path)
    name = _system_name(config, system)
    overrides: dict[str, str] = {}
    if root:
        overrides[f"systems.{name}.delta.root"] = root
    if "/" in stream or "://" in stream or stream.startswith("."):
        location = stream.rstrip("/")
        stream = location.rsplit("/", 1)[-1] or "stream"
        overrides[f"systems.{name}.streams.{stream}.delta.location"] = location
    return config.with_overrides(overrides), name, stream


def _admin(config: Config, system: str) -> Any:
    if _is_kafka(config, system):
        return _kafka_factory(config, system).get_admin(system, config)
    from sparza.systems.delta import DeltaSystemAdmin

    return DeltaSystemAdmin(system, config)


def _kafka_factory(config: Config, system: str) -> Any:
    from sparza.systems import get_system_factory

    return get_system_factory(config, system)


def _is_kafka(config: Config, system: str) -> bool:
    """True when ``system`` is a kafka or eventhubs system (topics, not Delta tables)."""
    from sparza.systems import SYSTEM_FACTORY

    if not SYSTEM_FACTORY.is_set(config, system=system):
        return False
    from sparza.systems.kafka import EventHubsSystemFactory, KafkaSystemFactory

    return isinstance(_kafka_factory(config, system), KafkaSystemFactory | EventHubsSystemFactory)


def _where(admin: Any, stream: str) -> str:
    """Where a stream lives, for messages: a table location or a topic on brokers."""
    from sparza.systems import SupportsStreamLocation

    if isinstance(admin, SupportsStreamLocation):
        return admin.stream_location(stream)
    return f"stream {stream}"


@app.command()
def create(stream: str = typer.Argument(..., help="Stream name or location."),
           partitions: int = typer.Option(..., "--partitions", "-p", min=1, help="Partition count."),
           location: str = typer.Option(None, "--location", help="Table location: a dir or az://container/path."),
           config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Create a stream with N partitions (no-op when it exists with the same count)."""
    from sparza.systems import StreamSpec

    cfg, name, stream_name = _resolve(stream, config, system, root)
    if location:
        cfg = cfg.with_overrides({f"systems.{name}.streams.{stream_name}.delta.location": location})
    admin = _admin(cfg, name)
    created = admin.create_stream(StreamSpec(stream_name, partitions))
    verb = "created" if created else "already exists"
    typer.echo(f"stream {stream_name} {verb}: {partitions} partitions at {_where(admin, stream_name)}")


@app.command()
def grow(stream: str = typer.Argument(..., help="Stream (topic) name."),
         partitions: int = typer.Option(..., "--partitions", "-p", min=1,
                                        help="The partition count it gets, in all (more than it has)."),
         config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Give a stream more partitions (a Kafka topic: CreatePartitions; a Delta stream: its table's partition count,
    in one metadata commit). A job that reads it then stops, or regroups its tasks, as its job.partition.expansion
    says (see docs/operations.md, "Partitions that grow")."""
    from sparza.systems import SupportsPartitionGrowth

    cfg, name, stream_name = _resolve(stream, config, system, root)
    admin = _admin(cfg, name)
    if not isinstance(admin, SupportsPartitionGrowth):
        raise ConfigError("--system", name, "a system whose streams can get more partitions (kafka, delta, "
                          "eventhubs)")
    before = admin.grow_stream(stream_name, partitions)
    typer.echo(f"stream {stream_name}: {before} -> {partitions} partitions at {_where(admin, stream_name)}")


@app.command()
def describe(stream: str = typer.Argument(..., help="Stream name or location."),
             config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Show a stream's location, properties and per-partition offsets and row counts."""
    from rich.console import Console
    from rich.table import Table

    from sparza.systems.delta.admin import open_table
    from sparza.systems.delta.inspect import live_rows_by_partition

    cfg, name, stream_name = _resolve(stream, config, system, root)
    admin = _admin(cfg, name)
    meta = admin.get_system_stream_metadata({stream_name})[stream_name]
    console = Console()
    if _is_kafka(cfg, name):
        console.print(f"stream [bold]{stream_name}[/bold]: {_where(admin, stream_name)}", highlight=False)
        console.print(f"partitions: {meta.partition_count}, bounded: {admin.settings.is_bounded(stream_name)}")
        # Offsets are not dense (transaction markers, compaction): upcoming - oldest is an upper bound.
        table = Table("partition", "oldest", "newest", "upcoming", "offsets (≥ records)")
        for p, m in sorted(meta.partitions.items()):
            span = int(m.upcoming) - int(m.oldest) if m.oldest is not None else 0
            table.add_row(str(p), m.oldest or "-", m.newest or "-", m.upcoming, str(span))
        console.print(table)
        return
    rows = live_rows_by_partition(open_table(admin.location(stream_name)))
    console.print(f"stream [bold]{stream_name}[/bold] at {admin.stream_location(stream_name)}")
    console.print(f"partitions: {meta.partition_count}, version: {meta.properties.get('version')}, "
                  f"bounded: {admin.is_bounded(stream_name)}")
    for key, value in sorted(admin.properties(stream_name).items()):
        console.print(f"  {key} = {value}", highlight=False)
    table = Table("partition", "oldest", "newest", "upcoming", "rows")
    for p, m in sorted(meta.partitions.items()):
        table.add_row(str(p), m.oldest or "-", m.newest or "-", m.upcoming, str(rows.get(p, 0)))
    console.print(table)


def _show(data: bytes | None, serde: Any) -> str:
    if data is None:
        return "null"
    try:
        value = serde.from_bytes(data)
    except SerdeError:
        return repr(bytes(data))
    if isinstance(value, bytes):
        return repr(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


@app.command()
def tail(stream: str = typer.Argument(..., help="Stream name or location."),
         count: int = typer.Option(10, "--count", "-n", min=1, help="How many messages to print."),
         partition: int = typer.Option(None, "--partition", help="Only this partition (default: all)."),
         serde: str = typer.Option("string", "--serde", help="Decode values with bytes|string|json|avro."),
         key_serde: str = typer.Option("string", "--key-serde", metavar="SERDE", help="Decode keys with this serde."),
         include_control: bool = typer.Option(True, "--control/--no-control", help="Show control messages."),
         config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Print the last messages of a stream (merged by event time across partitions)."""
    from sparza.systems.delta import DeltaSystemConsumer
    from sparza.systems.delta.inspect import start_of_last

    cfg, name, stream_name = _resolve(stream, config, system, root)
    value_serde = serde_from_name(serde, key="--serde", config=cfg)
    k_serde = serde_from_name(key_serde, key="--key-serde", config=cfg)
    admin = _admin(cfg, name)
    parts = [partition] if partition is not None else list(range(admin.partition_count(stream_name)))
    found = []
    if _is_kafka(cfg, name):
        meta = admin.get_system_stream_metadata({stream_name})[stream_name]
        kafka = _kafka_factory(cfg, name).get_consumer(name, cfg)
        for p in parts:
            pm = meta.partitions[p]
            if pm.oldest is None:
                continue
            # Offsets are not dense (transaction markers, compaction): widen the window until it holds
            # `count` records or reaches the oldest offset.
            ssp = SystemStreamPartition(name, stream_name, p)
            window = count
            while True:
                start = max(int(pm.oldest), int(pm.upcoming) - window)
                got = list(kafka.read(ssp, str(start), pm.upcoming, include_control=include_control))
                if len(got) >= count or start == int(pm.oldest):
                    break
                window *= 4
            found += got[-count:]
        kafka.stop()
    else:
        consumer = DeltaSystemConsumer(name, cfg)
        for p in parts:
            ssp = SystemStreamPartition(name, stream_name, p)
            first = start_of_last(consumer.log(stream_name), p, count)
            found += list(consumer.read(ssp, first, include_control=include_control, bounded=False))[-count:]
    found.sort(key=lambda e: (e.timestamp or 0, e.ssp.partition))
    for envelope in found[-count:]:
        when = dt.datetime.fromtimestamp((envelope.timestamp or 0) / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
        kind = "" if envelope.type == MessageType.USER else f" [{envelope.type.name.lower()}]"
        typer.echo(f"#{envelope.ssp.partition} {envelope.offset} {when}{kind} "
                   f"{_show(envelope.key, k_serde)}: {_show(envelope.message, value_serde)}")


def _event_ms(value: Any, column: str) -> int:
    """Epoch ms (a number) or ISO-8601 text (naive means UTC) as epoch ms."""
    if isinstance(value, bool) or value is None or value == "":
        raise ConfigError("--timestamp", value, f"column {column!r} to hold epoch ms or ISO-8601 time")
    if isinstance(value, int | float):
        return int(value)
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError("--timestamp", value, f"column {column!r} to hold epoch ms or ISO-8601 time") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def _records(path: Path, fmt: str) -> Iterator[tuple[dict[str, Any], bytes]]:
    """(record, value bytes) per line: JSON lines keep their text; CSV rows become JSON objects."""
    if fmt == "auto":
        fmt = "csv" if path.suffix.lower() in (".csv", ".tsv") else "jsonl"
    with path.open("rb") as handle:
        if fmt == "csv":
            text = io.TextIOWrapper(handle, encoding="utf-8", newline="")
            for row in csv.DictReader(text, delimiter="\t" if path.suffix.lower() == ".tsv" else ","):
                yield row, json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            return
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise SerdeError(f"{path}:{number}: not a JSON line ({exc})") from exc
            yield record, line.strip()


def _message(record: dict[str, Any], value: bytes, key: str, timestamp: str | None, where: str,
             columns_hint: str) -> tuple[bytes | None, bytes, int | None]:
    """(key bytes, value, event ms) of one record; a bad record raises naming its place in the file."""
    if not isinstance(record, dict):
        raise SerdeError(f"{where}: not a JSON object but {type(record).__name__}")
    if key not in record:
        raise ConfigError("--key", key, f"a column of {columns_hint} (found at {where}: "
                                         f"{', '.join(map(str, record))})")
    key_value = record[key]
    key_bytes = None if key_value is None else str(key_value).encode("utf-8")
    try:
        event_ms = _event_ms(record.get(timestamp), timestamp) if timestamp else None
    except ConfigError as exc:
        raise ConfigError("--timestamp", record.get(timestamp or ""),
                          f"{exc.expected} (at {where})") from None
    return key_bytes, value, event_ms


def _load_id(stream: str, file: Path, key: str, timestamp: str | None, fmt: str) -> str:
    """The app id of a load: the target stream and what makes its messages (file content, key and time columns)."""
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    digest.update(json.dumps([key, timestamp, fmt]).encode("utf-8"))
    return f"sparza-load/{stream}/{digest.hexdigest()[:32]}"


@app.command()
def load(stream: str = typer.Argument(..., metavar="STREAM_LOCATION", help="Stream name or location."),
         file: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSON lines or CSV file."),
         key: str = typer.Option(..., "--key", metavar="COLUMN",
                                 help="Column used as message key (and for partitioning)."),
         timestamp: str = typer.Option(None, "--timestamp", metavar="COLUMN",
                                       help="Event-time column: epoch ms or ISO-8601."),
         partitions: int = typer.Option(None, "--partitions", "-p", min=1,
                                        help="Create the stream with this many partitions if it is missing."),
         fmt: str = typer.Option("auto", "--format", metavar="auto|jsonl|csv",
                                 help="Input format (auto: csv for .csv/.tsv files, else jsonl)."),
         batch: int = typer.Option(10_000, "--batch", min=1, help="Messages per commit."),
         config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Load a JSON-lines or CSV file into a stream: value = the record as JSON, key = a column.

    The whole file is checked before the first commit (a bad line loads nothing), and every commit is
    a Delta app transaction of this file's load: loading the same file again (after a failure, or by
    mistake) writes only the messages not committed yet.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

    from sparza.errors import SparzaError
    from sparza.systems import StreamSpec, Transaction
    from sparza.systems.delta import DeltaSystemProducer, StreamNotFoundError
    from sparza.systems.kafka import TopicNotFoundError

    cfg, name, stream_name = _resolve(stream, config, system, root)
    fmt = fmt.lower()
    # 1. Check every record before anything is committed.
    total = 0
    try:
        for record, value in _records(file, fmt):
            total += 1
            _message(record, value, key, timestamp, f"{file.name} record {total}", file.name)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SerdeError(f"{file}: unreadable after record {total} ({exc}); nothing was loaded") from None
    except SerdeError as exc:
        raise SerdeError(f"{exc}; nothing was loaded (the whole file is checked before the first commit): fix "
                         "the line and load the file again") from None
    except ConfigError as exc:
        raise ConfigError(exc.key, exc.value, f"{exc.expected}; nothing was loaded") from None
    admin = _admin(cfg, name)
    try:
        admin.partition_count(stream_name)
    except (StreamNotFoundError, TopicNotFoundError):
        if partitions is None:
            raise
        admin.create_stream(StreamSpec(stream_name, partitions))
    # 2. Commit in chunks, each a transaction whose version is the count of records through it (a Delta
    #    app transaction; on Kafka a Kafka transaction recording that version, see docs/kafka.md).
    app_id = _load_id(stream_name, file, key, timestamp, fmt)
    kafka = _is_kafka(cfg, name)
    producer: Any
    if kafka:
        producer = _kafka_factory(cfg, name).get_producer(name, cfg)
        done = producer.committed_version(app_id) or 0
    else:
        producer = DeltaSystemProducer(name, cfg)
        done = admin.transaction_version(stream_name, app_id) or 0
    where = _where(admin, stream_name)
    if done >= total:
        typer.echo(f"already loaded: all {total} messages of {file.name} are in {stream_name} ({where}, app "
                   f"transaction {app_id}); nothing written")
        return
    source = "sparza-load"
    producer.register(source)
    producer.start()
    target = SystemStream(name, stream_name)
    position = committed = done
    size = os.path.getsize(file)
    try:
        with Progress(TextColumn("loading {task.description}"), BarColumn(),
                      TextColumn("{task.fields[sent]} messages"), TransferSpeedColumn()) as progress:
            task = progress.add_task(file.name, total=size, sent=0)
            for index, (record, value) in enumerate(_records(file, fmt)):
                progress.update(task, advance=len(value) + 1)
                if index < done:
                    continue  # committed by an earlier load of this file
                key_bytes, value, event_ms = _message(record, value, key, timestamp,
                                                      f"{file.name} record {index + 1}", file.name)
                if kafka and (index == done or index % batch == 0):
                    # A Kafka transaction is begun for each chunk; its version is where the chunk ends.
                    producer.begin(source, Transaction(app_id, min((index // batch + 1) * batch, total)))
                producer.send(source, OutgoingMessageEnvelope(target, value, key=key_bytes, timestamp=event_ms))
                position = index + 1
                progress.update(task, sent=position - done)
                if position % batch == 0:
                    producer.flush(source, transaction=Transaction(app_id, position))
                    committed = position
            if position > committed:
                producer.flush(source, transaction=Transaction(app_id, position))
                committed = position
            progress.update(task, completed=size)
    except Exception as exc:
        raise SparzaError(f"loading {file.name} into {stream_name} stopped: committed {committed} of {total} "
                          f"messages ({committed - done} by this run), the rest not: {type(exc).__name__}: {exc}. "
                          "Fix the cause and run the same command again: messages already committed are "
                          "skipped, never written twice") from exc
    finally:
        producer.stop()
    skipped = f"; {done} already loaded, skipped" if done else ""
    typer.echo(f"loaded {committed - done} messages into {stream_name} ({where}){skipped}")


@app.command()
def compact(stream: str = typer.Argument(..., help="Stream name or location."),
            target_size: str = typer.Option("128MB", "--target-size", metavar="SIZE", help="Target file size."),
            config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Merge small files (offsets do not change: stream readers keep using the original commits)."""
    from sparza.config import parse_byte_size
    from sparza.systems.delta.maintenance import compact as run_compact

    cfg, name, stream_name = _resolve(stream, config, system, root)
    result = run_compact(_admin(cfg, name).location(stream_name), target_size=parse_byte_size(target_size))
    if result.version is None:
        typer.echo(f"stream {stream_name}: nothing to compact")
    else:
        typer.echo(f"stream {stream_name}: merged {result.files_removed} files into {result.files_added} "
                   f"(version {result.version}); offsets unchanged")


@app.command()
def optimize(stream: str = typer.Argument(..., help="Typed table name or location."),
             target_size: str = typer.Option("128MB", "--target-size", metavar="SIZE", help="Target file size."),
             vacuum: bool = typer.Option(False, "--vacuum/--no-vacuum",
                                         help="Also delete files compaction and merges replaced."),
             retain: float = typer.Option(168.0, "--retain-hours", metavar="HOURS",
                                          help="Vacuum only files replaced more than this many hours ago (>= 1)."),
             config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Compact a typed result table (and vacuum it): replays stay exact, the app transactions are kept."""
    from sparza.config import parse_byte_size
    from sparza.systems.delta.tables import optimize_table

    cfg, name, stream_name = _resolve(stream, config, system, root)
    result = optimize_table(_admin(cfg, name).location(stream_name), target_size=parse_byte_size(target_size),
                            vacuum_retention_hours=retain if vacuum else None)
    merged = ("nothing to compact" if result.version is None else
              f"merged {result.files_removed} files into {result.files_added} (version {result.version})")
    vacuumed = "" if result.vacuumed is None else f"; vacuumed {result.vacuumed} files older than {retain:g}h"
    typer.echo(f"table {stream_name}: {merged}{vacuumed}")


@app.command()
def truncate(stream: str = typer.Argument(..., help="Stream name or location."),
             before: int = typer.Option(..., "--before-version", metavar="VERSION", min=0,
                                        help="Remove rows added before this Delta version."),
             config: Path = _CONFIG, system: str = _SYSTEM, root: str = _ROOT) -> None:
    """Retention: remove rows of versions before N; reading their offsets then fails clearly."""
    from sparza.systems.delta.maintenance import truncate as run_truncate

    cfg, name, stream_name = _resolve(stream, config, system, root)
    result = run_truncate(_admin(cfg, name).location(stream_name), before)
    typer.echo(f"stream {stream_name}: oldest kept version {result.horizon}; removed {result.files_removed} "
               f"files from the table, deleted {result.files_deleted} from storage and {result.commits_deleted} "
               "commit files a checkpoint covers")


def register(root: typer.Typer) -> None:
    """Add ``stream`` to the root command."""
    root.add_typer(app, name="stream")
