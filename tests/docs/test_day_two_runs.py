"""The "Day two" example of docs/operations.md runs as written: the keyed count, a rewind by event time with its
state reset, a savepoint, and version 2 of the job started from it. The numbers are checked against a count of
what the loader appended (message i has key k{i % keys} and event time 1700000000000 + i)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _example() -> list[str]:
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    _, _, rest = page.partition("### The example, end to end")
    block = re.search(r"```bash\n(.*?)```", rest, re.DOTALL)
    assert block, "docs/operations.md lost its day-two example"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _stored(output: str) -> int:
    """The value `sparza store get` printed (tab-separated: task, key, value)."""
    [line] = [line for line in output.splitlines() if "\t" in line]
    return int(line.rsplit("\t", 1)[1])


def test_the_day_two_example_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARZA_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    env["COLUMNS"] = "250"
    lines = _example()
    outputs = []
    for line in lines:
        result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, (line, result.stdout[-3000:], result.stderr[-3000:])
        outputs.append(result)
    by_line = dict(zip(lines, outputs, strict=True))
    loads = [re.search(r"--messages (\d+) --keys (\d+)", line) for line in lines if "keyed_count.load" in line]
    (first, keys), (more, _) = ((int(m.group(1)), int(m.group(2))) for m in loads if m)
    at = int(re.search(r"--to-time (\d+)", next(line for line in lines if "--to-time" in line)).group(1))  # type: ignore[union-attr]
    key = re.search(r"--key k(\d+)", next(line for line in lines if "store get" in line)).group(1)  # type: ignore[union-attr]
    # The oracle: message i of the first load has event time 1700000000000 + i and key k{i % keys}.
    recount = sum(1 for i in range(first) if 1_700_000_000_000 + i >= at and i % keys == int(key))
    added = sum(1 for i in range(more) if i % keys == int(key))
    dry = next(r for line, r in by_line.items() if "--dry-run" in line)
    assert "dry run: nothing changed" in dry.stdout and " -> " in dry.stdout
    shown = next(r for line, r in by_line.items() if "checkpoints show" in line)
    assert "rewind to time" in shown.stdout and "state reset" in shown.stdout
    gets = [r for line, r in by_line.items() if "store get" in line]
    assert [_stored(g.stdout) for g in gets] == [recount, recount + added]
    restored = next(r for line, r in by_line.items() if "--from-savepoint" in line)
    assert "from savepoint before-v2" in restored.stderr and "store audit is new" in restored.stderr
    listed = next(r for line, r in by_line.items() if "savepoint list" in line)
    assert listed.stdout.startswith("before-v2  job keyed-count-1")
