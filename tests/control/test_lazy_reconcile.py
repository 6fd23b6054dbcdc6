"""Control messages are reconciled once per run, not once per message (per message, 64 x 64 tasks spent a
third of a batch on them), and that laziness is invisible: at every point where anything reads the state, a task
that settles lazily agrees with one forced to settle after every message."""

from __future__ import annotations

import random

import pytest

from sparza.config import Config
from sparza.control import ControlMessage, TaskControl, encode_body
from sparza.control.reconcile import SspControlState
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStream

MID = SystemStream("delta", "app-1-mid")
SRC = SystemStream("delta", "src")
CONFIG = {"systems.delta.streams.app-1-mid.samza.intermediate": "true"}


def _env(ssp, mtype, body, ts=None):
    return IncomingMessageEnvelope(ssp, "0", None, body, ts, type=mtype)


def test_a_run_of_n_watermarks_is_reconciled_once_not_n_times(monkeypatch):
    calls = []
    real = SspControlState.recompute

    def counting(self, now_ms, idle):
        calls.append(now_ms)
        return real(self, now_ms, idle)

    monkeypatch.setattr(SspControlState, "recompute", counting)
    n = 64
    ssp = MID.partition(0)
    control = TaskControl("Partition 0", n, [ssp], Config(CONFIG))
    for p in range(n):
        body = encode_body(ControlMessage.watermark(1_000 + p, f"Partition {p}", n))
        assert control.on_envelope(_env(ssp, MessageType.WATERMARK, body, 1_000 + p))
    assert calls == []  # nothing read the state yet
    assert control.watermark() == 1_000
    assert len(calls) == 1  # one recompute for the whole run (it was n, each O(n): O(n^2) per task)


def _random_run(rng: random.Random, producers: int, length: int, with_source: bool) -> list[tuple]:
    """Envelopes and observations: watermarks (sometimes stale), end-of-streams, a rescaled taskCount,
    bare source messages, user messages, and reads in between."""
    clock = {p: 0 for p in range(producers)}
    steps: list[tuple] = []
    for _ in range(length):
        roll = rng.random()
        ssp = MID.partition(rng.randrange(2))
        p = rng.randrange(producers + 1)  # producers + 1: a producer only a rescaled upstream has
        count = producers + 1 if p == producers or rng.random() < 0.03 else producers
        if roll < 0.55:
            clock[p % producers] += rng.randrange(-20, 60)
            ts = 1_000 + clock[p % producers]
            steps.append(("env", _env(ssp, MessageType.WATERMARK,
                                      encode_body(ControlMessage.watermark(ts, f"Partition {p}", count)), ts)))
        elif roll < 0.62:
            steps.append(("env", _env(ssp, MessageType.END_OF_STREAM,
                                      encode_body(ControlMessage.end_of_stream(f"Partition {p}", count)))))
        elif roll < 0.64:
            steps.append(("env", _env(ssp, MessageType.WATERMARK,
                                      encode_body(ControlMessage.watermark(900 + rng.randrange(400), None, 0)))))
        elif roll < 0.645:  # a bare end-of-stream (Samza's aggregator re-broadcast): ends the SSP at once
            bare = encode_body(ControlMessage.end_of_stream(None, 0))
            steps.append(("env", _env(ssp, MessageType.END_OF_STREAM, bare)))
        elif roll < 0.80:
            if with_source:
                steps.append(("env", _env(SRC.partition(0), MessageType.USER, b"v", 1_000 + rng.randrange(500))))
        elif roll < 0.95:
            steps.append(("read",))
        else:
            steps.append(("advance",))
    return steps


def _observe(control: TaskControl, ssps) -> tuple:
    return (control.watermark(), tuple(control.ssp_watermark(s) for s in ssps),
            tuple(control.is_ended(s) for s in ssps), control.all_ended())


@pytest.mark.parametrize("seed", range(60))
def test_lazy_settling_reads_exactly_what_settling_after_every_message_reads(seed):
    rng = random.Random(seed)
    ssps = [MID.partition(0), MID.partition(1), SRC.partition(0)]
    if seed % 3 == 0:
        ssps = ssps[:2]  # intermediate inputs only: the task watermark moves with every control message
    lazy = TaskControl("Partition 0", 3, ssps, Config(CONFIG))
    eager = TaskControl("Partition 0", 3, ssps, Config(CONFIG))
    now = 10_000
    for step in _random_run(rng, producers=rng.choice([2, 3, 5]), length=300, with_source=len(ssps) == 3):
        if step[0] == "env":
            envelope = step[1]
            assert lazy.on_envelope(envelope) == eager.on_envelope(envelope)
            eager.watermark()  # forces a settle after every message: the old, eager behaviour
            if envelope.type == MessageType.USER:
                assert lazy.is_late(envelope) == eager.is_late(envelope)
        elif step[0] == "read":
            assert _observe(lazy, ssps) == _observe(eager, ssps)
        else:
            now += 1_000
            assert lazy.advance(now) == eager.advance(now)
            assert lazy.outgoing(now, {}) == eager.outgoing(now, {})
    assert lazy.snapshot() == eager.snapshot()


@pytest.mark.parametrize("rescaled_first", [False, True])
def test_a_rescaled_upstream_in_the_middle_of_a_run_reads_as_if_settled_per_message(rescaled_first):
    """Two producers report 100 (the SSP watermark becomes 100), then a message says the upstream now
    has three tasks and the third reports 50: the watermark stays 100 (it is monotonic), exactly as
    when every message is settled on its own."""
    ssp = MID.partition(0)
    control = TaskControl("Partition 0", 1, [ssp], Config(CONFIG))
    run = [ControlMessage.watermark(100, "Partition 0", 2), ControlMessage.watermark(100, "Partition 1", 2),
           ControlMessage.watermark(50, "Partition 2", 3)]
    if rescaled_first:
        run = run[2:] + run[:2]
    for message in run:
        control.on_envelope(_env(ssp, MessageType.WATERMARK, encode_body(message), message.timestamp))
    assert control.ssp_watermark(ssp) == (50 if rescaled_first else 100)
