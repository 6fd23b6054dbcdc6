"""Run every benchmark and regenerate docs/benchmarks.md (figures, baselines, machine, commands, plots).

``--scale full`` records into ``docs/`` (the committed results); ``--scale small`` is the smoke
run and records into a temp dir unless ``--record`` is given, so it never overwrites full results.
``--check`` only makes sure every benchmark script imports and takes ``--scale`` (seconds; CI).

Usage: ``python bench/run_all.py [--scale small|full] [--only NAME ...] [--record] [--check]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["streams", "azureblob", "state_backup", "coordination", "runtime", "control", "adjunct", "tables",
              "kafka", "connect", "pipeline", "latency", "kafka_latency", "affinity", "failover",
              "coordinator_scale", "peers", "plots"]
"""Every benchmark, in run order; ``plots`` last (it measures with the others' helpers)."""


def script_of(name: str) -> Path:
    """A benchmark's script: ``bench/NAME.py``, or ``bench/NAME/run.py`` for one with programs of its own."""
    single = HERE / f"{name}.py"
    return single if single.exists() else HERE / name / "run.py"


def check(names: list[str]) -> list[str]:
    """Names of benchmarks whose script is missing, fails to import, or has no ``--scale`` option."""
    bad = []
    for name in names:
        script = script_of(name)
        if not script.exists():
            print(f"== {name}: missing", flush=True)
            bad.append(name)
            continue
        result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                                timeout=120, check=False)
        ok = result.returncode == 0 and "--scale" in result.stdout
        print(f"== {name}: {'ok' if ok else 'FAILED: ' + (result.stderr.strip().splitlines() or ['?'])[-1]}",
              flush=True)
        if not ok:
            bad.append(name)
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    parser.add_argument("--record", action="store_true", help="write small-scale results into docs/ too")
    parser.add_argument("--only", nargs="*", choices=BENCHMARKS, help="run only these benchmarks")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per benchmark")
    parser.add_argument("--check", action="store_true", help="only check that every benchmark imports")
    args = parser.parse_args(argv)
    names = args.only or BENCHMARKS
    if args.check:
        bad = check(names)
        return 1 if bad else 0
    env = dict(os.environ)
    if args.scale == "small" and not args.record:
        env["SPARZA_BENCH_OUT"] = tempfile.mkdtemp(prefix="sparza-bench-")
    failures = []
    took_all = time.monotonic()
    for name in names:
        script = script_of(name)
        if not script.exists():
            print(f"== {name}: not written yet, skipped", flush=True)
            failures.append(name)
            continue
        print(f"== {name} ({args.scale})", flush=True)
        started = time.monotonic()
        try:
            result = subprocess.run([sys.executable, str(script), "--scale", args.scale], env=env,
                                    timeout=args.timeout, check=False)
            code = result.returncode
        except subprocess.TimeoutExpired:
            code = -1
        took = time.monotonic() - started
        print(f"== {name}: {'ok' if code == 0 else f'FAILED ({code})'} in {took:.0f}s", flush=True)
        if code != 0:
            failures.append(name)
    print(f"report: {Path(env.get('SPARZA_BENCH_OUT', HERE.parent / 'docs')) / 'benchmarks.md'} "
          f"({time.monotonic() - took_all:.0f}s in all)")
    if failures:
        print("failed: " + ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
