"""``sparza run`` (run a job or application on Spark), ``sparza drain`` and ``sparza checkpoints show``."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import typer

from sparza.cli._help import SparzaTyper

__all__ = ["register"]

EXIT_CLAIMED = 3
"""``sparza run`` exit code: another standalone processor holds the job (see ``sparza.coordination.jobclaim``)."""

checkpoints_app = SparzaTyper(help="Inspect task checkpoints.", no_args_is_help=True)


def _load(config_path: str) -> Config:
    from sparza.config import Config
    from sparza.config.samza import translate

    # Samza's spellings (e.g. task.checkpoint.factory class names) name the same checkpoints as sparza's.
    translation = translate(Config.load(config_path))
    translation.raise_first_error()
    return translation.config


def run(config: str = typer.Option(..., "--config", "-c", metavar="FILE", help="Job config (YAML or .properties)."),
        master: str = typer.Option(None, "--master", metavar="URL",
                                   help="Spark master URL (default: spark.master or local[*])."),
        processor_id: str = typer.Option(None, "--processor-id", metavar="ID",
                                         help="This processor's id (default: processor.id or 0); names its Spark "
                                              "checkpoint dir, so keep it stable across restarts."),
        once: bool = typer.Option(False, "--once", help="Process what is available now, commit and exit."),
        drain: bool = typer.Option(False, "--drain",
                                   help="Drain: process what is available now, fire every open window and session, "
                                        "send the drain downstream, commit and exit (the next run continues)."),
        stage: str = typer.Option(None, "--stage", help="app.class jobs: run only this stage."),
        remote: str = typer.Option(None, "--remote", metavar="URL",
                                   help="Spark Connect URL sc://host:port (default: spark.remote); excludes --master."),
        py_files: str = typer.Option(None, "--py-files", metavar="ZIPS",
                                     help="Comma list of zips (sparza package) executors import the job's code "
                                          "from (default: job.py.files)."),
        from_savepoint: str = typer.Option(None, "--from-savepoint", metavar="NAME",
                                           help="Start from this savepoint (sparza savepoint create): its offsets "
                                                "and state; given again at a restart, the job continues instead."),
        savepoint_config: str = typer.Option(None, "--savepoint-config", metavar="FILE",
                                             help="A config whose blob store holds the savepoint (default: the "
                                                  "job's own).")) -> None:
    """Run a job until stopped, or until every bounded input ended; with --once, until caught up; with --drain (or after
    sparza drain), until drained.

    Ctrl-C (SIGINT) and SIGTERM, to the process or its whole process group, finish the running batch,
    commit and exit 0; a second Ctrl-C stops at once without committing that batch (it runs again at
    the next start) and exits 130. Exit codes: 0 clean stop, 1 job failed, 2 bad config, 3 another
    processor holds the job (standalone: refused, or claim lost while running), 130 forced stop."""
    from sparza.config import Config
    from sparza.coordination.jobclaim import ClaimError
    from sparza.runtime.driver.app import run_config

    cfg = Config.load(config)  # untranslated: run_config checks it and warns about Samza's spellings itself
    if py_files:
        cfg = cfg.with_overrides({"job.py.files": py_files})
    from sparza.engine.jobconfig import PROCESSOR_ID

    pid = processor_id or PROCESSOR_ID.get(cfg)
    if from_savepoint:
        _start_from_savepoint(config, from_savepoint, savepoint_config)
    try:
        outcome = run_config(cfg, master=master, remote=remote, processor_id=pid,  # type: ignore[arg-type]
                             once=once, stage=stage, drain=drain)
    except ClaimError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_CLAIMED) from None
    raise typer.Exit(outcome.exit_code)


def _start_from_savepoint(config: str, name: str, source: str | None) -> None:
    """Write the job's task checkpoints from savepoint ``name`` (unless the job already started from it)."""
    from sparza.ops import restore_savepoint

    done = restore_savepoint(_load(config), name, source=_load(source) if source else None)  # type: ignore[arg-type]
    if done is None:
        typer.echo(f"sparza: the job started from savepoint {name} before: continuing from its own checkpoints",
                   err=True)
        return
    typer.echo(f"sparza: started {len(done.tasks)} task(s) from savepoint {name} (operation {done.id})", err=True)
    for note in done.notes:
        typer.echo(f"sparza:   {note}", err=True)


def drain(config: str = typer.Option(..., "--config", "-c", metavar="FILE", help="Job config (YAML or .properties)."),
          cancel: bool = typer.Option(False, "--cancel", help="Withdraw the pending drain request instead.")) -> None:
    """Ask a running job to drain (Samza's drain): every task processes its input up to the offsets observed now,
    fires every open window and session, sends its drain downstream and commits, then the job exits 0. The job
    polls for the request every job.drain-monitor.poll.interval.ms; a job started later drains at its start.
    An application drains as a whole (every stage). Exits 1 when --cancel finds no request."""
    from sparza.engine.drain import clear_drain, drain_scope
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime.driver.drainmonitor import request_drain
    from sparza.runtime.driver.preflight import check_storage

    cfg = _load(config)
    job = JobConfig.from_config(cfg, require_inputs=False)  # type: ignore[arg-type]
    configs = [cfg]
    from sparza.config.shared import APP_STAGE

    if job.app_class is not None and APP_STAGE.get(cfg) is None:
        from sparza.api import plan_application

        configs = [stage.config for stage in plan_application(cfg).stages]  # type: ignore[arg-type]
    for stage_cfg in configs:
        check_storage(stage_cfg, blob_store=False, local=False)  # type: ignore[arg-type]
    scope = drain_scope(configs[0])  # type: ignore[arg-type]
    if cancel:
        if not clear_drain(configs[0]):  # type: ignore[arg-type]
            typer.echo(f"no pending drain request for {scope}", err=True)
            raise typer.Exit(1)
        typer.echo(f"withdrew the drain request of {scope} (tasks that drained already stay drained)")
        return
    request, new = request_drain(configs)  # type: ignore[arg-type]
    from sparza.engine.drain import DRAIN_MONITOR_ENABLED

    if not DRAIN_MONITOR_ENABLED.get(cfg):
        typer.echo("warning: job.drain-monitor.enabled is false: a running job does not read the request; it "
                   "drains when started with sparza run --drain", err=True)
    typer.echo(f"drain {request.id} of {scope}: {'requested' if new else 'already pending'}; it ends "
               f"{len(request.ends)} source partition(s) of {', '.join(request.jobs)} at the offsets observed then")
    typer.echo("a running job drains within job.drain-monitor.poll.interval.ms and exits 0 ('drained'); one not "
               "running drains when it starts")


def _lags(cfg: object, offsets: dict[str, str]) -> dict[str, str]:
    """Per checkpointed SSP: how many messages lie between its offset and the stream's end now
    (``?`` when the system cannot count or cannot be reached). Kafka counts offsets: an upper bound."""
    from sparza.engine.offsets import OffsetOps
    from sparza.streams import SystemStreamPartition
    from sparza.systems import get_system_factory

    by_stream: dict[tuple[str, str], list[SystemStreamPartition]] = {}
    for key in offsets:
        try:
            ssp = SystemStreamPartition.parse(key)
        except ValueError:
            continue
        by_stream.setdefault((ssp.system, ssp.stream), []).append(ssp)
    out: dict[str, str] = {}
    for (system, stream), ssps in by_stream.items():
        try:
            admin = get_system_factory(cfg, system).get_admin(system, cfg)  # type: ignore[arg-type]
            meta = admin.get_system_stream_metadata({stream})[stream]
            ops = OffsetOps(admin)
            for ssp in ssps:
                n = ops.count_between(ssp, offsets[str(ssp)], meta.partitions[ssp.partition].upcoming)
                out[str(ssp)] = "?" if n is None else str(n)
        except Exception:
            out.update({str(ssp): "?" for ssp in ssps})  # an unreachable system: show the offsets anyway
    return out


_OFFSET_FORMS = {
    "delta": "{s}: <Delta table version>:<row>, the next message to read is that row of the partition's rows "
             "written in that version (3:0 = the first row of version 3, so versions 0-2 are done)",
    "kafka": "{s}: the Kafka offset of the next message to read",
    "eventhubs": "{s}: the Kafka offset of the next message to read (Event Hubs' Kafka endpoint)",
    "inmemory": "{s}: the index of the next message to read",
}


if TYPE_CHECKING:
    from sparza.config import Config
    from sparza.engine.checkpoint import TaskCheckpoint


def _offsets_caption(cfg: object, checkpoints: Mapping[str, TaskCheckpoint]) -> str:
    """What the offsets in the table mean: each is where its task reads next, in its system's own form."""
    systems = sorted({key.split(".", 1)[0] for cp in checkpoints.values() for key in cp.offsets})
    forms = []
    for system in systems:
        factory = str(cfg.get(f"systems.{system}.samza.factory", "") or "").strip().lower()  # type: ignore[attr-defined]
        kind = next((k for k in _OFFSET_FORMS if k in factory), None)
        if kind is not None:
            forms.append(_OFFSET_FORMS[kind].format(s=system))
    return ("offsets: where each task reads next, per input partition (system.stream#partition); "
            + "; ".join(forms) + ". lag: how many messages lie after it now.") if forms else ""


@checkpoints_app.command("show")
def show(config: str = typer.Option(..., "--config", "-c", metavar="FILE", help="Job config (YAML or .properties)."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
         lag: bool = typer.Option(True, "--lag/--no-lag", help="Also show each input's lag (asks the systems)."),
         history: bool = typer.Option(False, "--history",
                                      help="Print every rewind and savepoint restore of the job (with --json: as "
                                           "JSON) instead of the checkpoints.")
         ) -> None:
    """Print every task's checkpoint: batch, generation, offsets (with lag), store snapshots, and the newest
    rewinds and savepoint restores (who, when, from what to what)."""
    from rich.console import Console
    from rich.table import Table

    from sparza.engine.checkpoint import checkpoint_store_from_config
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime.driver.preflight import check_storage

    cfg = _load(config)
    job = JobConfig.from_config(cfg, require_inputs=False)  # type: ignore[arg-type]
    configs = [cfg]
    from sparza.config.shared import APP_STAGE

    if job.app_class is not None and APP_STAGE.get(cfg) is None:
        from sparza.api import plan_application

        configs = [stage.config for stage in plan_application(cfg).stages]  # type: ignore[arg-type]
    everything: dict[str, dict[str, object]] = {}
    console = Console(file=sys.stdout, width=200)
    for stage_cfg in configs:
        stage_job = JobConfig.from_config(stage_cfg, require_inputs=False)  # type: ignore[arg-type]
        check_storage(stage_cfg, blob_store=False, local=False)  # type: ignore[arg-type]
        store = checkpoint_store_from_config(stage_cfg, stage_job.job_key)  # type: ignore[arg-type]
        if history:
            _print_history(store, as_json=as_json)
            return
        checkpoints = store.read_all()
        if as_json:
            everything[stage_job.job_key] = {t: json.loads(cp.to_json()) for t, cp in sorted(checkpoints.items())}
            continue
        if not checkpoints:
            typer.echo(f"no task checkpoints for job {stage_job.job_key} at {store.describe()}")
            continue
        table = Table(title=f"task checkpoints of {stage_job.job_key} ({store.describe()})",
                      caption=_offsets_caption(stage_cfg, checkpoints), caption_justify="left")
        for column in ("task", "batch", "generation", "offsets", "stores", "ended", "uncommitted flush"):
            table.add_column(column)
        for name in sorted(checkpoints, key=lambda n: (len(n), n)):
            cp = checkpoints[name]
            intent = cp.open_intent()
            lags = _lags(stage_cfg, cp.offsets) if lag else {}
            table.add_row(name, str(cp.batch) if cp.committed else "-", str(cp.generation),
                          "\n".join(f"{k} {v}" + (f" (lag {lags[k]})" if k in lags else "")
                                    for k, v in sorted(cp.offsets.items())),
                          "\n".join(f"{k} {v}" for k, v in sorted(cp.stores.items())), "yes" if cp.ended else "no",
                          "" if intent is None else f"batch {intent.batch} up to "
                          + ", ".join(f"{k} {v}" for k, v in sorted(intent.ends.items())))
        console.print(table)
        _print_partitions(store)
        _print_history(store, as_json=False, newest=5)
    if as_json:
        typer.echo(json.dumps(everything if len(configs) > 1 else next(iter(everything.values()), {}), indent=2))


def _print_partitions(store: object) -> None:
    """The job's record of its inputs' partition counts (:mod:`sparza.engine.partitions`): how tasks are grouped."""
    import datetime as dt

    from sparza.engine.partitions import read_record

    record = read_record(store)
    if record is None:
        return
    parts = []
    for stream, count in sorted(record.counts.items()):
        grouped, first = record.grouped.get(stream, count), record.first.get(stream, count)
        line = f"{stream} {count}"
        if grouped < count:
            line += f" (partition p >= {grouped} read by the task of p % {grouped}: SEP-5)"
        if first != count:
            line += f", first read with {first}"
        parts.append(line)
    typer.echo("input partitions: " + "; ".join(parts))
    for change in record.history[-5:]:
        at = dt.datetime.fromtimestamp(int(change.get("at_ms", 0)) / 1000, tz=dt.UTC).isoformat(timespec="seconds")
        typer.echo(f"  {at} {change.get('stream')}: {change.get('from')} -> {change.get('to')} partitions "
                   f"(job.partition.expansion: {change.get('policy')})")


def _print_history(store: object, *, as_json: bool, newest: int | None = None) -> None:
    """The job's operations journal (:mod:`sparza.ops.journal`): all, or the ``newest`` few under the table."""
    import datetime as dt

    from sparza.ops.journal import read_journal

    operations = read_journal(store)  # type: ignore[arg-type]
    if as_json:
        typer.echo(json.dumps([op.to_json() for op in operations], indent=2))
        return
    if newest is not None:
        if not operations:
            return
        if len(operations) > newest:
            typer.echo(f"operations ({len(operations) - newest} older ones: --history):")
        operations = operations[-newest:]
    elif not operations:
        typer.echo("no rewinds or savepoint restores recorded")
    for op in operations:
        when = dt.datetime.fromtimestamp(op.at_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        typer.echo(f"{when} {op.kind} to {op.target} by {op.by} (operation {op.id}), {len(op.tasks)} task(s)")
        for task, change in sorted(op.tasks.items()):
            moved = [f"{s} {change.offsets_from.get(s, '-')} -> {o}" for s, o in sorted(change.offsets_to.items())
                     if change.offsets_from.get(s) != o]
            typer.echo(f"  {task}: state {change.state}; " + ("; ".join(moved) if moved else "offsets unchanged"))
        for note in op.notes:
            typer.echo(f"  {note}")


@checkpoints_app.command("drop-intent")
def drop_intent(config: str = typer.Option(..., "--config", "-c", metavar="FILE",
                                           help="Job config (YAML or .properties)."),
                task: str = typer.Option(..., "--task", help="The task whose uncommitted flush to forget."),
                stage: str = typer.Option(None, "--stage", help="app.class jobs: the stage of the task.")) -> None:
    """Forget a task's uncommitted flush (its intent) so the task can run again after its inputs changed.

    The outputs that flush wrote stay, and the task processes that range again: those outputs may be
    repeated. Stop the job first. Exits 1 when the task has no open intent.
    """
    import dataclasses

    from sparza.engine.checkpoint import checkpoint_store_from_config
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime.driver.preflight import check_storage

    cfg = _load(config)
    job = JobConfig.from_config(cfg, require_inputs=False)  # type: ignore[arg-type]
    if job.app_class is not None and stage is not None:
        from sparza.api import plan_application

        matches = [s.config for s in plan_application(cfg).stages if s.name == stage]  # type: ignore[arg-type]
        if not matches:
            raise typer.BadParameter(f"no stage {stage!r} in {job.app_class}", param_hint="--stage")
        cfg = matches[0]
        job = JobConfig.from_config(cfg, require_inputs=False)  # type: ignore[arg-type]
    check_storage(cfg, blob_store=False, local=False)  # type: ignore[arg-type]
    store = checkpoint_store_from_config(cfg, job.job_key)  # type: ignore[arg-type]
    current = store.read(task)
    intent = current.checkpoint.open_intent() if current is not None else None
    if current is None or intent is None:
        typer.echo(f"task {task!r} of {job.job_key} has no uncommitted flush at {store.describe()}", err=True)
        raise typer.Exit(1)
    store.write(dataclasses.replace(current.checkpoint, pending=None), current.etag)
    typer.echo(f"dropped the intent of task {task!r} (batch {intent.batch}, offsets {intent.starts} to "
               f"{intent.ends}); its next run processes that range again, and outputs already written may repeat")


def package(config: str = typer.Option(None, "--config", "-c", metavar="FILE",
                                       help="Job config: its task.class / app.class modules are packaged."),
            output: str = typer.Option("dist/sparza-job.zip", "--output", "-o", metavar="FILE",
                                       help="The zip to write."),
            module: list[str] = typer.Option([], "--module", "-m", metavar="MODULE",
                                             help="Another top-level module or package to include (repeatable).")
            ) -> None:
    """Write a zip of sparza and the job's modules for executors that do not have them (job.py.files,
    --py-files, spark-submit --py-files, spark.addArtifacts), and the requirements file to install there."""
    from sparza.config import Config
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime.driver.packaging import build_package, job_modules

    modules = list(module)
    if config:
        cfg = Config.load(config)
        modules = job_modules(JobConfig.from_config(cfg, require_inputs=False).config) + modules
    built = build_package(output, modules)
    typer.echo(f"wrote {built.path} ({built.files} files: {', '.join(built.modules)}) and {built.requirements}")
    typer.echo(f"use it with: job.py.files: {built.path} (or sparza run --py-files {built.path}); executors need "
               f"Python {'.'.join(map(str, sys.version_info[:2]))} and: pip install -r {built.requirements}")


def register(app: typer.Typer) -> None:
    """Add ``run``, ``drain``, ``package`` and ``checkpoints`` to the root command."""
    app.command("run")(run)
    app.command("drain")(drain)
    app.command("package")(package)
    app.add_typer(checkpoints_app, name="checkpoints")
