"""The "State schema evolution" example of docs/state.md runs as written: version 1 of the visits count, more
input, version 2 (a field added to the store's Avro value) on version 1's state. The counts are checked against a
count of what the loader appended (message i has key k{i % keys} and event time 1700000000000 + i)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _example() -> list[str]:
    page = (ROOT / "docs" / "state.md").read_text(encoding="utf-8")
    _, _, rest = page.partition("## State schema evolution")
    _, _, rest = rest.partition("### The example, end to end")
    block = re.search(r"```bash\n(.*?)```", rest, re.DOTALL)
    assert block, "docs/state.md lost its schema evolution example"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _stored(output: str) -> dict[str, int]:
    """The value `sparza store get` printed (tab-separated: task, key, value)."""
    [line] = [line for line in output.splitlines() if "\t" in line]
    value: dict[str, int] = json.loads(line.rsplit("\t", 1)[1])
    return value


def test_the_schema_evolution_example_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARZA_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["COLUMNS"] = "250"
    (tmp_path / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    lines = _example()
    outputs = []
    for line in lines:
        result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, (line, result.stdout[-3000:], result.stderr[-3000:])
        outputs.append(result)
    loads = [re.search(r"--messages (\d+) --keys (\d+)", line) for line in lines if "keyed_count.load" in line]
    (first, keys), (more, _) = ((int(m.group(1)), int(m.group(2))) for m in loads if m)
    key = int(re.search(r"--key k(\d+)", next(line for line in lines if "store get" in line)).group(1))  # type: ignore[union-attr]
    in_first = [i for i in range(first) if i % keys == key]
    in_more = [i for i in range(more) if i % keys == key]
    gets = [r for line, r in zip(lines, outputs, strict=True) if "store get" in line]
    assert [_stored(g.stdout) for g in gets] == [
        {"count": len(in_first)},
        {"count": len(in_first) + len(in_more), "last_seen": 1_700_000_000_000 + max(in_more)}]
