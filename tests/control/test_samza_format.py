"""Samza's control-message protocol: Samza's bodies (no taskCount) are read and, where a
stream is configured for it, written byte for byte as Samza's ``IntermediateMessageSerde`` does; the
upstream task count then comes from ``control.producer.count``; messages go to the stream's aggregate
partition, whose reader re-broadcasts what it reconciled to the other partitions (Samza's O(n))."""

from __future__ import annotations

import json

import pytest

from sparza.config import Config
from sparza.control import ControlMessage, ControlStateError, TaskControl, decode_body, encode_body
from sparza.control.messages import samza_aggregate_partition
from sparza.errors import ConfigError
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStream

SRC = SystemStream("delta", "events")
MID = SystemStream("delta", "mid")
FMT = "systems.delta.streams.mid.control.format"
COUNT = "systems.delta.streams.mid.control.producer.count"
INTERMEDIATE = "systems.delta.streams.mid.samza.intermediate"


def test_samza_bodies_are_exactly_what_samza_writes():
    # Samza 1.x, Jackson 2.13: {"timestamp":123,"taskName":"Partition 0","version":1} (reference notes, 5.1)
    assert encode_body(ControlMessage.watermark(123, "Partition 0", 4), "samza") == \
        b'{"timestamp":123,"taskName":"Partition 0","version":1}'
    assert encode_body(ControlMessage.end_of_stream("Partition 0", 4, 99), "samza") == \
        b'{"taskName":"Partition 0","version":1}'
    assert encode_body(ControlMessage.end_of_stream(None, 0), "samza") == b'{"taskName":null,"version":1}'
    with pytest.raises(ValueError, match="unknown control-message format 'kafka'"):
        encode_body(ControlMessage.end_of_stream(None, 0), "kafka")


@pytest.mark.parametrize(("mtype", "body", "task", "ts"), [
    (1, b'{"timestamp":123,"taskName":"Partition 0","version":1}', "Partition 0", 123),
    (2, b'{"taskName":"Partition 7","version":1}', "Partition 7", None),
    (1, b'{"timestamp":5,"task-name":"Partition 1"}', "Partition 1", 5),   # the creators' dashed spelling
    (2, b'{"taskName":null,"version":1}', None, None),                       # an aggregator's re-broadcast
])
def test_samza_bodies_are_read_without_a_task_count(mtype, body, task, ts):
    msg = decode_body(mtype, body)
    assert (msg.task_name, msg.task_count, msg.timestamp) == (task, 0, ts)


def test_aggregate_partition_is_javas_string_hash_code_modulo_the_partitions():
    # Known Java values: "hello".hashCode() == 99162322; "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert samza_aggregate_partition("hello", 10**9) == 99162322
    assert samza_aggregate_partition("hello", 7) == 99162322 % 7
    assert samza_aggregate_partition("polygenelubricants", 10**10) == 2**31
    assert samza_aggregate_partition("polygenelubricants", 5) == 3  # Java: -2147483648 % 5 == -3, abs -> 3
    # UTF-16 code units, as Java: U+1F600 is the surrogate pair D83D DE00
    assert samza_aggregate_partition("\U0001F600", 10**9) == 0xD83D * 31 + 0xDE00


def test_a_samza_protocol_input_without_a_producer_count_fails_at_start_naming_the_key():
    with pytest.raises(ConfigError, match=COUNT.replace(".", r"\.")):
        TaskControl("Partition 0", 2, [MID.partition(0)], Config({INTERMEDIATE: "true", FMT: "samza"}))
    with pytest.raises(ConfigError, match=r"control\.format"):
        TaskControl("Partition 0", 2, [MID.partition(0)], Config({INTERMEDIATE: "true", FMT: "kafka"}))


def test_samza_bodies_on_a_stream_without_a_producer_count_fail_naming_the_key():
    control = TaskControl("Partition 0", 2, [MID.partition(0)], Config({INTERMEDIATE: "true"}))
    env = IncomingMessageEnvelope(MID.partition(0), "0", None, b'{"timestamp":1,"taskName":"Partition 3","version":1}',
                                  1, type=MessageType.WATERMARK)
    with pytest.raises(ControlStateError, match=r"Partition 3.*set systems\.delta\.streams\.mid\.control\."
                                                r"producer\.count"):
        control.on_envelope(env)


def test_the_configured_count_stands_in_for_the_missing_task_count():
    control = TaskControl("Partition 0", 1, [MID.partition(0)], Config({INTERMEDIATE: "true", COUNT: "2"}))
    ssp = MID.partition(0)
    for mtype, body in ((1, b'{"timestamp":10,"taskName":"Partition 0","version":1}'),
                        (2, b'{"taskName":"Partition 0","version":1}')):
        control.on_envelope(IncomingMessageEnvelope(ssp, "0", None, body, type=MessageType(mtype)))
    assert not control.is_ended(ssp)  # one of the two upstream tasks ended
    assert control.ssp_watermark(ssp) is None  # and the other has not reported yet
    control.on_envelope(IncomingMessageEnvelope(ssp, "0", None, b'{"taskName":"Partition 1","version":1}',
                                                type=MessageType.END_OF_STREAM))
    assert control.is_ended(ssp)


def _deliver(outgoing, stream, controls):
    """Route envelopes by partition to the TaskControl reading it, as a stream would."""
    by_partition = {}
    for env in outgoing:
        assert env.system_stream == stream
        by_partition.setdefault(env.partition, []).append(env)
    for partition, envs in sorted(by_partition.items()):
        for env in envs:
            assert controls[partition].on_envelope(IncomingMessageEnvelope(
                stream.partition(partition), "0", None, env.message, env.timestamp, type=env.type))
    return by_partition


def test_samza_protocol_upstream_to_aggregate_partition_and_downstream_rebroadcast():
    """3 upstream tasks -> 4 intermediate partitions in Samza's protocol: each upstream task writes 1
    message per batch (not 4); the aggregate partition's reader re-broadcasts to the other 3."""
    n, m = 3, 4
    agg = samza_aggregate_partition("mid", m)
    up_cfg = Config({"task.intermediate.outputs": "delta.mid", FMT: "samza",
                     "systems.delta.streams.events.bounded": "true"})
    down_cfg = Config({INTERMEDIATE: "true", FMT: "samza", COUNT: str(n)})
    ups = [TaskControl(f"Partition {i}", n, [SRC.partition(i)], up_cfg) for i in range(n)]
    downs = [TaskControl(f"Partition {j}", m, [MID.partition(j)], down_cfg) for j in range(m)]
    assert downs[0].streams_written() == (MID,)
    for i, up in enumerate(ups):
        up.on_envelope(IncomingMessageEnvelope(SRC.partition(i), "0", None, b"x", 100 + i))
    sent = [env for up in ups for env in up.outgoing(1_000, {MID: m})]
    assert [env.partition for env in sent] == [agg] * n
    assert all(set(json.loads(env.message)) == {"timestamp", "taskName", "version"} for env in sent)
    _deliver(sent, MID, downs)
    assert downs[agg].ssp_watermark(MID.partition(agg)) == 100
    # the aggregate partition's reader re-broadcasts, nobody else writes anything
    rebroadcast = [env for down in downs for env in down.outgoing(1_000, {MID: m})]
    assert sorted(env.partition for env in rebroadcast) == sorted(p for p in range(m) if p != agg)
    assert {env.message for env in rebroadcast} == {b'{"timestamp":100,"taskName":null,"version":1}'}
    _deliver(rebroadcast, MID, downs)
    assert [down.watermark() for down in downs] == [100] * m
    # unchanged watermark: nothing is re-broadcast again
    assert [env for down in downs for env in down.outgoing(2_000, {MID: m})] == []

    # every upstream input ends: one end-of-stream each, then the aggregator's, then every partition ended
    for i, up in enumerate(ups):
        up.on_ssp_exhausted(SRC.partition(i))
    sent = [env for up in ups for env in up.outgoing(3_000, {MID: m})]
    assert {env.partition for env in sent} == {agg}
    assert [env.type for env in sent].count(MessageType.END_OF_STREAM) == n
    _deliver(sent, MID, downs)
    snapshot = downs[agg].snapshot()
    rebroadcast = [env for down in downs for env in down.outgoing(3_000, {MID: m})]
    # the watermark rose as producers ended (102: the last one's), then end-of-stream, to each other partition
    assert {(env.type, env.message) for env in rebroadcast} == {
        (MessageType.WATERMARK, b'{"timestamp":102,"taskName":null,"version":1}'),
        (MessageType.END_OF_STREAM, b'{"taskName":null,"version":1}')}
    assert len(rebroadcast) == 2 * (m - 1)
    _deliver(rebroadcast, MID, downs)
    assert all(down.all_ended() for down in downs)
    # a replay restored from the checkpoint before the broadcast sends it again (idempotent output), and once
    replay = TaskControl.restore(snapshot, f"Partition {agg}", m, [MID.partition(agg)], down_cfg)
    again = replay.outgoing(3_000, {MID: m})
    assert [(env.partition, env.message) for env in again] == [(env.partition, env.message) for env in rebroadcast
                                                               if env.partition != agg]
    after = TaskControl.restore(replay.snapshot(), f"Partition {agg}", m, [MID.partition(agg)], down_cfg)
    assert after.outgoing(4_000, {MID: m}) == []


def test_a_samza_job_upstream_of_a_sparza_job():
    """The bytes a Samza job writes (per-task messages on the aggregate partition, in Samza's body) end
    a sparza downstream job whose stream is configured with Samza's protocol and the producer count."""
    m = 2
    agg = samza_aggregate_partition("mid", m)
    down_cfg = Config({INTERMEDIATE: "true", FMT: "samza", COUNT: "2"})
    downs = [TaskControl(f"Partition {j}", m, [MID.partition(j)], down_cfg) for j in range(m)]
    ssp = MID.partition(agg)
    samza_rows = [(1, b'{"timestamp":500,"taskName":"Partition 0","version":1}'),
                  (1, b'{"timestamp":700,"taskName":"Partition 1","version":1}'),
                  (2, b'{"taskName":"Partition 0","version":1}'),
                  (2, b'{"taskName":"Partition 1","version":1}')]
    for mtype, body in samza_rows:
        downs[agg].on_envelope(IncomingMessageEnvelope(ssp, "0", None, body, type=MessageType(mtype)))
    assert downs[agg].all_ended()
    # once "Partition 0" ended, the min is over "Partition 1" alone (ended producers are left out): 700
    out = downs[agg].outgoing(1_000, {MID: m})
    assert [(env.partition, env.message) for env in out] == [
        (1 - agg, b'{"timestamp":700,"taskName":null,"version":1}'), (1 - agg, b'{"taskName":null,"version":1}')]
    _deliver(out, MID, downs)
    assert downs[1 - agg].all_ended() and downs[1 - agg].watermark() == 700
