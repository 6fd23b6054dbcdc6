"""The one coordination scheduler: periodic named actions that survive errors and never overlap."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sparza.coordination import Scheduler
from sparza.testing import eventually


def wait(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    eventually(cond, timeout_s, 0.01, f"the condition did not hold within {timeout_s} s")


def test_failing_action_keeps_running_and_reports_errors() -> None:
    errors: list[tuple[str, str]] = []
    calls = []

    def flaky() -> None:
        calls.append(1)
        raise ConnectionError("storage down")

    sch = Scheduler("t", on_error=lambda name, exc: errors.append((name, str(exc))))
    sch.every("flaky", 20, flaky)
    sch.start()
    try:
        wait(lambda: len(calls) >= 3)
    finally:
        sch.stop()
    assert errors[0] == ("flaky", "storage down") and len(errors) >= 3


def test_an_action_never_overlaps_itself_and_does_not_block_others() -> None:
    running = 0
    overlaps = 0
    release = threading.Event()
    fast_calls: list[int] = []
    lock = threading.Lock()

    def slow() -> None:
        nonlocal running, overlaps
        with lock:
            running += 1
            overlaps += running > 1
        release.wait(5)
        with lock:
            running -= 1

    sch = Scheduler("t")
    sch.every("slow", 10, slow)
    sch.every("fast", 10, lambda: fast_calls.append(1))
    sch.start()
    try:
        wait(lambda: len(fast_calls) >= 5)  # fast keeps running while slow is stuck
        release.set()
    finally:
        sch.stop()
    assert overlaps == 0


def test_run_soon_and_cancel() -> None:
    calls: list[str] = []
    sch = Scheduler("t")
    sch.every("rare", 3_600_000, lambda: calls.append("rare"), initial_delay_ms=3_600_000)
    sch.every("probe", 3_600_000, lambda: calls.append("probe"), initial_delay_ms=3_600_000)
    sch.start()
    try:
        sch.run_soon("rare")
        wait(lambda: calls == ["rare"])
        sch.cancel("rare")
        assert not sch.has("rare")
        sch.run_soon("rare")  # cancelled: nothing runs
        sch.run_soon("probe")  # due after it: once the probe ran, the timer has passed where "rare" would be
        wait(lambda: "probe" in calls)
    finally:
        sch.stop()  # waits for runs in progress
    assert calls == ["rare", "probe"]
