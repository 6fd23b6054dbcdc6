"""``sparza run`` checks a job on the driver before Spark starts: exit 2 and one line naming the key.

Every test runs the real CLI in a subprocess with ``JAVA_HOME`` pointing nowhere: had the run got as far
as starting Spark, it would fail with Spark's own error instead of the start check's line, so the
expected line proves the check ran first. The jobs' streams exist and are empty (no new input): a run
that skipped the check would start, find nothing to do and exit 0.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.helpers import run_sparza, sparza_env, write_config

from sparza.config import Config

_TASKS = '''
from sparza.task import StreamTask


class NoProcess:
    def init(self, context):
        pass


class AsksUndeclared:
    def init(self, context):
        self.counts = context.get_store("counts")
        self.seen = context.get_store("seen")

    def process(self, envelope, collector, coordinator):
        pass


class NoWindow:
    def process(self, envelope, collector, coordinator):
        pass
'''


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("warning:")]


@pytest.fixture
def start_check(work_dir: Path, make_job: Callable[..., Config]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``sparza run --once`` on the keyed-count job with ``overrides``; task classes of this file
    are importable as ``pf_tasks.*`` and a broken module as ``pf_broken``."""
    modules = work_dir / "modules"
    modules.mkdir()
    (modules / "pf_tasks.py").write_text(_TASKS)
    (modules / "pf_broken.py").write_text("RATE = 1 / 0  # a module that fails while importing\n")

    def run(*extra: str, config: Config | None = None, **overrides: Any) -> subprocess.CompletedProcess[str]:
        cfg = config if config is not None else make_job(**overrides)
        path = write_config(cfg, work_dir / "job.yaml")
        env = sparza_env()
        env["PYTHONPATH"] = f"{modules}:{env['PYTHONPATH']}"
        env["JAVA_HOME"] = str(work_dir / "no-java")  # a Spark start would fail differently
        return run_sparza("run", "-c", str(path), "--once", *extra, env=env, timeout=120)

    return run


def _assert_start_check(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    lines = _lines(result.stderr)
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert len(lines) == 1, result.stderr[-3000:]
    line = lines[0]
    assert line.startswith(("start check failed: ", "config error: ")), line
    assert "Traceback" not in result.stderr and "java" not in result.stderr.lower(), result.stderr[-3000:]
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def test_task_class_whose_module_is_missing(start_check: Callable[..., Any]) -> None:
    _assert_start_check(start_check(**{"task.class": "pf_nosuch.Task"}), "'task.class'", "pf_nosuch")


def test_task_class_whose_module_raises_on_import(start_check: Callable[..., Any]) -> None:
    _assert_start_check(start_check(**{"task.class": "pf_broken.Task"}), "'task.class'", "ZeroDivisionError")


def test_task_class_missing_from_its_module(start_check: Callable[..., Any]) -> None:
    _assert_start_check(start_check(**{"task.class": "pf_tasks.Nope"}), "'task.class'", "defines no 'Nope'")


def test_task_class_without_process(start_check: Callable[..., Any]) -> None:
    _assert_start_check(start_check(**{"task.class": "pf_tasks.NoProcess"}), "'task.class'", "process(")


def test_window_ms_without_a_window_method(start_check: Callable[..., Any]) -> None:
    _assert_start_check(start_check(**{"task.class": "pf_tasks.NoWindow", "task.window.ms": "1000"}),
                        "'task.window.ms'", "window(")


def test_task_asking_for_an_undeclared_store(start_check: Callable[..., Any]) -> None:
    _assert_start_check(start_check(**{"task.class": "pf_tasks.AsksUndeclared"}), "'stores.seen.factory'",
                        "declared stores: counts")



def test_the_stores_a_task_class_asks_for_are_read_from_its_source_once(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """Every job start of a class (each stage, each TestRunner restart) checks its get_store names: its source is
    read and parsed once per class (it took ~0.1 s each time), an instance answers as its class, and a class
    made anew (a reloaded module) is read again."""
    import importlib.util
    import inspect
    import sys

    from sparza.runtime.driver import preflight

    reads: list[Any] = []
    real = inspect.getsource
    monkeypatch.setattr(preflight.inspect, "getsource", lambda obj: reads.append(obj) or real(obj))
    path = tmp_path / "pf_once.py"
    path.write_text(_TASKS)

    def load() -> Any:
        spec = importlib.util.spec_from_file_location("pf_once", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "pf_once", module)  # where inspect finds a class's file
        spec.loader.exec_module(module)
        return module.AsksUndeclared

    cls = load()
    assert preflight.store_names_asked(cls) == ["counts", "seen"]
    assert preflight.store_names_asked(cls) == ["counts", "seen"]
    assert preflight.store_names_asked(cls()) == ["counts", "seen"]
    assert reads == [cls]
    again = load()
    assert preflight.store_names_asked(again) == ["counts", "seen"] and reads == [cls, again]

def test_input_of_an_undeclared_system(start_check: Callable[..., Any]) -> None:
    _assert_start_check(start_check(**{"task.inputs": "other.events"}), "'systems.other.samza.factory'")


def test_input_stream_that_does_not_exist(start_check: Callable[..., Any], work_dir: Path) -> None:
    _assert_start_check(start_check(**{"task.inputs": "delta.nosuch"}), "task.inputs", "'nosuch' does not exist",
                        f"sparza stream create nosuch --partitions N --config {work_dir / 'job.yaml'}")


def test_output_stream_the_config_names_that_does_not_exist(start_check: Callable[..., Any], work_dir: Path) -> None:
    """The job's output (the keyed count's own setting keyed_count.output) was never created: before Spark, not
    as a failed batch (where it was a 'task exception' that task.ignored.exceptions could hide, dropping every
    message). A stream the config only describes (a serde) may be a leftover: a warning, not a refusal."""
    result = start_check(**{"keyed_count.output": "delta.totals", "task.ignored.exceptions": "*",
                            "systems.delta.streams.leftover.samza.msg.serde": "json"})
    _assert_start_check(result, "'keyed_count.output'", "output stream delta.totals (", "which does not exist",
                        f"sparza stream create totals --system delta --partitions N --config {work_dir / 'job.yaml'}")
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert any("stream delta.leftover" in line and f"--config {work_dir / 'job.yaml'}" in line for line in warnings)


def test_blob_store_root_that_cannot_be_written(start_check: Callable[..., Any], work_dir: Path) -> None:
    (work_dir / "a-file").write_text("not a directory")
    _assert_start_check(start_check(**{"blob.store.local.root": str(work_dir / "a-file" / "blobs")}),
                        "'blob.store.local.root'", "writable directory")


def test_invalid_container_name_is_refused_before_any_connection(start_check: Callable[..., Any]) -> None:
    line = _assert_start_check(start_check(**{"blob.store.manager.factory": "azure",
                                              "blob.store.azure.container": "My_Blobs",
                                              "azure.storage.connect": "UseDevelopmentStorage=true"}),
                               "'blob.store.azure.container'", "'My_Blobs'")
    assert "lowercase" in line


def test_wrong_account_key(start_check: Callable[..., Any], azure_account: Any, unique_name: str) -> None:
    wrong = ("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=d3Jvbmcta2V5;"
             f"BlobEndpoint={azure_account.blob_endpoint};")
    line = _assert_start_check(start_check(**{"blob.store.manager.factory": "azure",
                                              "blob.store.azure.container": unique_name,
                                              "azure.storage.connect": wrong}),
                               "'blob.store.azure.container'", "refused the credentials",
                               azure_account.blob_endpoint, "azure.storage.connect")
    assert "d3Jvbmcta2V5" not in line


def test_checkpoint_container_with_a_good_account_passes_the_check(start_check: Callable[..., Any],
                                                                    azure_connection_string: str,
                                                                    unique_name: str, work_dir: Path) -> None:
    # The good case of the same check, proven by the next one failing: a bad task.class behind it.
    result = start_check(**{"job.checkpoint.factory": "azure", "job.checkpoint.azure.container": unique_name,
                            "azure.storage.connect": azure_connection_string, "task.class": "pf_nosuch.Task"})
    _assert_start_check(result, "'task.class'")


def test_storage_that_refuses_connections(start_check: Callable[..., Any]) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}/devstoreaccount1"
    _assert_start_check(start_check(**{"job.checkpoint.factory": "azure", "job.checkpoint.azure.container": "cps",
                                       "azure.storage.connect": _connect(endpoint)}),
                        "'job.checkpoint.azure.container'", "cannot connect", endpoint, "sparza dev-storage start")


def test_storage_that_hangs_is_reported_within_the_configured_timeout(start_check: Callable[..., Any],
                                                                      silent_server: str) -> None:
    started = time.monotonic()
    result = start_check(**{"blob.store.manager.factory": "azure", "blob.store.azure.container": "blobs",
                            "azure.storage.connect": _connect(silent_server), "azure.storage.timeout.ms": "1500"})
    waited = time.monotonic() - started
    _assert_start_check(result, "'blob.store.azure.container'", silent_server, "did not answer within 1.5 s",
                        "azure.storage.timeout.ms")
    # Not a speed check: with the SDK's default retries and 60 s read timeout this takes minutes.
    assert waited < 60, waited


def test_application_class_that_does_not_import(start_check: Callable[..., Any], make_job: Callable[..., Config]
                                                ) -> None:
    config = make_job()
    values = {k: v for k, v in config.items() if k != "task.class"}
    values["app.class"] = "pf_broken.App"
    _assert_start_check(start_check(config=Config(values)), "'app.class'", "ZeroDivisionError")


def test_debug_shows_the_traceback(start_check: Callable[..., Any]) -> None:
    result = start_check("--debug", **{"task.class": "pf_broken.Task"})
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def _connect(endpoint: str) -> str:
    from sparza.azure import AZURITE_ACCOUNT_KEY

    return f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_ACCOUNT_KEY};" \
           f"BlobEndpoint={endpoint};"


def test_a_good_job_and_every_stage_of_a_good_application_pass_the_checks(make_job: Callable[..., Config],
                                                                          work_dir: Path) -> None:
    from sparza.api import plan_application
    from sparza.runtime.driver.preflight import check_job
    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin

    check_job(make_job())  # the keyed count: its task asks for "counts", which is declared
    config = Config({
        "job.name": "shop", "app.class": "sparza.api.examples.RepartitionCount", "app.example.partitions": "3",
        "job.logged.store.base.dir": str(work_dir / "app-state"), "systems.delta.samza.factory": "delta",
        "systems.delta.delta.root": str(work_dir / "app-streams"),
        "blob.store.local.root": str(work_dir / "app-blobstore")})
    admin = DeltaSystemAdmin("delta", config)
    for stream in ("events", "out"):
        admin.create_stream(StreamSpec(stream, 2))
    plan = plan_application(config)
    plan.create_streams()
    assert len(plan.stages) == 2
    for stage in plan.stages:
        check_job(stage.config)


_INIT_FAILS = '''
import os
import time


class InitFails:
    """Records each init() call in app.attempts.dir, then fails: a deterministic task error."""

    def init(self, context):
        directory = context.config.get_str("app.attempts.dir")
        with open(os.path.join(directory, f"{os.getpid()}-{time.monotonic_ns()}"), "w"):
            pass
        raise ZeroDivisionError("rate of an empty window")

    def process(self, envelope, collector, coordinator):
        pass
'''


@pytest.mark.spark
def test_a_deterministic_task_error_on_an_executor_is_one_line_with_its_trace_and_not_retried(
        work_dir: Path, make_job: Callable[..., Config]) -> None:
    """Runs Spark (local[*,4]: Spark retries a failed task up to 4 times): init() raising fails the job
    after one attempt, with one line naming the task, the method, the exception and the trace file."""
    from examples.keyed_count.load import append_messages

    modules = work_dir / "init-modules"
    modules.mkdir()
    (modules / "pf_init.py").write_text(_INIT_FAILS)
    attempts = work_dir / "attempts"
    attempts.mkdir()
    config = make_job(partitions=1, **{"task.class": "pf_init.InitFails", "app.attempts.dir": str(attempts),
                                       "task.error.trace.dir": str(work_dir / "traces")})
    append_messages(config, 5, 2)
    env = sparza_env()
    env["PYTHONPATH"] = f"{modules}:{env['PYTHONPATH']}"
    result = run_sparza("run", "-c", str(write_config(config, work_dir / "job.yaml")), "--once", env=env,
                        timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    line = errors[0]
    assert "task exception in task 'Partition 0' during init(): ZeroDivisionError: rate of an empty window" in line
    assert "next: fix the task's init()" in line
    trace = Path(line.rsplit("full trace: ", 1)[1].strip())
    assert trace.parent.parent == work_dir / "traces"
    assert "Traceback" in trace.read_text() and "rate of an empty window" in trace.read_text()
    assert len(list(attempts.iterdir())) == 1  # not retried by Spark
