"""``sparza coordinator status --config job.yaml``: leader, processors, heartbeats and the job model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from sparza.cli._help import SparzaTyper

__all__ = ["app", "register"]

app = SparzaTyper(help="Inspect how the processors of a job share its tasks (job.coordinator.factory: azure).",
                  no_args_is_help=True)


@app.command()
def status(config: Path = typer.Option(..., "--config", "-c", metavar="FILE",
                                       help="The job's config file (YAML or .properties)."),
           ) -> None:
    """Show the leader, each processor's last heartbeat, the job-model version, barrier and assignment (for an
    application: its one membership, each task named ``<stage job>/<task>``)."""
    # Imported here, not with the module: every `sparza` command loads this module, and the coordination
    # package brings the Azure SDK with it.
    from rich.console import Console

    from sparza.config import Config
    from sparza.config.shared import APP_CLASS, APP_STAGE
    from sparza.coordination.status import read_status

    cfg = Config.load(config)
    out = Console(highlight=False, width=None if Console().is_terminal else 200)
    _show(out, cfg, read_status(cfg))  # an application's processors are one membership, named after it
    if APP_CLASS.get(cfg) and APP_STAGE.get(cfg) is None:
        from sparza.api import plan_application

        for stage in plan_application(cfg).stages:  # processors run with --stage join that stage's own membership
            st = read_status(stage.config)
            if st.processors or st.state.current is not None:
                out.print(f"stage {stage.name} (sparza run --stage {stage.name}):")
                _show(out, stage.config, st)


def _show(out: Any, cfg: Any, st: Any) -> None:
    from rich.table import Table

    from sparza.config.shared import JOB_ID, JOB_NAME

    state = st.state
    out.print(f"job {JOB_NAME.get(cfg)}-{JOB_ID.get(cfg)}: container {st.container}, "
              f"table {st.table}")
    out.print(f"leader: {st.leader or '(none: lease ' + st.lease_state + ')'}  term {st.term}")
    out.print(f"job model: version {state.version}, barrier {state.barrier.value}"
              + (f" (in force: version {state.effective.version})" if state.effective else " (none in force)"))
    procs = Table("processor", "row version", "last heartbeat (service, UTC)", "age s", "alive", "leader", "tasks")
    model = state.current
    for p in st.processors:
        tasks = ", ".join(model.tasks_of(p.processor_id)) if model else ""
        row = p.partition if not p.partition.isdigit() else str(int(p.partition))
        procs.add_row(p.processor_id, row, p.last_heartbeat.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                      f"{p.age_s:.1f}", "yes" if p.alive else "NO", "yes" if p.is_leader else "",
                      tasks or "-")
    out.print(procs)
    if not st.processors:
        out.print("no processor has heartbeated yet")


def register(root: typer.Typer) -> None:
    """Add ``coordinator`` to the root command."""
    root.add_typer(app, name="coordinator")
