"""``eventually``: returns the predicate's first truthy value, fails with the message at the deadline, and
lets the predicate's own error through at once."""

from __future__ import annotations

import pytest

from sparza.testing import eventually


def test_returns_the_first_truthy_value() -> None:
    calls = iter([0, None, [], 7, 8])
    assert eventually(lambda: next(calls), timeout=5, interval=0) == 7


def test_fails_with_the_message_after_the_timeout() -> None:
    calls: list[int] = []
    with pytest.raises(AssertionError, match="no batch 3 within 0.05s"):
        eventually(lambda: calls.append(1), timeout=0.05, interval=0.01, message="no batch 3 within 0.05s")
    assert len(calls) >= 2  # it kept asking until the deadline


def test_a_callable_message_shows_the_state_at_the_deadline() -> None:
    state = {"seen": 0}

    def check() -> bool:
        state["seen"] += 1
        return False

    with pytest.raises(AssertionError) as failure:
        eventually(check, timeout=0.03, interval=0.01, message=lambda: f"seen {state['seen']} times")
    assert str(failure.value) == f"seen {state['seen']} times" and state["seen"] >= 2


def test_an_error_in_the_predicate_ends_the_wait_at_once() -> None:
    def exited() -> bool:
        raise AssertionError("sparza run exited (1)")

    with pytest.raises(AssertionError, match="exited"):
        eventually(exited, timeout=60)
