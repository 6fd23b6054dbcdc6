"""``sparza demo``: the Wikipedia page-statistics pipeline, end to end, on embedded defaults.

It generates (or reads, ``--input``) a bounded stream of Wikipedia edits and a user-profile CDC
stream, writes both into Delta streams (``--source delta``, the default) or Kafka topics
(``--source kafka``: a local Apache Kafka broker the demo starts and stops, the running ``sparza dev-kafka``
broker, or ``--kafka-bootstrap-servers``), and runs the two-stage high-level application
``examples.wikipedia.app.WikipediaPageStats`` on Spark: parse and ``partition_by`` page; join the
profile from a broadcast adjunct store (bootstrapped), count per page in 1-minute event-time windows
kept in RocksDB (backed up to the blob store) and send each window as Avro to the Azure blob
producer. The intermediate stream of ``partition_by`` lives where the inputs do. Storage is the
embedded Azurite unless an account is given. End-of-stream ends the job;
the summary then lists what was written and how to read it back.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from sparza.host import sparza_home

__all__ = ["TABLE_SQL", "DemoResult", "check_source", "kafka_brokers", "register", "run_demo", "table_query"]

SCALES = {"small": 5_000, "default": 40_000, "large": 400_000}
"""Edit counts of ``--scale`` (``--events`` overrides)."""
_SCALE_HELP = "Size preset: " + ", ".join(f"{name}={edits}" for name, edits in SCALES.items()) + " edits."

_REPO = Path(__file__).resolve().parents[3]


@dataclass
class DemoResult:
    """What one demo run did: the numbers of its summary (also written to ``summary.json``)."""

    run_id: str
    run_dir: str
    container: str
    stream: str
    events: int
    profiles: int
    messages_in: dict[str, int] = field(default_factory=dict)
    repartitioned: int = 0
    windows: int = 0
    blobs: list[dict[str, Any]] = field(default_factory=list)
    snapshots: dict[str, dict[str, str]] = field(default_factory=dict)
    verified: bool | None = None
    seconds: float = 0.0
    source: str = "delta"
    streams: list[str] = field(default_factory=list)
    table: str = ""
    """Where the typed page_stats table (the windows upserted by page and window start) lives."""
    table_rows: int = 0
    sessions_table: str = ""
    """Where the typed user_sessions table (each user's editing sessions, upserted) lives."""
    sessions: int = 0
    sessions_users: int = 0


def _importable_examples() -> None:
    """The app class is imported by dotted path on the driver and on Spark's Python workers."""
    root = str(_REPO)
    if root not in sys.path:
        sys.path.insert(0, root)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])


def _connection_string(given: str | None, console: Console) -> str:
    from sparza.devservers.storage import DevStorage

    if given:
        from sparza.azure import StorageAccount

        account = StorageAccount.from_connection_string(given, source="--azure-connection-string")
        console.print(f"storage: account [bold]{account.account_name}[/bold] ({account.blob_endpoint})")
        return given
    proc, fresh = DevStorage.default().start()
    console.print(f"storage: embedded Azurite {'started' if fresh else 'running'} on 127.0.0.1:{proc.blob_port} "
                  f"(stop it with 'sparza dev-storage stop')")
    return proc.connection_string


@contextmanager
def kafka_brokers(given: str | None, run_dir: Path, console: Console) -> Iterator[str]:
    """The bootstrap servers of the demo's Kafka source: ``given``, else the running ``sparza dev-kafka``
    broker, else an Apache Kafka broker started for this run on free loopback ports (its log dir in the run's
    dir) and stopped when the block ends, also when it fails."""
    from sparza.devservers.kafka import DevKafka, KafkaBroker

    if given:
        console.print(f"kafka: brokers {given}")
        yield given
        return
    running = DevKafka.default().status()
    if running is not None:
        console.print(f"kafka: dev broker running on {running.bootstrap_servers} (pid {running.pid}; "
                      "stop it with 'sparza dev-kafka stop')")
        yield running.bootstrap_servers
        return
    broker = KafkaBroker(run_dir / "kafka")
    broker.start()
    console.print(f"kafka: Apache Kafka broker started for this run on {broker.bootstrap_servers} (pid {broker.pid}; "
                  f"stopped when the demo ends, log {broker.data_dir / broker.LOG_NAME})")
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


def _stage_input_counts(runner: Any) -> int:
    return int(runner.metrics.snapshot().get("aggregate", {}).get("messages-in", 0))


def _count_user_messages(config: Any, stream: str) -> int:
    """How many user messages (not control messages) ``stream`` holds over all its partitions."""
    from sparza.streams import SystemStreamPartition
    from sparza.systems import SupportsArrowRead, get_system_factory

    system, name = stream.split(".", 1)
    factory = get_system_factory(config, system)
    partitions = factory.get_admin(system, config).get_system_stream_metadata({name})[name].partition_count
    consumer = factory.get_consumer(system, config)
    if not isinstance(consumer, SupportsArrowRead):
        raise TypeError(f"the demo counts the messages of {stream} with read_arrow, which system {system!r} "
                        "does not offer")
    count = 0
    try:
        for p in range(partitions):
            for batch in consumer.read_arrow(SystemStreamPartition(system, name, p), None, None,
                                             include_control=False, bounded=False):
                count += sum(1 for t in batch.column("type").to_pylist() if t == 0)
    finally:
        consumer.stop()
    return count


def _run_stages(plan: Any, master: str | None, console: Console) -> dict[str, int]:
    """Run every stage as its own streaming query of one SparkSession until all of them ended."""
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime import JobRunner, build_spark_session
    from sparza.runtime.driver.application import run_together

    stages = [(s.name, s.config) for s in plan.stages]
    spark = build_spark_session(JobConfig.from_config(stages[0][1]), master, "sparza-demo")

    def status(stage: str) -> Any:
        return lambda line: console.print(f"  [cyan]{stage:>8}[/cyan] {line}", highlight=False)

    runners = [JobRunner(cfg, spark=spark, install_signal_handlers=False, status=status(name))
               for name, cfg in stages]
    try:
        run_together(runners)
        return {name: _stage_input_counts(r) for (name, _), r in zip(stages, runners, strict=True)}
    finally:
        for runner in runners:
            runner.close()
        spark.stop()


def _snapshots(plan: Any) -> dict[str, dict[str, str]]:
    """``task -> store -> snapshot id`` from the committed task checkpoints of every stage."""
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime import checkpoint_store_from_config

    out: dict[str, dict[str, str]] = {}
    for stage in plan.stages:
        job = JobConfig.from_config(stage.config)
        for task, cp in checkpoint_store_from_config(stage.config, job.job_key).read_all().items():
            stores = dict(cp.stores)
            for store, entry in (cp.adjunct or {}).get("stores", {}).items() if isinstance(cp.adjunct, dict) else []:
                if not isinstance(entry, dict):
                    continue
                # The builder task publishes the broadcast snapshot; every task names the one it read.
                snapshot = entry.get("published") or (entry.get("read") or {}).get("snapshot")
                if snapshot:
                    stores[f"{store} (adjunct)"] = str(snapshot)
            if stores:
                out[f"{stage.name}/{task}"] = stores
    return out


def _read_windows(connection_string: str, container: str, stream: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """Every output blob of the run (name, size, records) and every window record in them."""
    from sparza.azure import StorageAccount
    from sparza.systems.azureblob.reading import decode_blob

    client = StorageAccount.from_connection_string(connection_string).blob_service_client()
    container_client = client.get_container_client(container)
    blobs, records = [], []
    for blob in container_client.list_blobs(name_starts_with=stream + "/"):
        data = container_client.download_blob(blob.name).readall()
        decoded = list(decode_blob(blob.name, data))
        blobs.append({"name": blob.name, "bytes": blob.size, "records": len(decoded)})
        records.extend(decoded)
    return blobs, records


def check_source(source: str, kafka_bootstrap_servers: str | None = None) -> None:
    """Reject an unknown ``--source``, and Kafka brokers given for a Delta source, before anything starts."""
    from examples.wikipedia.config import SOURCES

    from sparza.errors import ConfigError

    if source not in SOURCES:
        raise ConfigError("--source", source, "", message=f"--source must be one of {', '.join(SOURCES)}, "
                          f"got {source!r}: 'delta' writes the input into Delta streams, 'kafka' into Kafka topics")
    if kafka_bootstrap_servers and source != "kafka":
        raise ConfigError("--kafka-bootstrap-servers", kafka_bootstrap_servers, "",
                          message="--kafka-bootstrap-servers is used only with --source kafka")


def run_demo(*, connection_string: str | None, master: str | None, events: int, input_file: Path | None,
             seed: int, partitions: int, console: Console, lateness_ms: int = 120_000, source: str = "delta",
             kafka_bootstrap_servers: str | None = None, sessions: bool = False) -> DemoResult:
    """Generate or read the input, run the pipeline, read the results back; returns the summary.

    ``source`` is where the input and intermediate streams live: ``delta`` or ``kafka`` (see
    :func:`kafka_brokers` for which broker). ``sessions`` also keeps each user's editing sessions in stage 1
    (a session window upserted into the ``user_sessions`` table) and checks them.
    """
    _importable_examples()
    check_source(source, kafka_bootstrap_servers)
    from examples.wikipedia.generate import (
        generate_edits,
        generate_profiles,
        profiles_for_users,
        read_edits_jsonl,
        write_jsonl,
    )

    started = time.monotonic()
    conn = _connection_string(connection_string, console)
    run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid() % 10_000:04d}"
    home = sparza_home()
    run_dir = (home / "demo" / run_id).resolve()
    (run_dir / "input").mkdir(parents=True, exist_ok=True)

    if input_file is not None:
        edits = list(read_edits_jsonl(input_file))
        profiles = profiles_for_users(sorted({e.user for e in edits}), seed=seed)
        console.print(f"input: {len(edits)} edits read from {input_file}; {len(profiles)} generated profile "
                      f"changes for their {len({e.user for e in edits})} users")
    else:
        edits = generate_edits(events, seed=seed)
        profiles = generate_profiles(seed=seed + 4)
        console.print(f"input: {len(edits)} generated edits (seed {seed}; 500 Zipf pages, 200 Zipf users, 3 hours "
                      f"of event time) and {len(profiles)} profile changes (inserts, updates, deletes)")
    write_jsonl(run_dir / "input" / "edits.jsonl", [e.to_json() for e in edits])
    write_jsonl(run_dir / "input" / "profiles.jsonl", [{"user": u, "profile": p} for u, p in profiles])

    if source == "kafka":
        with kafka_brokers(kafka_bootstrap_servers, run_dir, console) as brokers:
            return _run_pipeline(conn, run_id, run_dir, edits, profiles, master=master, partitions=partitions,
                                 lateness_ms=lateness_ms, source=source, kafka_bootstrap_servers=brokers,
                                 console=console, started=started, sessions=sessions)
    return _run_pipeline(conn, run_id, run_dir, edits, profiles, master=master, partitions=partitions,
                         lateness_ms=lateness_ms, source=source, kafka_bootstrap_servers=None, console=console,
                         started=started, sessions=sessions)


def _run_pipeline(conn: str, run_id: str, run_dir: Path, edits: list[Any], profiles: list[Any], *,
                  master: str | None, partitions: int, lateness_ms: int, source: str,
                  kafka_bootstrap_servers: str | None, console: Console, started: float,
                  sessions: bool = False) -> DemoResult:
    """Create and fill the input streams, run both stages, read the windows back and check them."""
    from examples.wikipedia.config import OUTPUT_CONTAINER, demo_config, output_stream
    from examples.wikipedia.generate import START_MS, expected_demo_windows, expected_user_sessions
    from examples.wikipedia.load import create_streams, edits_stream, load_edits, load_profiles, profiles_stream

    from sparza.api import plan_application
    from sparza.config.shared import TASK_INPUTS
    from sparza.systems import SupportsStreamLocation, get_system_factory

    config = demo_config(run_dir, run_id, conn, partitions=partitions, lateness_ms=lateness_ms, source=source,
                         kafka_bootstrap_servers=kafka_bootstrap_servers, sessions=sessions)
    # Quiet Spark's JVM (its log4j config must be given before the JVM starts) and bind it to loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(__file__).resolve().parents[1] / "resources" / "log4j2.properties"
    config = config.with_overrides({"spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{log4j}",
                                    # The summary counts what went through the intermediate stream, so this bounded
                                    # run keeps it whole (a long-running application lets it go: docs/operations.md).
                                    "job.delete.committed.messages.interval.ms": str(7 * 86_400_000)})
    create_streams(config, partitions)
    load_edits(config, edits)
    load_profiles(config, profiles, timestamp=min((e.timestamp for e in edits), default=START_MS))
    inputs = [(edits_stream(config), partitions), (profiles_stream(config), 1)]
    admin = get_system_factory(config, inputs[0][0].system).get_admin(inputs[0][0].system, config)
    where = [admin.stream_location(s.stream) if isinstance(admin, SupportsStreamLocation) else str(s)
             for s, _ in inputs]
    console.print(f"[{time.monotonic() - started:5.1f}s] streams: " + ", ".join(
        f"{s} ({n} partition{'s' if n > 1 else ''}): {w}" for (s, n), w in zip(inputs, where, strict=True)),
        highlight=False)

    plan = plan_application(config)
    plan.create_streams()
    console.print("application: " + " → ".join(
        f"stage [bold]{s.name}[/bold] ({','.join(TASK_INPUTS.get(s.config) or ())})" for s in plan.stages))
    console.print(f"[{time.monotonic() - started:5.1f}s] running (each line is one committed batch of one stage):")
    counts = _run_stages(plan, master, console)

    container, stream = OUTPUT_CONTAINER, output_stream(run_id)
    blobs, records = _read_windows(conn, container, stream)
    expected = expected_demo_windows(edits, profiles)
    got = {(r["page"], _millis(r["window_start"])): (r["edits"], r["bytes_changed"], r["bot_edits"])
           for r in records}
    table_path, table_rows = _read_table(config)
    in_table = {(r["page"], _millis(r["window_start"])): (r["edits"], r["bytes_changed"], r["bot_edits"])
                for r in table_rows}
    session_rows: list[dict[str, Any]] = []
    sessions_path, users, sessions_exact = "", 0, True
    if sessions:
        sessions_path, session_rows = _read_table(config, "app.wikipedia.sessions.table")
        got_sessions = {(r["user"], _millis(r["window_start"])): (_millis(r["window_end"]), r["edits"],
                                                                   r["bytes_changed"]) for r in session_rows}
        users = len({user for user, _ in got_sessions})
        sessions_exact = len(session_rows) == len(got_sessions) and got_sessions == expected_user_sessions(edits)
    intermediate = TASK_INPUTS.require(plan.stages[-1].config)[0]
    result = DemoResult(run_id=run_id, run_dir=str(run_dir), container=container, stream=stream,
                        events=len(edits), profiles=len(profiles), messages_in=counts,
                        repartitioned=_count_user_messages(plan.stages[-1].config, intermediate),
                        windows=len(records), blobs=blobs, snapshots=_snapshots(plan),
                        verified=(got == expected and len(records) == len(expected)
                                  and in_table == expected and len(table_rows) == len(expected) and sessions_exact),
                        seconds=time.monotonic() - started, source=source,
                        streams=[str(s) for s, _ in inputs] + [intermediate],
                        table=table_path, table_rows=len(table_rows), sessions_table=sessions_path,
                        sessions=len(session_rows), sessions_users=users)
    (run_dir / "summary.json").write_text(json.dumps(result.__dict__, indent=2, default=str))
    return result


TABLE_SQL = "SELECT page, window_start, edits, bot_edits FROM read_parquet(?) ORDER BY edits DESC, page LIMIT 10"
"""The query the summary suggests on the page_stats table (the ten busiest page-minutes)."""


def table_query(path: str) -> str:
    """A Python one-liner that runs :data:`TABLE_SQL` with DuckDB on the table at ``path``."""
    return ("import duckdb; from deltalake import DeltaTable; "
            f"duckdb.sql('{TABLE_SQL}', params=[DeltaTable('{path}').file_uris()]).show()")


def _read_table(config: Any, key: str = "app.wikipedia.table") -> tuple[str, list[dict[str, Any]]]:
    """A result table's location and rows (page_stats, or the table ``key`` names; read through its Delta log,
    as any reader would)."""
    from deltalake import DeltaTable

    from sparza.streams import SystemStream
    from sparza.systems.delta.settings import ROOT

    table = SystemStream.parse(config.get_str(key))  # the demo application's own app.wikipedia.* setting
    path = str(Path(ROOT.require(config, system=table.system)) / table.stream)
    return path, DeltaTable(path).to_pyarrow_table().to_pylist()


def _millis(value: Any) -> int:
    """Avro timestamp-millis come back as datetimes; the window key is epoch ms."""
    if isinstance(value, dt.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _print_summary(result: DemoResult, console: Console, conn_given: bool) -> None:
    console.print()
    console.print(f"[bold]summary[/bold] of run {result.run_id} ({result.seconds:.0f} s)")
    console.print(f"  input: {result.events} edits, {result.profiles} profile changes")
    kind = "Kafka topics" if result.source == "kafka" else "Delta streams"
    console.print(f"  source: {result.source} ({kind} {', '.join(result.streams)})", highlight=False)
    main_in = result.messages_in.get("main", 0)
    rest_in = sum(n for stage, n in result.messages_in.items() if stage != "main")
    sessions = (f", {result.sessions} editing sessions of {result.sessions_users} users (30-minute gap)"
                if result.sessions_table else "")
    console.print(f"  stage main: {main_in} messages in, {result.repartitioned} out (partition_by page){sessions}")
    console.print(f"  stage by-page: {rest_in} messages in (edits, the profile changes each task reads, control "
                  f"messages), {result.windows} out (page-minute windows)")
    console.print(f"  blobs: {len(result.blobs)} Avro blobs (gzip) in container {result.container}")
    for blob in result.blobs[:10]:
        console.print(f"    {blob['name']}  {blob['bytes']} bytes, {blob['records']} records", highlight=False)
    if len(result.blobs) > 10:
        console.print(f"    … and {len(result.blobs) - 10} more")
    console.print("  state snapshots (last committed, per task and store):")
    for task, stores in sorted(result.snapshots.items()):
        for store, snapshot in sorted(stores.items()):
            console.print(f"    {task} {store}: {snapshot}", highlight=False)
    console.print(f"  table: {result.table_rows} rows (one per page and minute, upserted) in the Delta table "
                  f"{result.table}", highlight=False)
    if result.sessions_table:
        console.print(f"  table: {result.sessions} rows (one per user and editing session, upserted; a session "
                      f"merged into another deleted) in the Delta table {result.sessions_table}", highlight=False)
    if result.verified:
        what = "every window and every session matches" if result.sessions_table else "every window matches"
        console.print(f"  [green]check: {what} the counts computed directly from the input (blobs and "
                      "tables)[/green]")
    else:
        console.print("  [red]check: the windows do NOT match the counts computed from the input[/red] (with "
                      "--input, edits more than --lateness-ms out of order are dropped as late)")
    conn = " --connection-string \"$AZURE_STORAGE_CONNECTION_STRING\"" if conn_given else ""
    first = result.blobs[0]["name"] if result.blobs else f"{result.stream}/..."
    console.print("read the results back:")
    console.print(f"  sparza blobs ls {result.container} {result.stream}/{conn}", highlight=False)
    console.print(f"  sparza blobs cat {result.container} {first}{conn}", highlight=False)
    console.print("query the table with SQL (DuckDB over the table's current files; see docs/tables.md for "
                  "Spark, Polars, Power BI):", highlight=False)
    console.print(f"  {sys.executable} -c \"{table_query(result.table)}\"", highlight=False)
    console.print(f"input and summary.json: {result.run_dir}", highlight=False)


def demo(azure_connection_string: str = typer.Option(
             None, "--azure-connection-string", metavar="CONNECTION_STRING", envvar="AZURE_STORAGE_CONNECTION_STRING",
             help="Use this storage account instead of the embedded Azurite.", show_default=False),
         master: str = typer.Option(None, "--master", metavar="URL", help="Spark master URL (default local[*])."),
         events: int = typer.Option(None, "--events", min=1, help="Number of generated edits (overrides --scale)."),
         scale: str = typer.Option("default", "--scale", metavar="small|default|large",
                                   help=_SCALE_HELP),
         input_file: Path = typer.Option(None, "--input", metavar="FILE", exists=True, dir_okay=False,
                                         help="Real edits as JSON lines (page, user, bytes_changed, timestamp ms)."),
         seed: int = typer.Option(7, "--seed", help="Seed of the generated data."),
         partitions: int = typer.Option(2, "--partitions", min=1, help="Partitions (= tasks) per stage."),
         lateness_ms: int = typer.Option(120_000, "--lateness-ms", metavar="MS", min=0,
                                         help="Allowed out-of-orderness of edits; later ones are dropped as late."),
         source: str = typer.Option("delta", "--source", metavar="delta|kafka",
                                    help="Where the input and intermediate streams live: delta (Delta streams) or "
                                         "kafka (Kafka topics on a local Apache Kafka broker, started and stopped "
                                         "by the demo unless 'sparza dev-kafka' runs one)."),
         kafka_bootstrap_servers: str = typer.Option(
             None, "--kafka-bootstrap-servers", metavar="HOST:PORT",
             help="With --source kafka: use these brokers instead of a local one.", show_default=False),
         sessions: bool = typer.Option(False, "--sessions",
                                       help="Also keep each user's editing sessions (a session window in stage 1, "
                                            "upserted into the user_sessions table) and check them."),
         ) -> None:
    """Run the Wikipedia page-statistics pipeline on generated data and summarize what it wrote."""
    if scale not in SCALES:
        raise typer.BadParameter(f"--scale must be one of {', '.join(SCALES)}")
    _importable_examples()
    check_source(source, kafka_bootstrap_servers)
    console = Console(highlight=False, soft_wrap=True)
    console.print("[bold]sparza demo[/bold]: Wikipedia edits → parse" + (" (→ editing sessions per user → table)"
                                                                      if sessions else "")
                  + ", partition_by page → join profiles (broadcast adjunct store) → 1-minute windows (RocksDB) → "
                  "Avro blobs")
    result = run_demo(connection_string=azure_connection_string, master=master,
                      events=events or SCALES[scale], input_file=input_file, seed=seed, partitions=partitions,
                      console=console, lateness_ms=lateness_ms, source=source,
                      kafka_bootstrap_servers=kafka_bootstrap_servers, sessions=sessions)
    _print_summary(result, console, bool(azure_connection_string))
    if not result.verified:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the root command."""
    app.command(name="demo")(demo)
