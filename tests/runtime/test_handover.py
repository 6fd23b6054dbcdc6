"""Two `sparza run` processors under the Azure coordinator (Azurite) hand tasks over while input keeps
arriving: a second processor joins and takes a task, then the first is stopped and the second takes
everything. Each processor has its own local state dir, so a moved task restores its store from the
blob store. The output must be exact: no message lost or counted twice across the moves."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import REPO, expected_counts, final_counts, sparza_cmd, sparza_env, write_config

from sparza.config import Config
from sparza.coordination.status import read_status
from sparza.runtime import checkpoint_store_from_config
from sparza.systems.delta import DeltaSystemAdmin
from sparza.testing import FAST_AZURE_COORDINATION, eventually

pytestmark = [pytest.mark.slow, pytest.mark.azurite]

TASKS = ["Partition 0", "Partition 1"]


def _start(config_path: str, processor: str, state_dir: str) -> subprocess.Popen[str]:
    env = {**sparza_env(), "SPARZA_CONF_job__logged__store__base__dir": state_dir}
    return subprocess.Popen(sparza_cmd("run", "--config", config_path, "--processor-id", processor,
                                       "--master", "local[1]"),
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait(what: str, check: Callable[[], bool], procs: list[subprocess.Popen[str]], timeout: float = 150) -> None:
    def done() -> bool:
        for proc in procs:
            assert proc.poll() is None, f"a processor exited while waiting for {what}: {proc.stderr.read()}"
        return check()

    eventually(done, timeout, 0.5, f"timed out after {timeout}s waiting for {what}")


def _caught_up(config: Config, job_key: str) -> bool:
    """Every task's checkpoint is at the end of its input partition."""
    from sparza.streams import SystemStreamPartition

    admin = DeltaSystemAdmin("delta", config)
    checkpoints = checkpoint_store_from_config(config, job_key).read_all()
    if sorted(checkpoints) != TASKS:
        return False
    meta = admin.get_system_stream_metadata(["events"])["events"]
    for p, task in enumerate(TASKS):
        ssp = SystemStreamPartition("delta", "events", p)
        offset = checkpoints[task].offsets.get(str(ssp))
        if offset is None or admin.count_between(ssp, offset, meta.partitions[p].upcoming) != 0:
            return False
    return True


def _owners(config: Config) -> dict[str, list[str]]:
    model = read_status(config).state.effective
    return {} if model is None else {p: sorted(t) for p, t in model.assignments.items()}


def _committed_under(config: Config, job_key: str, version: int) -> bool:
    checkpoints = checkpoint_store_from_config(config, job_key).read_all()
    return sorted(checkpoints) == TASKS and all(cp.generation >= version for cp in checkpoints.values())


def test_tasks_move_between_two_azure_processors_with_exact_output(make_job, work_dir, azure_connection_string,
                                                                    unique_name):
    config = make_job(**FAST_AZURE_COORDINATION, **{
        "azure.storage.connect": azure_connection_string, "job.name": unique_name,
        "job.checkpoint.factory": "azure", "job.checkpoint.azure.container": unique_name,
        "task.max.batch.messages": "150", "task.commit.ms": "300"})
    job_key = f"{unique_name}-1"
    path = str(write_config(config, work_dir / "job.yaml"))
    append_messages(config, 1500, 9, commit_size=300)
    p1 = _start(path, "p1", str(work_dir / "state-p1"))
    p2: subprocess.Popen[str] | None = None
    try:
        _wait("p1 to own both tasks and commit", lambda: _owners(config).get("p1") == TASKS
              and _committed_under(config, job_key, 1), [p1])
        append_messages(config, 1000, 9, start=1500, commit_size=250)
        p2 = _start(path, "p2", str(work_dir / "state-p2"))
        _wait("a model giving one task to each processor",
              lambda: len(_owners(config).get("p1", [])) == 1 and len(_owners(config).get("p2", [])) == 1,
              [p1, p2])
        shared = read_status(config).state.version
        _wait("both tasks committed under the shared model", lambda: _committed_under(config, job_key, shared),
              [p1, p2])
        append_messages(config, 1000, 9, start=2500, commit_size=250)
        p1.send_signal(signal.SIGTERM)
        assert p1.wait(timeout=120) == 0, p1.stderr.read() if p1.stderr else ""
        _wait("p2 to own both tasks", lambda: _owners(config).get("p2") == TASKS, [p2])
        alone = read_status(config).state.version
        append_messages(config, 500, 9, start=3500, commit_size=250)
        _wait("p2 to catch up under its own model", lambda: _committed_under(config, job_key, alone)
              and _caught_up(config, job_key), [p2])
        p2.send_signal(signal.SIGTERM)
        assert p2.wait(timeout=120) == 0, p2.stderr.read() if p2.stderr else ""
    finally:
        for proc in (p1, p2):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    counts, rows = final_counts(config)
    assert counts == expected_counts(4000, 9)
    assert rows == 4000
    checkpoints = checkpoint_store_from_config(config, job_key).read_all()
    assert all(cp.open_intent() is None for cp in checkpoints.values())
