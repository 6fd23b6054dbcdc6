"""SEP-004 control messages: end-of-stream and watermarks carried in-band through intermediate streams.

A library the runtime drives per task (:class:`TaskControl`): the wire format
(:mod:`sparza.control.messages`), per-SSP reconciliation (:mod:`sparza.control.reconcile`), the
config keys (:mod:`sparza.control.settings`) and the task's bookkeeping, which is snapshotted into
the task checkpoint so it survives restarts.
"""

from __future__ import annotations

from sparza.control.messages import (
    CONTROL_VERSION,
    ControlMessage,
    ControlMessageError,
    decode_body,
    encode_body,
    from_wire,
    to_wire,
)
from sparza.control.reconcile import IdlePolicy, ProducerState, SspControlState
from sparza.control.settings import ControlSettings, LatePolicy
from sparza.control.task_control import SNAPSHOT_VERSION, ControlStateError, TaskControl

__all__ = [
    "CONTROL_VERSION",
    "SNAPSHOT_VERSION",
    "ControlMessage",
    "ControlMessageError",
    "ControlSettings",
    "ControlStateError",
    "IdlePolicy",
    "LatePolicy",
    "ProducerState",
    "SspControlState",
    "TaskControl",
    "decode_body",
    "encode_body",
    "from_wire",
    "to_wire",
]
