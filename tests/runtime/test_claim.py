"""Standalone processors hold an exclusive, fenced claim on their job, so two processors never run it at once.

`sparza run` subprocesses on one job: a second processor (another id, or the same id) is refused
with exit code 3 and one line naming the holder; a frozen holder's claim expires, a new processor
takes over, and the old one, woken up, is fenced and stops; a `kill -9`'d holder is replaced at
once on its host. On the local store and on Azurite.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import (
    REPO,
    expected_counts,
    final_counts,
    run_sparza,
    sparza_cmd,
    sparza_env,
    write_config,
)

from sparza.config import Config
from sparza.runtime import checkpoint_store_from_config
from sparza.testing import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

FAST_CLAIM = {"job.coordinator.standalone.claim.timeout.ms": "3000",
              "job.coordinator.standalone.claim.renew.interval.ms": "500"}


class _Processor:
    """A ``sparza run`` subprocess."""

    def __init__(self, config_path: Path, processor_id: str) -> None:
        self.args = sparza_cmd("run", "--config", str(config_path), "--master", "local[2]",
                               "--processor-id", processor_id)
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[str]:
        return subprocess.Popen(self.args, cwd=REPO, env={**sparza_env(), "COLUMNS": "400"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        """True while it runs; an exit is a failure of the test."""
        if self.proc.poll() is None:
            return True
        stderr = self.proc.stderr.read() if self.proc.stderr else ""
        raise AssertionError(f"exited {self.proc.returncode}: {stderr}")


def _start(config_path: Path, processor_id: str) -> _Processor:
    return _Processor(config_path, processor_id)


def _once(path: Path, processor_id: str) -> subprocess.CompletedProcess[str]:
    return run_sparza("run", "--config", str(path), "--once", "--master", "local[2]", "--processor-id",
                      processor_id, timeout=600)


def _kill(proc: _Processor) -> None:
    if proc.proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.proc.wait(timeout=60)


def _holder_epoch(config: Config, job_key: str, holder: str) -> int:
    """The epoch of the claim ``holder`` holds now (the generation its task checkpoints must carry)."""
    state = checkpoint_store_from_config(config, job_key).claim_backend().read()
    assert state is not None and state.record.holder == holder and not state.record.released
    return state.record.epoch


def _claimed_by(config: Config, job_key: str, holder: str, proc: _Processor, timeout: float = 300) -> None:
    """Wait until ``holder`` holds the job's claim."""
    backend = checkpoint_store_from_config(config, job_key).claim_backend()

    def held() -> bool:
        assert proc.alive()
        state = backend.read()
        return state is not None and state.record.holder == holder and not state.record.released

    eventually(held, timeout, 0.2, f"processor {holder} did not take the claim of {job_key} within {timeout}s")


def _age_claim(config: Config, job_key: str, ms: int) -> None:
    """Move the claim store's clock ``ms`` on: the local claim backend measures a claim's age as now minus
    the claim file's modification time, so setting that time back is time passing for the claim."""
    backend = checkpoint_store_from_config(config, job_key).claim_backend()
    path = backend.path  # type: ignore[attr-defined]
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - ms * 1_000_000))


def _committed(config: Config, job_key: str, at_least: int, proc: _Processor,
               timeout: float = 480) -> None:
    store = checkpoint_store_from_config(config, job_key)

    def reached() -> bool:
        assert proc.alive()
        batches = [cp.batch for cp in store.read_all().values()]
        return len(batches) == 2 and min(batches) >= at_least

    eventually(reached, timeout, 0.2, f"no batch {at_least} within {timeout}s")


def _output(config: Config, rows: int, proc: _Processor, timeout: float = 480) -> None:
    """Wait until the output has ``rows`` rows (every input message counted once)."""
    def written() -> bool:
        assert proc.alive()
        return final_counts(config)[1] >= rows

    eventually(written, timeout, 0.3, f"no {rows} output rows within {timeout}s")


def _refused(path: Path, processor_id: str, holder: str) -> None:
    result = run_sparza("run", "--config", str(path), "--master", "local[2]", "--processor-id", processor_id,
                        timeout=60, env={**sparza_env(), "COLUMNS": "400"})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 3, result.stderr
    assert len(lines) == 1, result.stderr
    assert f"is claimed by processor {holder} (pid" in lines[0] and "since 20" in lines[0]
    assert "stop that one first" in lines[0]


def _exact(config: Config, messages: int, keys: int) -> None:
    counts, rows = final_counts(config)
    assert counts == expected_counts(messages, keys)
    assert rows == messages


def test_second_processor_is_refused_whatever_its_id_and_the_holder_keeps_running(make_job, work_dir):
    config = make_job(**FAST_CLAIM, **{"task.max.batch.messages": "300", "task.commit.ms": "200"})
    append_messages(config, 600, 9, commit_size=300)
    path = write_config(config, work_dir / "job.yaml")
    holder = _start(path, "0")
    try:
        _committed(config, "kc-1", 1, holder)
        _refused(path, "1", "0")       # another processor id
        _refused(path, "0", "0")       # the same processor id: must not disturb the running one
        append_messages(config, 300, 9, start=600, commit_size=300)
        _output(config, 900, holder)  # it kept processing
        holder.proc.send_signal(signal.SIGTERM)
        _, stderr = holder.proc.communicate(timeout=300)
        assert holder.proc.returncode == 0, stderr
    finally:
        _kill(holder)
    _exact(config, 900, 9)
    # Released at the clean stop: the other processor may take the job over at once.
    result = _once(path, "1")
    assert result.returncode == 0, result.stderr
    _exact(config, 900, 9)


def test_frozen_holder_expires_is_taken_over_and_is_fenced_when_it_wakes(make_job, work_dir):
    config = make_job(**FAST_CLAIM, **{"task.max.batch.messages": "300", "task.commit.ms": "200"})
    append_messages(config, 600, 9, commit_size=300)
    path = write_config(config, work_dir / "job.yaml")
    old = _start(path, "0")
    new: _Processor | None = None
    try:
        _committed(config, "kc-1", 1, old)
        os.killpg(old.pid, signal.SIGSTOP)  # alive but silent: a paused or partitioned host
        _age_claim(config, "kc-1", 4000)  # past the claim timeout, without waiting for it
        new = _start(path, "1")
        # The old driver's containers run in the Python workers' own process group (not stopped): they end
        # their epoch once the driver has been silent for job.container.driver.timeout.ms. Input appended
        # only after the takeover must be the new holder's.
        _claimed_by(config, "kc-1", "1", new)
        append_messages(config, 300, 9, start=600, commit_size=300)
        _output(config, 900, new)
        generations = {cp.generation for cp in checkpoint_store_from_config(config, "kc-1").read_all().values()}
        assert generations == {_holder_epoch(config, "kc-1", "1")}  # the new holder's epoch fences the old one
        assert min(generations) >= 2
        append_messages(config, 300, 9, start=900, commit_size=300)
        os.killpg(old.pid, signal.SIGCONT)
        _, stderr = old.proc.communicate(timeout=300)
        assert old.proc.returncode == 3, stderr
        assert "processor 0 lost its claim on job kc-1" in stderr and "processor 1 (pid" in stderr
        _output(config, 1200, new)
        new.proc.send_signal(signal.SIGTERM)
        _, stderr = new.proc.communicate(timeout=300)
        assert new.proc.returncode == 0, stderr
    finally:
        if old.proc.poll() is None:
            os.killpg(old.pid, signal.SIGCONT)
        _kill(old)
        if new is not None:
            _kill(new)
    _exact(config, 1200, 9)


@pytest.mark.azurite
def test_on_azure_a_second_processor_is_refused_and_a_killed_holder_is_replaced(make_job, work_dir,
                                                                                azure_connection_string,
                                                                                unique_name):
    config = make_job(**FAST_CLAIM, **{
        "azure.storage.connect": azure_connection_string, "job.name": unique_name,
        "blob.store.manager.factory": "azure", "blob.store.azure.container": unique_name,
        "task.max.batch.messages": "300", "task.commit.ms": "200"})
    job_key = f"{unique_name}-1"
    append_messages(config, 600, 9, commit_size=300)
    path = write_config(config, work_dir / "job.yaml")
    holder = _start(path, "0")
    try:
        _committed(config, job_key, 1, holder)
        _refused(path, "1", "0")
        killed_epoch = _holder_epoch(config, job_key, "0")
        os.killpg(holder.pid, signal.SIGKILL)  # driver and JVM (the Python workers end with their daemon)
        holder.proc.wait(timeout=60)
    finally:
        _kill(holder)
    # Its host knows it is dead: no wait for the timeout.
    result = _once(path, "1")
    assert result.returncode == 0, result.stderr
    _exact(config, 600, 9)
    generations = {cp.generation for cp in checkpoint_store_from_config(config, job_key).read_all().values()}
    assert len(generations) == 1 and min(generations) > killed_epoch
