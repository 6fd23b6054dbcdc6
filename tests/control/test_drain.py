"""Samza's drain control message (type byte 3) and the drain bookkeeping, as a library (not wired into the
runtime yet): exact bodies both ways, errors, producers counted per partition, another run's messages ignored,
a restart keeps the counts. The operators' drain callback is tested in tests/api/test_operators.py."""

from __future__ import annotations

import json

import pytest

from sparza.control.drain import (
    DRAIN_TYPE,
    DrainMessage,
    DrainTracker,
    decode_drain,
    drain_from_wire,
    drain_to_wire,
    encode_drain,
)
from sparza.control.messages import ControlMessageError, decode_body
from sparza.streams import SystemStreamPartition


def test_drain_bodies_are_samzas_and_sparzas_and_both_are_read() -> None:
    message = DrainMessage("run-7", "Partition 0", 3)
    assert encode_drain(message, "samza") == b'{"taskName":"Partition 0","version":1,"runId":"run-7"}'
    assert encode_drain(message) == b'{"version":1,"taskName":"Partition 0","taskCount":3,"runId":"run-7"}'
    assert decode_drain(encode_drain(message)) == message
    assert decode_drain(encode_drain(message, "samza")) == DrainMessage("run-7", "Partition 0", 0)
    assert decode_drain(b'{"task-name":null,"version":1,"run-id":"r"}') == DrainMessage("r", None, 0)
    wire = drain_to_wire(message, "samza")
    assert wire[0] == DRAIN_TYPE == 3 and drain_from_wire(wire) == DrainMessage("run-7", "Partition 0", 0)
    for bad, reason in ((b"nope", "not JSON"), (b"[1]", "not a JSON object"), (b'{"version":1}', "needs a runId"),
                        (b'{"runId":"r","version":2}', "version 2"), (b'{"runId":"r","taskCount":-1}', "taskCount")):
        with pytest.raises(ControlMessageError, match=reason):
            decode_drain(bad)
    with pytest.raises(ControlMessageError, match="not a drain message"):
        drain_from_wire(b"\x01{}")
    # The runtime still refuses a drain on an intermediate stream (not wired yet), naming what to do.
    with pytest.raises(ControlMessageError, match="drain"):
        decode_body(DRAIN_TYPE, wire[1:])


def test_a_partition_drains_when_every_producer_of_the_run_sent_its_drain() -> None:
    mid = SystemStreamPartition("delta", "mid", 0)
    src = SystemStreamPartition("delta", "src", 0)
    tracker = DrainTracker("r2", [mid, src], {mid: 2})
    assert not tracker.on_message(mid, DrainMessage("r1", "Partition 0", 2))  # an older drain's leftover
    assert not tracker.on_message(mid, DrainMessage("r2", "Partition 0", 2))
    assert not tracker.on_message(mid, DrainMessage("r2", "Partition 0", 2))  # a replayed batch's duplicate
    snapshot = json.loads(json.dumps(tracker.snapshot()))
    again = DrainTracker.restore(snapshot, "r2", [mid, src], {mid: 2})  # a restart keeps what it read
    assert again.on_message(mid, DrainMessage("r2", "Partition 1", 2)) and again.is_drained(mid)
    assert not again.all_drained()
    again.on_source_drained(src)
    assert again.all_drained()
    assert not DrainTracker.restore(snapshot, "r3", [mid, src]).is_drained(mid)  # a new drain starts over
    assert DrainTracker("r", [mid]).on_message(mid, DrainMessage("r", None))  # an aggregator's re-broadcast
    with pytest.raises(ControlMessageError, match="not an input"):
        tracker.on_message(SystemStreamPartition("delta", "other", 0), DrainMessage("r2", "Partition 0"))
