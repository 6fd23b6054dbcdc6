"""The day-two operations the harness does between runs (:data:`~sparza.testing.scenario.DAYOPS_FAULTS`), the
same way for both engines, through :mod:`sparza.ops` on the job's own config (the job is stopped: its claim
released). Each leaves the job exactly where it was, so the oracle's exact output still holds:

``savepoint-restore``  a savepoint is taken and restored over the job itself (every snapshot copied twice, the
                       host affinity dropped: the next run restores every store from the copies)
``rewind-in-place``    a savepoint is taken, then every task that has not ended is rewound to its own offsets
                       with the savepoint's state (``state=savepoint:NAME``, upsert tables kept)
``partition-growth``   the input gets ``Scenario.grow_to`` partitions (in-process: ``TestRunner.grow_input``; on
                       Spark: the input system's admin, as ``sparza stream grow`` does); when the job's
                       ``job.partition.expansion`` stops it, the next run must fail naming the stream and both
                       counts (:func:`growth_refusal_problem`), and the harness then sets ``Scenario.grow_then``
                       as an operator would (each engine does the runs)
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["day_two_operation", "grow_input", "growth_refusal_problem"]


def day_two_operation(fault: str, config: Mapping[str, str], label: str) -> str:
    """Do ``fault`` (one of :data:`~sparza.testing.scenario.DAYOPS_FAULTS`) to the stopped job of ``config``;
    returns a note saying what was done."""
    from sparza.config import Config
    from sparza.ops import RewindTarget, apply_rewind, create_savepoint, plan_rewind, restore_savepoint, stopped_job

    cfg = Config.of(config)
    name = f"harness-{label}"
    savepoint = create_savepoint(cfg, name)
    if fault == "savepoint-restore":
        done = restore_savepoint(cfg, name, force=True)
        assert done is not None  # force: never skipped
        return (f"savepoint-restore: savepoint {name} of {len(savepoint.tasks)} task(s), "
                f"{savepoint.snapshot_count()} snapshot(s), restored over the job")
    if fault != "rewind-in-place":
        raise ValueError(f"unknown day-two fault {fault!r}")
    with stopped_job(cfg) as stopped:
        checkpoints = stopped.checkpoints.read_all()
        tasks = sorted(t for t, cp in checkpoints.items() if cp.committed and not cp.ended)
        if not tasks:
            return f"rewind-in-place: every task ended; savepoint {name} taken, nothing rewound"
        offsets = {ssp: offset for t in tasks for ssp, offset in checkpoints[t].offsets.items()}
        plan = plan_rewind(stopped, RewindTarget("offsets", offsets=offsets), tasks=tasks, state=f"savepoint:{name}",
                           tables="keep")
        apply_rewind(stopped, plan)
    return f"rewind-in-place: {len(tasks)} task(s) rewound to their own offsets with savepoint {name}'s state"


def grow_input(config: Mapping[str, str], stream: str, partitions: int) -> int:
    """Give the input ``system.stream`` of the job of ``config`` ``partitions`` partitions in all, through its system's
    admin (what ``sparza stream grow`` calls: Kafka's CreatePartitions, a Delta stream's partition count); returns
    how many it had."""
    from sparza.config import Config
    from sparza.systems import SupportsPartitionGrowth, get_system_factory

    cfg = Config.of(config)
    system, name = stream.split(".", 1)
    admin = get_system_factory(cfg, system).get_admin(system, cfg)
    if not isinstance(admin, SupportsPartitionGrowth):
        raise TypeError(f"system {system} cannot give its streams more partitions")
    return admin.grow_stream(name, partitions)


def growth_refusal_problem(error: str | None, stream: str, before: int, after: int) -> str | None:
    """What is wrong with the run after a growth that ``job.partition.expansion`` stops at (``error``: its error, or
    None when it finished): it must fail naming the stream, both counts and the choices. None when it did."""
    if error is None:
        return (f"partition-growth: {stream} grew from {before} to {after} partitions and job.partition.expansion "
                "stops the job, yet the run after it finished (the job read on)")
    missing = [text for text in (f"{stream}: {before} -> {after} partitions", "job.partition.expansion: group")
               if text not in error]
    if missing:
        return (f"partition-growth: the run after {stream} grew from {before} to {after} partitions failed without "
                f"saying {' or '.join(repr(m) for m in missing)}: {error}")
    return None
