"""Command line of the fault harness: one seed on either engine, or a soak (see :mod:`sparza.testing.harness`)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from sparza.testing.harness.outcome import ENGINES
from sparza.testing.scenario import (
    DAYOPS_FAULTS,
    ENGINE_FAULTS,
    EXTRA_FAULTS,
    FAULTS,
    INPUTS,
    OUTPUTS,
    TASK_APIS,
    generate,
    scale_scenario,
)

__all__ = ["main", "parse_seeds"]


def parse_seeds(text: str) -> list[int]:
    """``"1,5,9"`` or ``"1-1000"`` (inclusive) or both mixed: the seeds, in order."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        first, sep, last = part.partition("-")
        seeds.extend(range(int(first), int(last) + 1) if sep else [int(first)])
    return seeds


def _scratch(in_memory: bool) -> Path:
    """A fresh work dir: on tmpfs (``/dev/shm``) for in-process scenarios when there is one (their state is
    thrown away, and the fsyncs of task checkpoints and stores on a disk shared with other work would take
    most of their time), else in the temp dir."""
    shm = Path("/dev/shm")
    if in_memory and shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="sparza-harness-", dir=shm))
    return Path(tempfile.mkdtemp(prefix="sparza-harness-"))


def main(argv: list[str] | None = None) -> int:
    """Command line: one seed, or a soak."""
    from sparza.testing import harness

    parser = argparse.ArgumentParser(prog="python -m sparza.testing.harness", description=harness.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=(*ENGINES, "both"), default=None,
                        help="where scenarios run: inprocess (TestRunner, no Spark), spark (sparza run) or both; "
                             "default spark for --seed, both for --soak")
    parser.add_argument("--seed", type=int, help="run this scenario")
    parser.add_argument("--messages", type=int, help="override the scenario's message count")
    parser.add_argument("--fault", choices=FAULTS + EXTRA_FAULTS + ENGINE_FAULTS + DAYOPS_FAULTS,
                        help="override the scenario's fault")
    parser.add_argument("--extras", choices=("drawn", "none"), default="drawn",
                        help="none: leave out the dimensions added after the first soaks (Kafka/Delta intermediate "
                             "streams, Delta on az://, several processors, purged snapshots, a Kafka broker "
                             "restart, a second fault): the scenario as generated before them")
    parser.add_argument("--drain", choices=("drawn", "none"), default="drawn",
                        help="none: leave out the drain dimension (scenario.DRAIN_SALT): a seed as recorded before it")
    parser.add_argument("--execution", choices=("drawn", "none"), default="drawn",
                        help="none: leave out the execution mode and container faults (scenario.EXECUTION_SALT): "
                             "a seed as recorded before them, in the default mode")
    parser.add_argument("--output", choices=OUTPUTS, help="override the scenario's output kind")
    parser.add_argument("--input", choices=INPUTS, help="override the scenario's input kind")
    parser.add_argument("--task-api", choices=TASK_APIS, help="override a task job's API (process or process_batch)")
    parser.add_argument("--soak", type=float, metavar="MINUTES", help="run random seeds for this long")
    parser.add_argument("--inprocess-minutes", type=float, metavar="MINUTES",
                        help="with --soak --engine both: the in-process share (default a third)")
    parser.add_argument("--seeds", help="with --soak: run these seeds (in order) instead: 1,5,9 or 1-1000")
    parser.add_argument("--scale", action="store_true", help="run the scale scenario (100k messages) instead")
    parser.add_argument("--print", action="store_true", help="only describe the scenario")
    parser.add_argument("--workdir", help="where runs keep their files (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the files of passing scenarios too")
    parser.add_argument("--verbose", action="store_true", help="print every in-process scenario, not only failures")
    args = parser.parse_args(argv)
    base = Path(args.workdir) if args.workdir else _scratch(args.engine == "inprocess")
    if args.soak is not None:
        from sparza.testing.harness.soaks import soak

        listed = parse_seeds(args.seeds) if args.seeds else None
        results = soak(args.soak, base, engine=args.engine or "both", inprocess_minutes=args.inprocess_minutes,
                       seeds=listed, keep=args.keep, verbose=args.verbose, out=lambda line: print(line, flush=True))
        return 0 if not any(r.failed for r in results) else 1
    if args.scale:
        scenario = scale_scenario(**({"messages": args.messages} if args.messages else {}))
    elif args.seed is None:
        parser.error("give --seed N, --scale or --soak MINUTES")
    else:
        try:
            scenario = generate(args.seed, messages=args.messages, fault=args.fault, output=args.output,
                                input=args.input, task_api=args.task_api, extras=args.extras == "drawn",
                                drain=args.drain == "drawn", execution=args.execution == "drawn")
        except ValueError as exc:
            parser.error(str(exc))
    print(scenario.describe(), flush=True)
    if args.print:
        return 0
    overrides = {"messages_override": args.messages, "fault_override": args.fault, "output_override": args.output,
                 "input_override": args.input, "task_api_override": args.task_api, "extras": args.extras == "drawn",
                 "drain": args.drain == "drawn", "execution": args.execution == "drawn"}
    engines = ENGINES if args.engine == "both" else (args.engine or "spark",)
    ok = True
    for engine in engines:
        if engine == "inprocess":
            from sparza.testing.harness.inprocess import run_inprocess_scenario

            outcome = run_inprocess_scenario(scenario, base / f"inprocess-{scenario.seed}", keep=True, **overrides)
        else:
            from sparza.testing.harness.spark import run_spark_scenario, start_azurite

            azurite = start_azurite(base)
            try:
                outcome = run_spark_scenario(scenario, azurite, base / f"seed-{scenario.seed}", **overrides)
            finally:
                azurite.stop()
        print(outcome.report())
        ok = ok and outcome.ok
    print(f"files: {base}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
