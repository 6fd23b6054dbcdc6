"""``sparza rewind`` and ``sparza savepoint create|list|delete``: day-two operations on a stopped job
(:mod:`sparza.ops`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import typer

from sparza.cli._help import SparzaTyper
from sparza.config import Config

__all__ = ["register"]

savepoint_app = SparzaTyper(help="Take, list and delete savepoints: named copies of a stopped job's task checkpoints "
                                 "and state (start a job from one with sparza run --from-savepoint).",
                            no_args_is_help=True)

_CONFIG = typer.Option(..., "--config", "-c", metavar="FILE", help="Job config (YAML or .properties).")


def _load(path: str) -> Config:
    from sparza.config.samza import translate

    translation = translate(Config.load(path))
    translation.raise_first_error()
    return translation.config


def rewind(config: str = _CONFIG,
           to_time: str = typer.Option(None, "--to-time", metavar="TIME",
                                       help="The first offset at or after this event time, per partition: epoch ms, "
                                            "ISO-8601 (naive = UTC) or a duration before now (-1h, -90m)."),
           to_oldest: bool = typer.Option(False, "--to-oldest", help="Each partition's oldest offset."),
           to_newest: bool = typer.Option(False, "--to-newest",
                                          help="Each partition's upcoming offset (skip what is there now)."),
           to_file: Path = typer.Option(None, "--to-file", metavar="FILE",
                                        help="Offsets from a JSON file: {ssp: offset}, or what "
                                             "sparza checkpoints show --json prints."),
           task: list[str] = typer.Option([], "--task", metavar="TASK", help="Rewind only this task (repeatable)."),
           state: str = typer.Option("keep", "--state", metavar="STATE",
                                     help="The tasks' stores: keep (as committed), reset (empty), or "
                                          "savepoint:NAME (that savepoint's)."),
           tables: str = typer.Option("auto", "--tables", metavar="auto|reset|keep",
                                      help="Upsert tables: auto empties them when every task's state is reset."),
           dry_run: bool = typer.Option(False, "--dry-run", help="Print what would change; change nothing.")) -> None:
    """Rewind a stopped job's inputs (Kafka Streams' reset tool, Samza's checkpoint tool): set every task's (or
    --task's) input offsets to a time, the oldest or newest offsets, or offsets from a file, and choose its state.
    The rewind is recorded (who, when, from what to what) and shown by sparza checkpoints show. Refused while the
    job runs."""
    from sparza.ops import RewindTarget, apply_rewind, parse_time, plan_rewind, read_offsets_file, stopped_job

    chosen = [flag for flag, on in (("--to-time", to_time is not None), ("--to-oldest", to_oldest),
                                    ("--to-newest", to_newest), ("--to-file", to_file is not None)) if on]
    if len(chosen) != 1:
        raise typer.BadParameter("give exactly one of --to-time, --to-oldest, --to-newest, --to-file",
                                 param_hint="target")
    if to_time is not None:
        try:
            target = RewindTarget.at_time(parse_time(to_time))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--to-time") from None
    elif to_file is not None:
        target = RewindTarget("offsets", offsets=read_offsets_file(to_file))
    else:
        target = RewindTarget("oldest" if to_oldest else "newest")
    with stopped_job(_load(config)) as stopped:
        plan = plan_rewind(stopped, target, tasks=task or None, state=state, tables=tables)
        for line in plan.describe():
            typer.echo(line)
        if dry_run:
            typer.echo("dry run: nothing changed")
            return
        done = apply_rewind(stopped, plan)
    for note in done.notes:
        typer.echo(f"  {note}")
    typer.echo(f"rewound {len(done.tasks)} task(s) (operation {done.id}, by {done.by}); the next sparza run reads "
               "from there")


@savepoint_app.command("create")
def create(name: str = typer.Argument(..., help="The savepoint's name (letters, digits, . _ -)."),
           config: str = _CONFIG,
           stop: bool = typer.Option(False, "--stop",
                                     help="Stop the running job first (SIGTERM to its processor on this host: it "
                                          "commits its batch and exits), then take the savepoint."),
           drain: bool = typer.Option(False, "--drain", help="With --stop: drain the job instead (sparza drain)."),
           timeout: float = typer.Option(600.0, "--timeout", metavar="S",
                                         help="With --stop: how long to wait for the job to stop.")) -> None:
    """Take a savepoint of a stopped job: a consistent, self-contained copy of every task checkpoint and store
    snapshot in the blob store, kept (and kept by sparza gc) until deleted. With --stop (and --drain) this is
    the upgrade path: stop v1 with a savepoint, start v2 with sparza run --from-savepoint NAME."""
    from sparza.ops import create_savepoint

    cfg = _load(config)
    if drain and not stop:
        raise typer.BadParameter("--drain goes with --stop", param_hint="--drain")
    if stop:
        _stop_job(cfg, drain=drain, timeout_s=timeout)
    savepoint = create_savepoint(cfg, name)
    typer.echo(f"savepoint {name} of {savepoint.job_key}: {len(savepoint.tasks)} task(s), "
               f"{savepoint.snapshot_count()} store snapshot(s) copied; start from it with "
               f"sparza run --config FILE --from-savepoint {name}")


def _stop_job(cfg: Config, *, drain: bool, timeout_s: float) -> None:
    """Stop the job's processor (drain, or SIGTERM when it runs on this host) and wait until its claim is free."""
    from sparza.engine.checkpoint import SupportsJobClaim, checkpoint_store_from_config
    from sparza.engine.jobconfig import JobConfig

    job = JobConfig.from_config(cfg, require_inputs=False)
    store = checkpoint_store_from_config(job.config, job.job_key)
    if not isinstance(store, SupportsJobClaim):
        raise typer.BadParameter("the job's checkpoint store keeps no claim: stop the job yourself")
    backend = store.claim_backend()
    state = backend.read()
    if state is None or state.record.released:
        typer.echo(f"{job.job_key} is not running")
        return
    record = state.record
    if drain:
        from sparza.runtime.driver.drainmonitor import request_drain

        request, _ = request_drain([job.config])
        typer.echo(f"drain {request.id} of {job.job_key} requested; waiting for the job to drain and exit")
    elif record.host == socket.gethostname():
        try:
            os.kill(record.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        typer.echo(f"sent SIGTERM to {record.describe()}; waiting for it to commit and exit")
    else:
        typer.echo(f"error: {job.job_key} runs in {record.describe()}, not on this host: stop it there (SIGTERM), "
                   "or use --drain", err=True)
        raise typer.Exit(1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = backend.read()
        if current is None or current.record.released or current.record.token != record.token:
            return
        time.sleep(0.5)
    typer.echo(f"error: {job.job_key} did not stop within {timeout_s:.0f} s", err=True)
    raise typer.Exit(1)


@savepoint_app.command("list")
def list_(config: str = _CONFIG, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the savepoints in the job's blob store (of every job that shares it)."""
    from sparza.blobstore import blob_store_manager_from_config
    from sparza.ops import list_savepoints
    from sparza.ops.savepoints import describe

    store = blob_store_manager_from_config(_load(config))
    try:
        rows = [describe(s) for s in list_savepoints(store)]
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no savepoints")
    for row in rows:
        typer.echo(f"{row['name']}  job {row['job']}  created {row['created']} by {row['created_by']}  "
                   f"{row['tasks']} task(s), {row['snapshots']} snapshot(s), batch {row['batches']}")


@savepoint_app.command("delete")
def delete(name: str = typer.Argument(..., help="The savepoint to delete."), config: str = _CONFIG) -> None:
    """Delete a savepoint (its blobs are tombstoned; sparza gc purges them after blob.store.deleted.retention.ms)."""
    from sparza.blobstore import blob_store_manager_from_config
    from sparza.ops import delete_savepoint

    store = blob_store_manager_from_config(_load(config))
    try:
        savepoint = delete_savepoint(store, name)
    finally:
        store.close()
    typer.echo(f"deleted savepoint {name} of {savepoint.job_key} ({savepoint.snapshot_count()} snapshot(s))")


def register(root: typer.Typer) -> None:
    """Add ``rewind`` and ``savepoint`` to the root command."""
    root.command("rewind")(rewind)
    root.add_typer(savepoint_app, name="savepoint")
