"""``sparza store get|scan|count``: a job's stores as its tasks last committed them (``sparza.storeview``),
read from the blob store or a copy of the local checkpoint; with ``--live``, asked of the running job's processor
(:mod:`sparza.storeview.live`): its tasks' latest commits, or their in-flight state with ``--in-flight``."""

from __future__ import annotations

import json
from typing import Any

import typer

from sparza.cli._help import SparzaTyper

__all__ = ["app", "register"]

app = SparzaTyper(help="Read a job's stores as last committed (decoded with the stores' serdes); a running job is "
                       "not touched.", no_args_is_help=True)

_CONFIG = typer.Option(..., "--config", "-c", metavar="FILE", help="Job config (YAML or .properties).")
_STORE = typer.Argument(..., help="Store name (stores.<name>.*; an application's window and table stores too).")
_TASK = typer.Option(None, "--task", "-t", metavar="TASK", help="Only this task (e.g. 'Partition 3').")
_CHECKPOINT = typer.Option(None, "--checkpoint", metavar="CHECKPOINT",
                           help="The task's committed batch number or a snapshot id "
                                "(sparza checkpoints show); default: the last committed.")
_STAGE = typer.Option(None, "--stage", metavar="STAGE",
                      help="The application stage (when several stages have a store of that name).")
_JSON = typer.Option(False, "--json", help="JSON lines instead of tab-separated text.")
_LIVE = typer.Option(False, "--live", help="Ask the running job's processor (its tasks' latest commits, now).")
_IN_FLIGHT = typer.Option(False, "--in-flight",
                          help="With --live: the tasks' in-flight state (what the next commit would write).")


def _text(value: Any) -> str:
    return json.dumps(_plain(value), sort_keys=True, ensure_ascii=False)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + value.hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def _open(config: str, store: str, stage: str | None) -> tuple[Any, Any]:
    from sparza.storeview import CommittedStores

    stores = CommittedStores(config)
    return stores, stores.store(store, stage=stage)


@app.command()
def get(store: str = _STORE, config: str = _CONFIG,
        key: str = typer.Option(..., "--key", "-k", metavar="KEY", help="The key, as text (JSON for json/avro keys)."),
        task: str | None = _TASK, checkpoint: str | None = _CHECKPOINT, stage: str | None = _STAGE,
        as_json: bool = _JSON, live: bool = _LIVE, in_flight: bool = _IN_FLIGHT) -> None:
    """Print KEY's committed value in every task that holds it; exit 1 when none does."""
    stores, ref = _open(config, store, stage)
    if live:
        from sparza.storeview.live import LiveStores

        found = LiveStores(ref.config).get(store, stores.parse_key(ref, key), task=task, live=in_flight)
    else:
        found = stores.get(ref, stores.parse_key(ref, key), task=task, checkpoint=checkpoint)
    for name, value in found.items():
        typer.echo(json.dumps({"task": name, "key": _plain(stores.parse_key(ref, key)), "value": _plain(value)},
                              sort_keys=True) if as_json else f"{name}\t{_text(value)}")
    if not found:
        typer.echo(f"key {key!r} is in no committed snapshot of store {store!r}"
                   + (f" of task {task!r}" if task else ""), err=True)
        raise typer.Exit(1)


@app.command()
def scan(store: str = _STORE, config: str = _CONFIG,
         prefix: str | None = typer.Option(None, "--prefix", "-p", metavar="PREFIX",
                                           help="Only keys whose text starts with this."),
         key: str | None = typer.Option(None, "--key", "-k", metavar="KEY", help="Only this key."),
         task: str | None = _TASK, checkpoint: str | None = _CHECKPOINT, stage: str | None = _STAGE,
         limit: int | None = typer.Option(None, "--limit", min=1, metavar="N", help="Stop after this many entries."),
         as_json: bool = _JSON) -> None:
    """Print every committed entry (task, key, value), task by task in key order."""
    stores, ref = _open(config, store, stage)
    wanted = stores.parse_key(ref, key) if key is not None else None
    shown = 0
    for name, k, value in stores.scan(ref, task=task, prefix=prefix, checkpoint=checkpoint):
        if key is not None and k != wanted:
            continue
        typer.echo(json.dumps({"task": name, "key": _plain(k), "value": _plain(value)}, sort_keys=True)
                   if as_json else f"{name}\t{_text(k)}\t{_text(value)}")
        shown += 1
        if limit is not None and shown >= limit:
            break


@app.command()
def count(store: str = _STORE, config: str = _CONFIG,
          prefix: str | None = typer.Option(None, "--prefix", "-p", metavar="PREFIX",
                                           help="Only keys whose text starts with this."),
          task: str | None = _TASK, checkpoint: str | None = _CHECKPOINT, stage: str | None = _STAGE,
          as_json: bool = _JSON, live: bool = _LIVE, in_flight: bool = _IN_FLIGHT) -> None:
    """Print the number of committed entries per task and in all."""
    stores, ref = _open(config, store, stage)
    if live:
        from sparza.storeview.live import LiveStores

        counts = LiveStores(ref.config).count(store, task=task, prefix=prefix, live=in_flight)
    else:
        counts = stores.count(ref, task=task, prefix=prefix, checkpoint=checkpoint)
    if as_json:
        typer.echo(json.dumps({"store": store, "job": ref.job_key, "tasks": counts, "total": sum(counts.values())},
                              sort_keys=True))
        return
    for name, n in counts.items():
        typer.echo(f"{name}\t{n}")
    typer.echo(f"total\t{sum(counts.values())}")


def register(root: typer.Typer) -> None:
    """Add ``store`` to the root command."""
    root.add_typer(app, name="store")
