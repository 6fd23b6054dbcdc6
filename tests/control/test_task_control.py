"""TaskControl: end-of-stream counting, watermark reconciliation, idle/quorum, lateness, snapshots."""

from __future__ import annotations

import json

import pytest

from sparza.config import Config
from sparza.control import ControlMessage, ControlStateError, TaskControl, encode_body
from sparza.errors import ConfigError
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStream, SystemStreamPartition

MID = SystemStream("delta", "app-1-mid")
SRC = SystemStream("delta", "src")
OUT = SystemStream("delta", "app-1-next")
MID0 = MID.partition(0)
SRC0, SRC1 = SRC.partition(0), SRC.partition(1)

BASE = {"systems.delta.streams.app-1-mid.samza.intermediate": "true"}


def control(ssps, task_count=2, **extra):
    return TaskControl("Partition 0", task_count, ssps, Config({**BASE, **extra}))


_offsets = iter(range(10**9))


def wm(ssp, producer, ts, count=2):
    return IncomingMessageEnvelope(ssp, str(next(_offsets)), None,
                                   encode_body(ControlMessage.watermark(ts, producer, count)), ts,
                                   type=MessageType.WATERMARK)


def eos(ssp, producer, count=2):
    return IncomingMessageEnvelope(ssp, str(next(_offsets)), None,
                                   encode_body(ControlMessage.end_of_stream(producer, count)),
                                   type=MessageType.END_OF_STREAM)


def user(ssp, ts):
    return IncomingMessageEnvelope(ssp, str(next(_offsets)), b"k", b"v", ts)


def test_end_of_stream_once_every_producer_sent_it():
    tc = control([MID0])
    assert tc.on_envelope(eos(MID0, "Partition 0")) is True
    assert not tc.all_ended()
    assert tc.on_envelope(eos(MID0, "Partition 0")) is True  # a duplicate (replayed upstream batch) counts once
    assert not tc.all_ended()
    tc.on_envelope(eos(MID0, "Partition 1"))
    assert tc.all_ended() and tc.is_ended(MID0)


def test_user_messages_are_not_consumed():
    tc = control([MID0])
    assert tc.on_envelope(user(MID0, 5)) is False


def test_watermark_is_min_over_producers_and_waits_for_all():
    tc = control([MID0])
    tc.on_envelope(wm(MID0, "Partition 0", 100))
    assert tc.watermark() is None  # Partition 1 has not reported
    tc.on_envelope(wm(MID0, "Partition 1", 50))
    assert tc.watermark() == 50
    tc.on_envelope(wm(MID0, "Partition 1", 120))
    assert tc.watermark() == 100
    tc.on_envelope(wm(MID0, "Partition 0", 90))  # older than what Partition 0 sent: ignored
    assert tc.watermark() == 100
    assert tc.advance(0) == 100
    assert tc.advance(1) is None  # unchanged since the last call


def test_ended_producer_neither_stalls_nor_jumps_the_watermark():
    tc = control([MID0])
    tc.on_envelope(wm(MID0, "Partition 1", 10))
    tc.on_envelope(eos(MID0, "Partition 0"))  # ended early, without any watermark
    assert tc.watermark() == 10  # not stalled waiting for Partition 0
    tc.on_envelope(wm(MID0, "Partition 1", 20))
    assert tc.watermark() == 20
    assert not tc.all_ended()


def test_ended_producer_is_left_out_of_the_min():
    tc = control([MID0], task_count=3)
    tc.on_envelope(wm(MID0, "Partition 0", 5, 3))
    tc.on_envelope(wm(MID0, "Partition 1", 50, 3))
    tc.on_envelope(wm(MID0, "Partition 2", 70, 3))
    assert tc.watermark() == 5
    tc.on_envelope(eos(MID0, "Partition 0", 3))
    assert tc.watermark() == 50  # not infinity, not stuck at 5


def test_idle_producer_is_excluded_with_quorum():
    tc = control([MID0], **{"task.watermark.idle.timeout.ms": 1000, "task.watermark.quorum.percentage": 0.5})
    tc.on_envelope(wm(MID0, "Partition 0", 100))
    tc.advance(0)
    assert tc.watermark() is None
    # Partition 1 never reports; before the timeout nothing moves.
    tc.on_envelope(wm(MID0, "Partition 0", 200))
    assert tc.advance(500) is None
    tc.on_envelope(wm(MID0, "Partition 0", 300))
    assert tc.advance(1500) == 300


def test_idle_producer_holds_the_watermark_without_quorum():
    tc = control([MID0], **{"task.watermark.idle.timeout.ms": 1000, "task.watermark.quorum.percentage": 1.0})
    tc.on_envelope(wm(MID0, "Partition 0", 100))
    tc.advance(0)
    tc.on_envelope(wm(MID0, "Partition 0", 300))
    assert tc.advance(5000) is None
    assert tc.watermark() is None


def test_silent_producer_is_excluded_but_one_repeating_its_watermark_is_not():
    tc = control([MID0], **{"task.watermark.idle.timeout.ms": 1000})
    tc.on_envelope(wm(MID0, "Partition 0", 10))
    tc.on_envelope(wm(MID0, "Partition 1", 10))
    assert tc.advance(0) == 10
    tc.on_envelope(wm(MID0, "Partition 0", 40))
    assert tc.advance(500) is None  # Partition 1 is not idle yet
    tc.on_envelope(wm(MID0, "Partition 1", 10))  # alive, still at 10: it may still write data at 10
    tc.on_envelope(wm(MID0, "Partition 0", 50))
    assert tc.advance(1200) is None
    tc.on_envelope(wm(MID0, "Partition 0", 60))  # Partition 1 silent since 1200
    assert tc.advance(2300) == 60


def test_source_watermark_is_event_time_minus_lateness_and_lateness_is_detected():
    tc = control([SRC0], **{"systems.delta.streams.src.watermark.lateness.ms": 10})
    tc.on_envelope(user(SRC0, 100))
    assert tc.watermark() == 90
    late, ok = user(SRC0, 85), user(SRC0, 95)
    tc.on_envelope(late)
    tc.on_envelope(ok)
    assert tc.is_late(late) and not tc.is_late(ok)
    assert tc.on_late(late) is None
    assert tc.late_count == 1
    assert tc.metrics.snapshot()["control"]["late-messages"] == 1


def test_late_messages_route_to_the_configured_stream():
    tc = control([SRC0], **{"task.late.messages.policy": "route", "task.late.messages.stream": "delta.late"})
    tc.on_envelope(user(SRC0, 100))
    late = user(SRC0, 3)
    assert tc.is_late(late)
    routed = tc.on_late(late)
    assert routed is not None
    assert (routed.system_stream, routed.message, routed.timestamp) == (SystemStream("delta", "late"), b"v", 3)
    assert tc.late_routed == 1


def test_route_policy_without_stream_is_a_config_error():
    with pytest.raises(ConfigError, match="task.late.messages.stream"):
        control([SRC0], **{"task.late.messages.policy": "route"})


def test_bad_quorum_is_a_config_error():
    with pytest.raises(ConfigError, match="task.watermark.quorum.percentage"):
        control([SRC0], **{"task.watermark.quorum.percentage": 1.5})


def test_task_watermark_is_min_over_ssps_and_ended_ssps_are_left_out():
    tc = control([SRC0, SRC1])
    tc.on_envelope(user(SRC0, 100))
    assert tc.watermark() is None
    tc.on_envelope(user(SRC1, 40))
    assert tc.watermark() == 40
    tc.on_ssp_exhausted(SRC1)
    assert tc.watermark() == 100
    assert not tc.all_ended()
    tc.on_ssp_exhausted(SRC0)
    assert tc.all_ended()


def test_idle_source_partition_is_left_out_after_the_timeout():
    tc = control([SRC0, SRC1], **{"task.watermark.idle.timeout.ms": 100})
    tc.on_envelope(user(SRC0, 100))
    assert tc.advance(0) is None
    tc.on_envelope(user(SRC0, 200))
    assert tc.advance(150) == 200


def test_bare_end_of_stream_on_a_source_ends_it():
    tc = control([SRC0])
    assert tc.on_envelope(IncomingMessageEnvelope(SRC0, "9", None, b"", type=MessageType.END_OF_STREAM))
    assert tc.all_ended()


def test_outgoing_writes_watermark_then_end_of_stream_to_every_partition():
    tc = control([SRC0], task_count=2, **{"task.intermediate.outputs": "delta.app-1-next"})
    assert tc.outgoing(0, {OUT: 3}) == []  # no watermark yet, not ended
    tc.on_envelope(user(SRC0, 100))
    out = tc.outgoing(5, {OUT: 3})
    assert [(e.partition, e.type) for e in out] == [(p, MessageType.WATERMARK) for p in range(3)]
    assert json.loads(out[0].message) == {"version": 1, "taskName": "Partition 0", "taskCount": 2, "timestamp": 100}
    with pytest.raises(ControlStateError, match="partition count"):
        tc.outgoing(6, {})
    tc.on_ssp_exhausted(SRC0)
    out = tc.outgoing(6, {OUT: 3})
    assert [e.type for e in out].count(MessageType.END_OF_STREAM) == 3
    assert all(e.system_stream == OUT for e in out)


def test_unknown_ssp_is_refused():
    tc = control([MID0])
    with pytest.raises(ControlStateError, match="not one of its inputs"):
        tc.on_envelope(user(MID.partition(7), 1))


def test_snapshot_restores_end_of_stream_counts_and_watermarks():
    cfg = Config({**BASE, "task.watermark.idle.timeout.ms": 1000})
    tc = TaskControl("Partition 0", 2, [MID0, SRC0], cfg)
    tc.on_envelope(eos(MID0, "Partition 0"))
    tc.on_envelope(wm(MID0, "Partition 1", 70))
    tc.on_envelope(user(SRC0, 80))
    tc.on_envelope(user(SRC0, 1))
    tc.on_late(user(SRC0, 1))
    assert tc.advance(10) == 70
    snap = json.loads(json.dumps(tc.snapshot()))  # JSON-able
    again = TaskControl.restore(snap, "Partition 0", 2, [MID0, SRC0], cfg)
    assert again.watermark() == 70 and again.late_count == 1
    assert again.advance(11) is None  # already reported before the restart
    again.on_envelope(eos(MID0, "Partition 1"))  # only the missing producer's end-of-stream is needed
    assert again.is_ended(MID0)
    again.on_ssp_exhausted(SRC0)
    assert again.all_ended()


def test_restore_keeps_the_watermark_monotonic_across_restarts():
    tc = control([MID0])
    tc.on_envelope(wm(MID0, "Partition 0", 100))
    tc.on_envelope(wm(MID0, "Partition 1", 100))
    again = TaskControl.restore(tc.snapshot(), "Partition 0", 2, [MID0], Config(BASE))
    again.on_envelope(wm(MID0, "Partition 0", 50))  # a replayed old watermark
    assert again.watermark() == 100


def test_restore_drops_ssps_no_longer_owned_and_refuses_other_versions():
    tc = control([MID0, SRC0])
    again = TaskControl.restore(tc.snapshot(), "Partition 0", 2, [SRC1], Config(BASE))
    assert again.snapshot()["ssps"].keys() == {str(SRC1)}
    assert TaskControl.restore(None, "Partition 0", 2, [SRC0], Config()).watermark() is None
    with pytest.raises(ControlStateError, match="version"):
        TaskControl.restore({"version": 99}, "Partition 0", 2, [SRC0], Config())


def test_ssp_parse_of_stream_names_with_dashes_and_dots():
    ssp = SystemStreamPartition("delta", "a.b-c", 2)
    tc = TaskControl("Partition 0", 1, [ssp], Config())
    again = TaskControl.restore(tc.snapshot(), "Partition 0", 1, [ssp], Config())
    assert again.is_ended(ssp) is False


def test_end_of_stream_is_sent_once_and_again_after_a_restore_from_before_it():
    tc = control([SRC0], task_count=1, **{"task.intermediate.outputs": "delta.app-1-next"})
    tc.on_envelope(user(SRC0, 5))
    tc.on_ssp_exhausted(SRC0)
    before = tc.snapshot()
    assert [e.type for e in tc.outgoing(1, {OUT: 1})] == [MessageType.WATERMARK, MessageType.END_OF_STREAM]
    assert tc.outgoing(2, {OUT: 1}) == []
    assert TaskControl.restore(tc.snapshot(), "Partition 0", 1, [SRC0], tc_config()).outgoing(3, {OUT: 1}) == []
    replay = TaskControl.restore(before, "Partition 0", 1, [SRC0], tc_config())
    assert len(replay.outgoing(1, {OUT: 1})) == 2


def tc_config():
    return Config({**BASE, "task.intermediate.outputs": "delta.app-1-next"})


def test_bind_metrics_moves_reporting_to_a_new_registry():
    from sparza.metrics import MetricsRegistry

    tc = control([SRC0])
    tc.on_envelope(user(SRC0, 100))
    fresh = MetricsRegistry()
    tc.bind_metrics(fresh)
    tc.on_late(user(SRC0, 1))
    snap = fresh.snapshot()["control"]
    assert snap["late-messages"] == 1 and snap["task-watermark"] == 100
