"""``sparza snapshots show|restore|verify`` and ``sparza gc``: inspect, restore and check state
snapshots (SEP-003) and purge expired blobs from the configured blob store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from sparza.cli._help import SparzaTyper
from sparza.config import Config

if TYPE_CHECKING:
    from sparza.blobstore import BlobStoreManager
    from sparza.state.backup import StateBackup

__all__ = ["app", "register"]

app = SparzaTyper(help="Inspect, restore and verify state snapshots in the blob store (blob.store.*).",
                  no_args_is_help=True)

_CONFIG = typer.Option(None, "--config", "-c", metavar="FILE",
                       help="Job config (YAML or .properties) naming the blob store.")


def _config(path: Path | None) -> Config:
    return Config.load(path)


def _backup(config: Config, progress: bool = False) -> tuple[BlobStoreManager, StateBackup]:
    # Imported here: `sparza --help` should not load RocksDB and the Azure SDK.
    from sparza.blobstore import blob_store_manager_from_config
    from sparza.state.backup import StateBackup

    store = blob_store_manager_from_config(config)
    return store, StateBackup.from_config(store, config, "cli", progress=progress)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


@app.command()
def show(blob_id: str = typer.Argument(..., help="Blob id of a snapshot index."), config: Path | None = _CONFIG,
         as_json: bool = typer.Option(False, "--json", help="Print the index as JSON.")) -> None:
    """Print a snapshot index: whose it is, its files and blobs, what it removed, its predecessor."""
    store, backup = _backup(_config(config))
    try:
        index = backup.read_index(blob_id, get_deleted=True)
    finally:
        backup.close()
        store.close()
    if as_json:
        typer.echo(json.dumps(index.to_json(), indent=2, sort_keys=True))
        return
    m = index.metadata
    typer.echo(f"snapshot {blob_id}")
    typer.echo(f"  job {m.job_name} (id {m.job_id}), task {m.task_name!r}, store {m.store_name!r}, "
               f"checkpoint {m.checkpoint_id}, created {index.creation_time_ms} ms")
    typer.echo(f"  previous index: {index.prev_snapshot_index_blob_id or '-'}")
    typer.echo(f"  {index.dir_index.file_count()} files, {_size(index.dir_index.total_size())}")
    for rel, f in index.dir_index.walk_present():
        typer.echo(f"    {rel:40s} {f.size:>14,d}  crc32 {f.checksum:#010x}  {len(f.blobs)} blob(s)")
    removed = list(index.dir_index.removed_blobs())
    if removed:
        typer.echo(f"  removed since the previous snapshot: {len(removed)} blob(s)")


@app.command()
def restore(blob_id: str = typer.Argument(..., help="Blob id of a snapshot index."),
            directory: Path = typer.Argument(..., help="Directory to restore into (replaced)."),
            config: Path | None = _CONFIG) -> None:
    """Download a snapshot into DIR, verifying every checksum, with a progress bar."""
    store, backup = _backup(_config(config), progress=True)
    try:
        result = backup.restore(blob_id, directory, reupload_deleted=False)
    finally:
        backup.close()
        store.close()
    typer.echo(f"restored {result.files} files ({_size(result.bytes)}) into {directory} "
               f"in {result.seconds:.1f} s")
    if result.recovered:
        typer.echo("warning: the snapshot has deleted blobs (read anyway); they disappear at the next gc",
                   err=True)


@app.command()
def verify(blob_id: str = typer.Argument(..., help="Blob id of a snapshot index."),
           config: Path | None = _CONFIG) -> None:
    """Download every blob of a snapshot and check every file's size and CRC32. Exit 1 on a problem."""
    store, backup = _backup(_config(config))
    try:
        result = backup.verify(blob_id)
    finally:
        backup.close()
        store.close()
    for problem in result.problems:
        typer.echo(f"problem: {problem}", err=True)
    if not result.ok:
        typer.echo(f"snapshot {blob_id}: {len(result.problems)} problem(s)")
        raise typer.Exit(1)
    typer.echo(f"snapshot {blob_id}: ok, {result.files} files, {_size(result.bytes)} verified")


def gc(config: Path | None = _CONFIG,
       dry_run: bool = typer.Option(False, "--dry-run", help="Report what would be removed, remove nothing."),
       prefix: str = typer.Option("", "--prefix", help="Only blobs whose id starts with this."),
       now_ms: int | None = typer.Option(None, "--now-ms", metavar="MS",
                                         help="Pretend the time is this (epoch ms).")) -> None:
    """Purge blobs whose TTL has passed and deleted blobs older than blob.store.deleted.retention.ms."""
    from sparza.blobstore import blob_store_manager_from_config, collect_garbage
    from sparza.blobstore.gc import DELETED_RETENTION_MS

    cfg = _config(config)
    store = blob_store_manager_from_config(cfg)
    try:
        report = collect_garbage(store, now_ms=now_ms, prefix=prefix, dry_run=dry_run,
                                 deleted_retention_ms=DELETED_RETENTION_MS.get(cfg))
    finally:
        store.close()
    verb = "would remove" if dry_run else "removed"
    for blob_id in report.expired:
        typer.echo(f"{verb} expired {blob_id}")
    for blob_id in report.deleted:
        typer.echo(f"{verb} deleted {blob_id}")
    typer.echo(f"gc: {verb} {len(report.expired)} expired and {len(report.deleted)} deleted blob(s), "
               f"{_size(report.bytes_freed)}; kept {report.kept}")


def register(root: typer.Typer) -> None:
    """Add ``snapshots`` and ``gc`` to the root command."""
    root.add_typer(app, name="snapshots")
    root.command("gc")(gc)
