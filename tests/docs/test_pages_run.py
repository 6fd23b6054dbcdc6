"""Every shell command and Python block of every docs page runs as written, or says visibly why it does not.

A page's fenced blocks each name their language. A ``bash`` or ``python`` block either runs here (shell blocks
line by line in a scratch directory that has the project's ``examples/`` and ``.venv`` and the keyed count's
config as ``job.yaml``; Python blocks in a module of their own, with any ``test_*`` function they define called),
or is run by another named test, or starts with a visible marker line:

- ``# needs: <what>`` — it needs what this test does not have within its budget (a Spark session or cluster, a
  broker, an Azure account, a job's earlier run, minutes);
- ``# sketch: <why>`` (Python only) — an outline whose names come from the caller.

Each marked block is listed in ``NOT_RUN`` below, so no block is skipped silently: a new marker fails here until
it is listed. Blocks that are not run are still checked: every ``sparza`` command parses against the CLI (its
subcommands, options and arguments), every ``python -m`` module and script path, ``make`` target and test path
exists, and every Python block compiles and its imports resolve. ``console`` blocks are transcripts (``$ `` lines
are commands, parse-checked; the rest is their output).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
LANGUAGES = {"bash", "python", "console", "yaml", "json", "text", "mermaid", "properties"}
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^#\s*(needs|sketch):\s*(\S.*)$")

# Blocks that are not run here, in page order: (page, first line after the marker, what the marker says).
NOT_RUN: list[tuple[str, str, str]] = [
    ('adjunct.md', 'from sparza.state.adjunct import AdjunctConfig, TaskAdjunctManager',
     "sketch: what the runtime calls; config, the task's name, its blob store and SSPs come from the runtime"),
    ('api.md', 'from sparza.api import plan_application',
     "sketch: config is an application's config (app.class ...)"),
    ('azureblob.md', 'from sparza.config import Config',
     'needs: an Azure storage account or Azurite (CONNECTION_STRING)'),
    ('azureblob.md', 'from sparza.systems.azureblob import register_azureblob_sink',
     'needs: a SparkSession (spark) and the DataFrames events and df'),
    ('config.md', 'sparza config migrate wikipedia-stats.properties',
     "needs: a Samza job's .properties file"),
    ('control.md', 'from sparza.control import TaskControl',
     "sketch: the runtime's loop; the checkpoint, batch, task and collector are its"),
    ('coordination.md', 'from sparza.coordination import job_coordinator_from_config',
     'needs: Azure storage (Azurite) and a job config under job.coordinator.factory: azure'),
    ('coordination.md', 'from sparza.coordination.fencing import GenerationFence, FencedError',
     'sketch: what a coordinated processor does; config, job_model, checkpoint_blob are its'),
    ('coordination.md', 'sparza coordinator status --config job.yaml',
     'needs: Azure storage (Azurite) and a job under job.coordinator.factory: azure'),
    ('coordination.md', '.venv/bin/pytest tests/coordination -q',
     'needs: Azurite and minutes (the coordination tests and benchmark)'),
    ('guarantees.md', 'PYTHONPATH=src:. .venv/bin/python -m sparza.testing.harness --seed 12345',
     'needs: Spark, Azurite and a Kafka broker; minutes to an hour (harness runs and soaks)'),
    ('index.md', 'make demo',
     'needs: Spark and Azurite, minutes (the demo); --master a Spark cluster, --source kafka a broker'),
    ('kafka.md', 'sparza stream create --config job.yaml --system kafka events --partition',
     'needs: a Kafka broker (sparza dev-kafka start) and a job.yaml with a kafka system'),
    ('operations.md', 'az storage account create -n mysparza -g my-rg --sku Standard_LRS --kind',
     'needs: an Azure subscription (the az CLI)'),
    ('operations.md', 'sparza run --config job.yaml',
     'needs: Spark: a local session, a cluster, a Spark Connect server'),
    ('operations.md', 'import sparza',
     'needs: a SparkSession (spark) and your job.yaml'),
    ('operations.md', 'sparza package --config job.yaml --output dist/job.zip',
     'needs: a Spark cluster'),
    ('operations.md', 'sparza package --config job.yaml --output dist/job.zip',
     'needs: a Spark cluster and its workers'),
    ('operations.md', 'spark-submit --master k8s://https://<api-server> --deploy-mode cluster \\',
     'needs: a Kubernetes cluster and an image with the job'),
    ('operations.md', 'config = {**yaml.safe_load(open("/Workspace/jobs/shop.yaml")),',
     'needs: Databricks (dbutils, spark, a workspace file)'),
    ('operations.md', 'sparza run --config job.yaml --remote sc://connect-host:15002 --py-files',
     'needs: a Spark Connect server'),
    ('operations.md', 'sparza rewind --config job.yaml --to-time 2026-05-01T09:00:00Z --state r',
     'needs: a stopped job that ran (its task checkpoints)'),
    ('operations.md', 'sparza savepoint create NAME --config job.yaml',
     'needs: a stopped job that ran, its stores backed up; a v2 config'),
    ('operations.md', 'sparza store get counts --config job.yaml --key k7 --live',
     'needs: a running job (sparza run) that serves live queries'),
    ('operations.md', 'sparza stream grow events --partitions 8 --config job.yaml --system kafk',
     'needs: a Kafka broker (sparza dev-kafka start) and a running job that reads kafka.events'),
    ('operations.md', 'PYTHONPATH=src:. python docs/grafana/render_dashboard.py --run --seconds',
     'needs: Spark, Prometheus and 8 minutes (a live run rendered into the dashboard)'),
    ('operations.md', 'scripts/install_prometheus.sh',
     'needs: root (apt), Prometheus and an hour (the endurance benchmark)'),
    ('runtime.md', 'python -m examples.keyed_count.load --messages 20000 --keys 50',
     'needs: Spark (sparza run); the last line runs until Ctrl-C'),
    ('runtime.md', 'sparza run --config app.yaml --drain',
     "needs: Spark and an application's config (app.yaml)"),
    ('state.md', 'from sparza.state.kv import open_store, RocksDbStore, InMemoryStore, sto',
     "sketch: config and base_dir are a job's; dir a checkpoint directory"),
    ('state.md', '.venv/bin/python -m examples.keyed_count.load --config examples/keyed_co',
     'needs: Spark (sparza run)'),
    ('state.md', 'from sparza.state.backup import StateBackup, StoreBackupManager',
     'sketch: blob_store, config, the task and store dirs come from the runtime'),
    ('state.md', 'mgr = StoreBackupManager(backup, "counts", store_dir(base, "counts", tas',
     'sketch: continues the block above inside a commit'),
    ('state.md', 'from sparza.storeview.spark import register',
     'needs: a SparkSession (spark) and a committed run of the keyed count'),
    ('tables.md', '# DuckDB: the live Parquet files of the current version (or its delta ex',
     'needs: a typed table at /data/tables/counts, and a SparkSession for the Spark lines'),
    ('testing.md', 'config = demo_config(tmp_path, "r1", "UseDevelopmentStorage=true", parti',
     'sketch: from tests/demo/test_app.py (demo_config, edits, profiles and tmp_path are its)'),
    ('testing.md', 'import pytest',
     "sketch: make_runner and sorted_outputs are the test module's"),
    ('testing.md', 'runner = TestRunner.of(KeyedCountTask, config, claim=True)',
     'sketch: config, KeyedCountTask and the pytest imports as in the blocks above'),
]

# Blocks another test runs as written: (page, first line) -> that test.
RUN_ELSEWHERE: dict[tuple[str, str], str] = {
    ("operations.md", ".venv/bin/python -m examples.keyed_count.load --messages 20000 --keys 50"):
        "tests/docs/test_day_two_runs.py",
}
# docs/api.md's blocks after ``<!-- runnable -->`` are run, and their printed lines compared, by this test.
RUNNABLE_ELSEWHERE = "tests/api/test_docs_examples.py"


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it starts, its language, its text, and what it is marked with."""

    page: str
    line: int
    language: str
    text: str
    runnable_marker: bool  # preceded by ``<!-- runnable -->`` (docs/api.md's convention)

    @property
    def marker(self) -> tuple[str, str] | None:
        first = self.text.splitlines()[0].strip() if self.text.strip() else ""
        found = _MARKER.match(first)
        return (found.group(1), found.group(2)) if found else None

    @property
    def key(self) -> tuple[str, str]:
        """(page, its first line after any marker, without a trailing comment, at most 72 characters): how the
        lists above name it."""
        lines = [line for line in self.text.splitlines() if line.strip()]
        if self.marker is not None:
            lines = lines[1:]
        first = lines[0].strip() if lines else ""
        if not first.startswith("#"):
            first = first.split("  #", 1)[0].rstrip()
        return self.page, first[:72]

    def __str__(self) -> str:
        return f"docs/{self.page}:{self.line}"


def _blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    open_at, language, indent = -1, "", ""
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        found = _FENCE.match(line)
        if open_at < 0 and found:
            open_at, indent, language, body = number, found.group(1), found.group(2), []
        elif open_at >= 0 and found and found.group(1) == indent and not found.group(2):
            previous = lines[open_at - 2].strip() if open_at >= 2 else ""
            yield Block(page.name, open_at, language, "\n".join(body), previous == "<!-- runnable -->")
            open_at = -1
        elif open_at >= 0:
            body.append(line[len(indent):] if line.startswith(indent) else line)
    assert open_at < 0, f"docs/{page.name}:{open_at}: a fence that never closes"


BLOCKS = [block for page in PAGES for block in _blocks(page)]
CODE = [block for block in BLOCKS if block.language in ("bash", "python")]


def _run_here(block: Block) -> bool:
    return block.marker is None and block.key not in RUN_ELSEWHERE and not block.runnable_marker


# --- every block says what it is, and what is not run is listed ----------------------------------------------
def test_every_block_names_its_language() -> None:
    unnamed = [f"{b} ({b.language or 'no language'})" for b in BLOCKS if b.language not in LANGUAGES]
    assert unnamed == [], f"name each block's language, one of {sorted(LANGUAGES)}"


def test_blocks_not_run_here_are_marked_and_listed() -> None:
    marked = [(*block.key, f"{block.marker[0]}: {block.marker[1]}") for block in CODE if block.marker is not None]
    assert marked == NOT_RUN
    sketches = [str(b) for b in CODE if b.marker is not None and b.marker[0] == "sketch" and b.language != "python"]
    assert sketches == [], "only a Python block can be a sketch; a shell block that cannot run says what it needs"


def test_blocks_run_elsewhere_are_run_there() -> None:
    keys = {block.key for block in CODE}
    for key, test in RUN_ELSEWHERE.items():
        assert key in keys, f"{key} is no longer in docs/{key[0]}"
        assert key[0] in (ROOT / test).read_text(encoding="utf-8"), f"{test} does not read docs/{key[0]}"
    runnable = [b for b in CODE if b.runnable_marker]
    assert runnable and all(b.page == "api.md" and b.language == "python" for b in runnable)
    assert "<!-- runnable -->" in (ROOT / RUNNABLE_ELSEWHERE).read_text(encoding="utf-8")


# --- shell commands ------------------------------------------------------------------------------------------
def _commands(block: Block) -> Iterator[str]:
    """The block's command lines: continuations joined, comments and blank lines left out (``$ `` lines of a
    transcript)."""
    text = block.text.replace("\\\n", " ")
    for line in text.splitlines():
        if block.language == "console":
            if line.startswith("$ "):
                yield line[2:].strip()
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield stripped


def _words(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    for i, word in enumerate(words):  # what a redirection or a pipe leaves: the command itself
        if word in (">", ">>", "<", "|", "&&", ";", "2>", "2>&1"):
            words = words[:i]
            break
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value prefixes
        words = words[1:]
    if words and words[0] in ("flock", "timeout", "nice"):
        words = words[2:] if words[0] != "nice" else words[3:]
    return words


def _parse_sparza(args: list[str]) -> str | None:
    """None when ``sparza <args>`` parses against the CLI, else what is wrong (nothing runs)."""
    import typer
    import typer.core
    from typer._click.core import Exit  # typer vendors click; these two are its parser's outcomes
    from typer._click.exceptions import ClickException

    from sparza.cli import app

    command = typer.main.get_command(app)
    try:
        context = command.make_context("sparza", list(args))
        while isinstance(command, typer.core.TyperGroup):
            rest = [*getattr(context, "_protected_args", getattr(context, "protected_args", [])), *context.args]
            name, sub, rest = command.resolve_command(context, rest)
            assert sub is not None and name is not None
            context = sub.make_context(name, rest, parent=context)
            command = sub
    except ClickException as exc:
        return exc.format_message()
    except Exit:
        return None
    return None


_MAKE_TARGETS = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE))
_EXTERNAL = {"az", "export", "pip", "spark-submit", "cd", "cp", "mkdir"}


def _check_command(command: str) -> str | None:
    """What is wrong with one command line, checked without running it; None when nothing is."""
    words = _words(command)
    if not words:
        return None
    program, args = words[0], words[1:]
    if program.endswith("sparza"):
        return _parse_sparza(args)
    if program.endswith(("python", "python3")):
        if args[:1] == ["-m"]:
            module = args[1]
            try:
                found = importlib.util.find_spec(module)
            except ModuleNotFoundError:
                found = None
            return None if found is not None else f"no module {module}"

        return None if (ROOT / args[0]).exists() else f"no file {args[0]}"
    if program == "make":
        targets = [a for a in args if "=" not in a and not a.startswith("-")]
        missing = [t for t in targets if t not in _MAKE_TARGETS]
        return f"no make target {missing}" if missing else None
    if program.endswith("pytest"):
        paths = [a.split("::")[0] for a in args if not a.startswith("-") and ("/" in a or a.endswith(".py"))]
        missing = [p for p in paths if not (ROOT / p).exists()]
        return f"no test path {missing}" if missing else None
    if "/" in program:
        return None if (ROOT / program).exists() else f"no script {program}"
    if program in _EXTERNAL:
        return None
    return f"unknown program {program!r} (run it in a block this test can check, or list it)"


_READER_FILE = re.compile(r"^[\w./-]+\.(jsonl|json|yaml|yml|properties|zip|txt)$")


def test_every_shell_command_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In a scratch dir where the reader's own files a command names (edits.jsonl, job.yaml) exist, empty: the CLI
    # checks that such a file exists, and it is the reader's, not the project's.
    _scratch(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    problems = []
    for block in BLOCKS:
        if block.language not in ("bash", "console"):
            continue
        for command in _commands(block):
            for word in _words(command):
                path = tmp_path / word
                if _READER_FILE.match(word) and not word.startswith("/") and not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch()
            problem = _check_command(command)
            if problem is not None:
                problems.append(f"{block}: {command}: {problem}")
    assert problems == []


def _scratch(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    shutil.copy(ROOT / "examples" / "keyed_count" / "job.yaml", tmp_path / "job.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARZA_")}
    env["PATH"] = os.pathsep.join((str(ROOT / ".venv" / "bin"), env.get("PATH", "")))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["COLUMNS"] = "250"
    return env


SHELL_HERE = [b for b in CODE if b.language == "bash" and _run_here(b)]


@pytest.mark.parametrize("block", SHELL_HERE, ids=[str(b) for b in SHELL_HERE])
def test_shell_block_runs(block: Block, tmp_path: Path) -> None:
    env = _scratch(tmp_path)
    for command in _commands(block):
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
        assert "Traceback" not in done.stderr, (command, done.stderr[-3000:])


# --- Python blocks -------------------------------------------------------------------------------------------
PYTHON = [b for b in CODE if b.language == "python"]


@pytest.mark.parametrize("block", PYTHON, ids=[str(b) for b in PYTHON])
def test_python_block_compiles_and_its_imports_resolve(block: Block) -> None:
    tree = ast.parse(block.text, filename=str(block))
    namespace: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(block), "exec"), namespace)


PYTHON_HERE = [b for b in PYTHON if _run_here(b)]


@pytest.mark.parametrize("block", PYTHON_HERE, ids=[str(b) for b in PYTHON_HERE])
def test_python_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    name = "docs_block_" + re.sub(r"\W", "_", f"{block.page}_{block.line}")
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)  # classes it defines are importable by dotted path
    exec(compile(block.text, str(block), "exec"), module.__dict__)
    for attr, value in list(module.__dict__.items()):
        if attr.startswith("test_") and callable(value):
            value()
