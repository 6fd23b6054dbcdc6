"""Samza's drain control message (type byte 3) and the drain bookkeeping of a task: exact bodies both ways,
errors, producers counted per partition and per drain, a newer drain replacing an older one's count, a restart
keeping what was read, TaskControl routing type 3 to its tracker, writing a task's drain once (after its
watermark) and nothing after it, and Samza's aggregate-then-rebroadcast. The runtime's part (who drains when)
is tested through TestRunner in tests/api/test_drain_runner.py."""

from __future__ import annotations

import json

import pytest

from sparza.config import Config
from sparza.control import ControlStateError, TaskControl
from sparza.control.drain import (
    DRAIN_TYPE,
    DrainMessage,
    DrainTracker,
    decode_drain,
    drain_from_wire,
    drain_to_wire,
    encode_drain,
)
from sparza.control.messages import ControlMessageError, decode_body, samza_aggregate_partition
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStream, SystemStreamPartition
from sparza.task import DrainListenerTask

MID = SystemStream("delta", "mid")
SRC = SystemStream("delta", "src")
INTERMEDIATE = "systems.delta.streams.mid.samza.intermediate"


def test_drain_bodies_are_samzas_and_sparzas_and_both_are_read() -> None:
    message = DrainMessage("run-7", "Partition 0", 3)
    assert encode_drain(message, "samza") == b'{"taskName":"Partition 0","version":1,"runId":"run-7"}'
    assert encode_drain(message) == b'{"version":1,"taskName":"Partition 0","taskCount":3,"runId":"run-7"}'
    assert decode_drain(encode_drain(message)) == message
    assert decode_drain(encode_drain(message, "samza")) == DrainMessage("run-7", "Partition 0", 0)
    assert decode_drain(b'{"task-name":null,"version":1,"run-id":"r"}') == DrainMessage("r", None, 0)
    wire = drain_to_wire(message, "samza")
    assert wire[0] == DRAIN_TYPE == MessageType.DRAIN == 3
    assert drain_from_wire(wire) == DrainMessage("run-7", "Partition 0", 0)
    for bad, reason in ((b"nope", "not JSON"), (b"[1]", "not a JSON object"), (b'{"version":1}', "needs a runId"),
                        (b'{"runId":"r","version":2}', "version 2"), (b'{"runId":"r","taskCount":-1}', "taskCount")):
        with pytest.raises(ControlMessageError, match=reason):
            decode_drain(bad)
    with pytest.raises(ControlMessageError, match="not a drain message"):
        drain_from_wire(b"\x01{}")
    # A watermark/end-of-stream decoder given a drain says where drains are read.
    with pytest.raises(ControlMessageError, match="decode_drain"):
        decode_body(DRAIN_TYPE, wire[1:])


def test_a_partition_drains_when_every_producer_of_that_drain_sent_it() -> None:
    mid0, mid1 = MID.partition(0), MID.partition(1)
    tracker = DrainTracker([mid0, mid1, SRC.partition(0)], {mid0: 2, mid1: 2})
    assert not tracker.on_message(mid0, DrainMessage("r1", "Partition 0", 2))
    assert not tracker.on_message(mid0, DrainMessage("r1", "Partition 0", 2))  # a replayed batch's duplicate
    assert tracker.run_of(mid0) == "r1" and not tracker.is_drained(mid0, "r1")
    # A newer drain starts over (an older drain's count never completes a newer one).
    assert not tracker.on_message(mid0, DrainMessage("r2", "Partition 1", 2))
    snapshot = json.loads(json.dumps(tracker.snapshot()))
    again = DrainTracker.restore(snapshot, [mid0, mid1], {mid0: 2, mid1: 2})  # a restart keeps what it read
    assert again.on_message(mid0, DrainMessage("r2", "Partition 0", 2))
    assert again.is_drained(mid0, "r2") and not again.is_drained(mid0, "r1") and not again.is_drained(mid1, "r2")
    assert again.on_message(mid1, DrainMessage("r2", None))  # an aggregator's re-broadcast settles it directly
    # The body's count stands in for a missing config count, and the bigger one wins.
    counted = DrainTracker([mid0])
    assert not counted.on_message(mid0, DrainMessage("r", "Partition 0", 2))
    assert counted.on_message(mid0, DrainMessage("r", "Partition 1", 2))
    with pytest.raises(ControlMessageError, match="not an input"):
        tracker.on_message(SystemStream("delta", "other").partition(0), DrainMessage("r2", "Partition 0"))
    done = DrainTracker([mid0])
    done.completed, done.sent = "r2", "r2"
    restored = DrainTracker.restore(json.loads(json.dumps(done.snapshot())), [mid0])
    assert (restored.completed, restored.sent) == ("r2", "r2")


def _drain(ssp: SystemStreamPartition, run: str, producer: str | None, count: int = 2,
           body_format: str = "sparza") -> IncomingMessageEnvelope:
    return IncomingMessageEnvelope(ssp, "0", None, encode_drain(DrainMessage(run, producer, count), body_format), 0,
                                   type=MessageType.DRAIN)


def test_task_control_takes_drain_messages_and_writes_its_own_drain_once_after_its_watermark() -> None:
    out = SystemStream("delta", "next")
    config = Config({INTERMEDIATE: "true", "task.intermediate.outputs": "delta.next"})
    mid0 = MID.partition(0)
    tc = TaskControl("Partition 0", 3, [mid0], config)
    assert tc.on_envelope(_drain(mid0, "r", "Partition 0")) is True   # consumed, never delivered
    assert not tc.drains.is_drained(mid0, "r")
    tc.on_envelope(_drain(mid0, "r", "Partition 1"))
    assert tc.drains.is_drained(mid0, "r")
    tc.on_envelope(IncomingMessageEnvelope(mid0, "1", None, b'{"version":1,"taskName":null,"timestamp":500}', 500,
                                           type=MessageType.WATERMARK))
    tc.advance(0)
    sent = tc.outgoing(1_000, {out: 2}, drained="r")
    assert [(e.type, e.partition) for e in sent] == [(MessageType.WATERMARK, 0), (MessageType.WATERMARK, 1),
                                                      (MessageType.DRAIN, 0), (MessageType.DRAIN, 1)]
    assert decode_drain(sent[-1].message) == DrainMessage("r", "Partition 0", 3)
    snapshot = tc.snapshot()
    drains = tc.drains.snapshot()
    assert tc.outgoing(2_000, {out: 2}, drained="r") == []   # drained: nothing more while the drain lasts
    # A replay restored from the checkpoint before it writes it again (idempotent outputs); one after it does not.
    replay = TaskControl.restore(snapshot, "Partition 0", 3, [mid0], config, drains={**drains, "sent": None})
    assert [e.type for e in replay.outgoing(1_000, {out: 2}, drained="r")].count(MessageType.DRAIN) == 2
    after = TaskControl.restore(snapshot, "Partition 0", 3, [mid0], config, drains=drains)
    assert after.outgoing(2_000, {out: 2}, drained="r") == []
    # The job's next run (no drain) writes watermarks again.
    assert [e.type for e in after.outgoing(3_000, {out: 2})] == [MessageType.WATERMARK] * 2


def test_a_samza_drain_without_a_task_count_needs_the_configured_count() -> None:
    mid0 = MID.partition(0)
    tc = TaskControl("Partition 0", 1, [mid0], Config({INTERMEDIATE: "true"}))
    with pytest.raises(ControlStateError, match="control.producer.count"):
        tc.on_envelope(_drain(mid0, "r", "Partition 0", 0, "samza"))


def test_samza_protocol_drain_goes_to_the_aggregate_partition_and_is_rebroadcast_once() -> None:
    n, m = 2, 3
    agg = samza_aggregate_partition("mid", m)
    fmt = {"systems.delta.streams.mid.control.format": "samza"}
    ups = [TaskControl(f"Partition {i}", n, [SRC.partition(i)], Config({"task.intermediate.outputs": "delta.mid",
                                                                       **fmt}))
           for i in range(n)]
    down_cfg = Config({INTERMEDIATE: "true", "systems.delta.streams.mid.control.producer.count": str(n), **fmt})
    downs = [TaskControl(f"Partition {j}", m, [MID.partition(j)], down_cfg) for j in range(m)]
    sent = [e for up in ups for e in up.outgoing(1_000, {MID: m}, drained="r")]
    drains = [e for e in sent if e.type == MessageType.DRAIN]
    assert [e.partition for e in drains] == [agg] * n
    assert {json.loads(e.message)["runId"] for e in drains} == {"r"}
    assert all(set(json.loads(e.message)) == {"taskName", "version", "runId"} for e in drains)  # Samza's body
    for env in drains:
        downs[agg].on_envelope(IncomingMessageEnvelope(MID.partition(agg), "0", None, env.message, 0,
                                                       type=MessageType.DRAIN))
    assert downs[agg].drains.is_drained(MID.partition(agg), "r")
    rebroadcast = [e for e in downs[agg].outgoing(2_000, {MID: m}) if e.type == MessageType.DRAIN]
    assert sorted(e.partition for e in rebroadcast) == [p for p in range(m) if p != agg]
    for env in rebroadcast:
        down = downs[env.partition]
        down.on_envelope(IncomingMessageEnvelope(MID.partition(env.partition), "0", None, env.message, 0,
                                                 type=MessageType.DRAIN))
        assert down.drains.is_drained(MID.partition(env.partition), "r")
    assert [e for e in downs[agg].outgoing(3_000, {MID: m}) if e.type == MessageType.DRAIN] == []  # once


def test_drain_listener_is_a_task_protocol() -> None:
    class Flushing:
        def on_drain(self, collector: object, coordinator: object) -> None:
            pass

    assert isinstance(Flushing(), DrainListenerTask)
    assert not isinstance(object(), DrainListenerTask)
