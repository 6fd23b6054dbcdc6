"""Run every benchmark and regenerate docs/benchmarks.md.

``--scale full`` records into ``docs/`` (the committed results); ``--scale small`` is the CI smoke
run and records into a temp dir unless ``--record`` is given, so it never overwrites full results.
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
BENCHMARKS = ["streams", "azureblob", "state_backup", "coordination", "runtime", "control", "adjunct"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    parser.add_argument("--record", action="store_true", help="write small-scale results into docs/ too")
    parser.add_argument("--only", nargs="*", help="run only these benchmarks")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per benchmark")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.scale == "small" and not args.record:
        env["SPARZA_BENCH_OUT"] = tempfile.mkdtemp(prefix="sparza-bench-")
    failures = []
    for name in args.only or BENCHMARKS:
        script = HERE / f"{name}.py"
        if not script.exists():
            print(f"== {name}: not written yet, skipped", flush=True)
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
    print(f"report: {Path(env.get('SPARZA_BENCH_OUT', HERE.parent / 'docs')) / 'benchmarks.md'}")
    if failures:
        print("failed: " + ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
