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

Right after the purged-snapshot fault (the first fault of the phase, before any run met it) a savepoint cannot be
taken: the job's committed snapshots are gone. :func:`day_two_operation_after_purge` expects the refusal to say so,
then brings the blobs back, as the refusal tells the operator to, and does the operation again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

__all__ = ["day_two_operation", "day_two_operation_after_purge", "grow_input", "growth_refusal_problem"]


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


def day_two_operation_after_purge(fault: str, config: Mapping[str, str], label: str, purged: Collection[str],
                                  bring_back: Callable[[], None]) -> tuple[str, str | None]:
    """Do ``fault`` (``savepoint-restore`` or ``rewind-in-place``, both of which take a savepoint first) to the stopped
    job of ``config`` whose blobs ``purged`` (ids) the purged-snapshot fault took away, no run having met that since.
    When a committed task checkpoint names a purged snapshot, the savepoint must be refused saying that state is gone
    (:func:`~sparza.testing.harness.damage.names_purged`); ``bring_back()`` then puts the blobs back and the operation
    is done again, under the same savepoint name (a refused one leaves none). Returns a note and a problem (None:
    none found); the blobs are brought back whenever the operation was refused."""
    from sparza.config import Config
    from sparza.errors import SparzaError
    from sparza.ops import stopped_job
    from sparza.state.backup.delta import base_of
    from sparza.testing.harness.damage import names_purged

    with stopped_job(Config.of(config)) as stopped:
        named = sorted({base_of(index) for cp in stopped.checkpoints.read_all().values() if cp.committed
                        for index in cp.stores.values()} & set(purged))
    try:
        note = day_two_operation(fault, config, label)
    except SparzaError as exc:  # refused on purpose: judged by what it says
        error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        problem = None
        if not named:
            problem = (f"{fault}: refused though no committed task checkpoint names a purged snapshot: "
                       f"{type(exc).__name__}: {error}")
        elif not names_purged(error):
            problem = (f"{fault}: refused after committed snapshots were purged without saying that state is gone: "
                       f"{type(exc).__name__}: {error}")
        bring_back()
        return (f"{fault}: refused after the purge ({type(exc).__name__}); the {len(purged)} purged blobs brought "
                "back; " + day_two_operation(fault, config, label)), problem
    if named:
        return note, (f"{fault}: a savepoint was taken of a job whose committed snapshots {', '.join(named[:3])} were "
                      "purged: it must have been refused")
    return note, None


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
