"""The README's "A job in 20 lines" runs as written: its Python block is a working task, and its shell
block, typed in a fresh directory that has the project's ``examples/`` and ``.venv``, loads, runs,
shows the checkpoints and tails the output, with the counts an independent count of the input expects."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.streams import SystemStreamPartition
from sparza.systems.delta import DeltaSystemConsumer

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README.split("## A job in 20 lines", 1)[1].split("\n## ", 1)[0]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, flags=re.DOTALL)


def _readme_task(monkeypatch: pytest.MonkeyPatch) -> type:
    """The README's Python block, executed as a module of its own (it must import what it uses)."""
    module = types.ModuleType("readme_task")
    exec(compile(_blocks("python")[0], "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "readme_task", module)
    return module.KeyedCountTask  # type: ignore[no-any-return]


def test_the_readme_task_runs_and_its_output_setting_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (TestRunner, no Spark): the README's class counts per key, and keyed_count.output, which
    the README says redirects the counts, does."""
    from sparza.testing import TestMessage, TestRunner

    config = {**Config.from_file(ROOT / "examples" / "keyed_count" / "job.yaml"),
              "keyed_count.output": "delta.elsewhere", "systems.delta.streams.elsewhere.samza.msg.serde": "json",
              "systems.delta.streams.elsewhere.samza.key.serde": "string"}
    keys = [f"k{i % 7}" for i in range(100)]
    values = {k: v for k, v in config.items() if k != "task.class"}
    with TestRunner.of(_readme_task(monkeypatch), values) as runner:
        runner.add_input("delta.events", [TestMessage(b"v", key=k.encode()) for k in keys], partitions=2)
        runner.add_output("delta.counts", partitions=2).add_output("delta.elsewhere", partitions=2)
        runner.run()
        last = {m.value["key"]: m.value["count"] for m in runner.outputs("delta.elsewhere")}
        assert runner.outputs("delta.counts") == []
    assert last == Counter(keys)


def test_config_check_lists_the_jobs_own_setting_without_a_warning(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "examples" / "keyed_count" / "job.yaml").read_text() + "keyed_count:\n  output: delta.x\n")
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "sparza"), "config", "check", "--config", str(job)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "keyed_count.output: not read by sparza" not in result.stdout
    assert "the job's own setting: read by task.class examples.keyed_count.task.KeyedCountTask" in result.stdout


@pytest.mark.slow
def test_the_readme_commands_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    commands = _blocks("bash")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARZA_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    env["COLUMNS"] = "250"
    outputs = []
    for line in commands.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, (line, result.stdout[-3000:], result.stderr[-3000:])
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        outputs.append(result)
    _, ran, shown, tailed = outputs
    messages, keys = (int(re.search(rf"--{name} (\d+)", commands).group(1)) for name in ("messages", "keys"))  # type: ignore[union-attr]
    assert "caught up (--once)" in ran.stderr
    # The checkpoints say what their offsets mean, where they print them.
    assert "offsets: where each task reads next" in shown.stdout and "<Delta table version>:<row>" in shown.stdout
    tails = [json.loads(line.split(": ", 1)[1]) for line in tailed.stdout.splitlines() if line.startswith("#")]
    assert tails and all(set(t) == {"key", "count"} for t in tails)
    # An independent oracle: the input's own count per key, against the last count the job sent per key.
    config = Config.from_file(tmp_path / "examples" / "keyed_count" / "job.yaml")
    root = tmp_path / config.get_str("systems.delta.delta.root")
    consumer = DeltaSystemConsumer("delta", config.with_overrides({"systems.delta.delta.root": str(root)}))
    expected: Counter[str] = Counter()
    last: dict[str, int] = {}
    for p in range(4):
        expected.update(e.key.decode() for e in consumer.read(SystemStreamPartition("delta", "events", p), None,
                                                              bounded=False, include_control=False))
        for e in consumer.read(SystemStreamPartition("delta", "counts", p), None, bounded=False,
                               include_control=False):
            body = json.loads(e.message)
            last[body["key"]] = max(last.get(body["key"], 0), body["count"])
    assert sum(expected.values()) == messages and len(expected) == keys
    assert last == dict(expected)


def test_the_loader_has_every_option_its_help_names() -> None:
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "examples.keyed_count.load", "--help"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    _, _, rest = result.stdout.partition("options:")
    typed = next(line for line in _blocks("bash")[0].splitlines() if "examples.keyed_count.load" in line)
    named = set(re.findall(r"``(--[a-z-]+)``", result.stdout)) | set(re.findall(r"--[a-z][a-z-]+", typed))
    declared = set(re.findall(r"^\s+(--[a-z-]+)", rest, flags=re.MULTILINE))
    assert named and named <= declared, (named - declared, result.stdout)
