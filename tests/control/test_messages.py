"""Wire format of control messages: round trips and clear errors for malformed bodies."""

from __future__ import annotations

import json

import pytest

from sparza.control import ControlMessage, ControlMessageError, decode_body, encode_body, from_wire, to_wire
from sparza.streams import MessageType


def test_watermark_body_has_the_seed_fields_and_round_trips():
    msg = ControlMessage.watermark(1234, "Partition 3", 4)
    body = json.loads(encode_body(msg))
    assert body == {"version": 1, "taskName": "Partition 3", "taskCount": 4, "timestamp": 1234}
    assert decode_body(MessageType.WATERMARK, encode_body(msg)) == msg


def test_end_of_stream_round_trips_through_the_type_byte_form():
    msg = ControlMessage.end_of_stream("Partition 0", 2)
    wire = to_wire(msg)
    assert wire[0] == 2
    assert from_wire(wire) == msg


def test_samza_dashed_names_and_missing_version_are_accepted():
    data = json.dumps({"task-name": "Partition 1", "task-count": 3, "timestamp": 7}).encode()
    msg = decode_body(1, data)
    assert (msg.task_name, msg.task_count, msg.timestamp, msg.version) == ("Partition 1", 3, 7, 1)


def test_bare_end_of_stream_from_a_source_has_no_producer():
    msg = decode_body(MessageType.END_OF_STREAM, b"")
    assert msg.task_name is None and msg.type == MessageType.END_OF_STREAM


@pytest.mark.parametrize(("mtype", "data", "reason"), [
    (1, b"not json", "not JSON"),
    (1, b"[1,2]", "not a JSON object"),
    (1, b'{"taskName":"P","taskCount":1}', "needs a timestamp"),
    (1, b'{"taskName":"P","taskCount":1,"timestamp":"x"}', "timestamp must be an integer"),
    (2, b'{"taskName":5,"taskCount":1}', "taskName must be a string"),
    (2, b'{"version":9,"taskName":"P","taskCount":1}', "newer than this reader"),
    (0, b"{}", "user message"),
    (7, b"{}", "unknown message type"),
    (3, b'{"taskName":"P","version":1,"runId":"r"}', "drain message, whose body has a runId"),
    (1, b"", "empty watermark"),
])
def test_malformed_bodies_raise_with_the_reason(mtype, data, reason):
    with pytest.raises(ControlMessageError, match=reason):
        decode_body(mtype, data)


def test_empty_wire_message_is_refused():
    with pytest.raises(ControlMessageError, match="no type byte"):
        from_wire(b"")
