"""JobClaim on both backends: exclusive, expiring, fenced by an epoch, released at stop."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sparza.clock import ManualClock
from sparza.coordination.jobclaim import (
    AzureClaimBackend,
    ClaimHeldError,
    ClaimLostError,
    JobClaim,
    LocalClaimBackend,
)
from sparza.testing import eventually


@pytest.fixture(params=["local", "azure"])
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Any:
    if request.param == "local":
        return lambda: LocalClaimBackend(tmp_path / "checkpoints" / "job-1" / "_claim")
    account = request.getfixturevalue("azure_account")
    container = account.blob_service_client().get_container_client(unique_name)
    return lambda: AzureClaimBackend(container, "checkpoints/job-1/_claim")


def _claim(factory: Any, processor: str, **kwargs: Any) -> JobClaim:
    kwargs.setdefault("timeout_ms", 3000)
    kwargs.setdefault("renew_interval_ms", 500)
    return JobClaim(factory(), "job-1", processor, **kwargs)


def test_a_live_claim_refuses_any_other_processor_and_is_free_after_release(backend_factory):
    first = _claim(backend_factory, "0")
    assert first.acquire() == 1
    for other in ("1", "0"):  # another id, or the same id in another process
        with pytest.raises(ClaimHeldError) as refused:
            _claim(backend_factory, other).acquire()
        message = str(refused.value)
        assert "is claimed by processor 0 (pid" in message and "since 20" in message
        assert "stop that one first" in message and "expires in" in message
    first.release()
    second = _claim(backend_factory, "1")
    assert second.acquire() == 2  # a higher epoch than any before
    second.release()


def test_renewals_keep_it_held_past_the_timeout(backend_factory):
    clock = ManualClock()
    holder = _claim(backend_factory, "0", timeout_ms=1500, renew_interval_ms=300, clock=clock)
    holder.acquire()
    other = _claim(backend_factory, "1", timeout_ms=1500, renew_interval_ms=300, clock=clock)
    with pytest.raises(ClaimHeldError):
        other.acquire()  # it starts watching the claim
    for _ in range(8):  # 2.4 s of its clock, renewed every 300 ms: the claim changes under its eyes
        clock.advance(ms=300)
        holder.renew()
        with pytest.raises(ClaimHeldError):
            other.acquire()
    holder.release()


def test_an_unrenewed_claim_expires_is_taken_over_and_the_old_holder_learns_it_lost(backend_factory):
    clock = ManualClock()
    old = _claim(backend_factory, "0", timeout_ms=1500, renew_interval_ms=300, clock=clock)
    assert old.acquire() == 1  # never renewed: as if its process were frozen
    new = _claim(backend_factory, "1", timeout_ms=1500, renew_interval_ms=300, clock=clock)
    with pytest.raises(ClaimHeldError):
        new.acquire()
    clock.advance(ms=1499)
    with pytest.raises(ClaimHeldError) as refused:
        new.acquire()  # 1 ms short of the timeout
    assert "its claim expires in 0 s" in str(refused.value)
    clock.advance(ms=1)
    assert new.acquire() == 2
    with pytest.raises(ClaimLostError) as lost:
        old.renew()
    assert "processor 0 lost its claim on job job-1" in str(lost.value)
    assert "processor 1 (pid" in str(lost.value) and "epoch 2" in str(lost.value)
    old.release()  # no effect on the new holder's claim
    with pytest.raises(ClaimHeldError):
        _claim(backend_factory, "2").acquire()
    new.release()


def test_the_renewal_thread_reports_the_loss(backend_factory):
    old = _claim(backend_factory, "0", timeout_ms=1500, renew_interval_ms=300)
    old.acquire()
    # Another processor overwrote the claim (as after an expiry seen from another host).
    backend = backend_factory()
    state = backend.read()
    backend.write(dataclasses.replace(state.record, holder="9", token="other", epoch=5), state.tag)
    lost = threading.Event()
    errors: list[BaseException] = []
    old.start_renewing(lambda exc: (errors.append(exc), lost.set()))
    assert lost.wait(10)
    assert isinstance(errors[0], ClaimLostError) and "processor 9" in str(errors[0])
    assert not old.held
    old.release()


def test_the_epoch_is_above_the_floor_even_without_a_claim_document(backend_factory):
    claim = _claim(backend_factory, "0", epoch_floor=lambda: 41)
    assert claim.acquire() == 42
    claim.release()


def test_a_dead_holder_on_this_host_is_replaced_at_once(tmp_path):
    backend = LocalClaimBackend(tmp_path / "_claim")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(gone.stdout)
    holder = JobClaim(backend, "job-1", "0", timeout_ms=60000, renew_interval_ms=1000)
    holder.acquire()
    state = backend.read()
    backend.write(dataclasses.replace(state.record, pid=dead_pid), state.tag)  # its process is gone
    assert JobClaim(backend, "job-1", "1", timeout_ms=60000, renew_interval_ms=1000).acquire() == 2


def test_a_holder_on_another_host_is_only_replaced_after_the_timeout(tmp_path):
    clock = ManualClock()
    backend = LocalClaimBackend(tmp_path / "_claim")
    holder = JobClaim(backend, "job-1", "0", timeout_ms=1200, renew_interval_ms=300)
    holder.acquire()
    state = backend.read()
    backend.write(dataclasses.replace(state.record, host="elsewhere", pid=1), state.tag)
    newcomer = JobClaim(backend, "job-1", "1", timeout_ms=1200, renew_interval_ms=300, clock=clock)
    with pytest.raises(ClaimHeldError):
        newcomer.acquire()
    clock.advance(ms=1100)
    with pytest.raises(ClaimHeldError):
        newcomer.acquire()
    clock.advance(ms=100)
    assert newcomer.acquire() == 2


def test_a_claim_that_changed_while_watched_is_watched_afresh(tmp_path):
    """Only the very same version counts as unrenewed: a renewal between two looks restarts the count."""
    clock = ManualClock()
    backend = LocalClaimBackend(tmp_path / "_claim")
    holder = JobClaim(backend, "job-1", "0", timeout_ms=1200, renew_interval_ms=300, clock=clock)
    holder.acquire()
    newcomer = JobClaim(backend, "job-1", "1", timeout_ms=1200, renew_interval_ms=300, clock=clock)
    with pytest.raises(ClaimHeldError):
        newcomer.acquire()
    clock.advance(ms=1000)
    holder.renew()
    clock.advance(ms=1000)  # 2 s since the first look, 1 s since the renewal
    with pytest.raises(ClaimHeldError):
        newcomer.acquire()
    clock.advance(ms=1200)
    assert newcomer.acquire() == 2
    with pytest.raises(ClaimLostError):
        holder.renew()


def test_the_renewal_thread_gives_the_claim_up_when_storage_stays_unreachable_past_the_timeout(tmp_path):
    """Renewals that keep failing (storage down) lose the claim once the claim's own clock says the
    timeout passed since the last renewal that succeeded, not before."""
    clock = ManualClock()
    backend = LocalClaimBackend(tmp_path / "_claim")
    holder = JobClaim(backend, "job-1", "0", timeout_ms=1200, renew_interval_ms=100, clock=clock)
    holder.acquire()
    failing = threading.Event()

    def unreachable(record: Any, expected_tag: str | None) -> str:
        failing.set()
        raise OSError("storage unreachable")

    backend.write = unreachable  # type: ignore[method-assign]
    lost = threading.Event()
    holder.start_renewing(lambda exc: lost.set())
    try:
        assert failing.wait(10)
        assert not lost.wait(0.5)  # failing for 0 ms of its clock: still held
        clock.advance(ms=1200)
        assert lost.wait(10)
        assert not holder.held and "no renewal succeeded for 1 s" in str(holder.lost)
    finally:
        holder.release()


def test_renew_interval_must_be_at_most_a_third_of_the_timeout(tmp_path):
    from sparza.errors import ConfigError

    with pytest.raises(ConfigError, match="renew.interval.ms"):
        JobClaim(LocalClaimBackend(tmp_path / "_claim"), "job-1", "0", timeout_ms=3000, renew_interval_ms=1500)


_FROZEN_RENEWAL = """
import dataclasses, os, signal, sys
from sparza.coordination import jobclaim

backend = jobclaim.LocalClaimBackend(sys.argv[1])
state = backend.read()
real_fsync = os.fsync

def freeze(fd):  # the host pauses (SIGSTOP, a suspended VM) in the middle of writing the renewal
    os.kill(os.getpid(), signal.SIGSTOP)
    real_fsync(fd)

os.fsync = freeze
try:
    backend.write(dataclasses.replace(state.record, renewals=state.record.renewals + 1), state.tag)
except jobclaim._RaceError:
    sys.exit(3)
sys.exit(0)
"""


def test_a_holder_frozen_in_the_middle_of_a_renewal_does_not_keep_the_claim(tmp_path):
    """The holder's process stops while it writes its renewal (found by tests/runtime/test_claim.py on a loaded
    machine: the local backend's file lock stayed held by the stopped process, so the processor taking the expired
    claim over waited for it forever). The takeover must go through, and the renewal, once the holder wakes, lose."""
    import os
    import signal

    path = tmp_path / "_claim"
    clock = ManualClock()
    holder = JobClaim(LocalClaimBackend(path), "job-1", "0", timeout_ms=3000, renew_interval_ms=500)
    holder.acquire()
    renewal = subprocess.Popen([sys.executable, "-c", _FROZEN_RENEWAL, str(path)])
    try:
        def stopped() -> bool:
            try:
                return Path(f"/proc/{renewal.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
            except OSError:
                return False

        eventually(stopped, 60, 0.05, "the renewal did not reach its write")
        newcomer = JobClaim(LocalClaimBackend(path), "job-1", "1", timeout_ms=3000, renew_interval_ms=500,
                            clock=clock)
        with pytest.raises(ClaimHeldError):
            newcomer.acquire()  # first look: the claim is live
        clock.advance(ms=3000)  # unrenewed for the timeout
        taken: list[object] = []
        thread = threading.Thread(target=lambda: taken.append(newcomer.acquire()), daemon=True)
        thread.start()
        thread.join(30)
        assert taken == [2], "the takeover waited for the frozen holder"
    finally:
        os.kill(renewal.pid, signal.SIGCONT)
    assert renewal.wait(60) == 3  # its renewal lost against the takeover
    state = LocalClaimBackend(path).read()
    assert state is not None and state.record.holder == "1" and state.record.epoch == 2
    with pytest.raises(ClaimLostError):
        holder.renew()
    newcomer.release()
