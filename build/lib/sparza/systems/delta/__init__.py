"""Streams on Delta Lake: the ``delta`` system for inputs, outputs and intermediate streams.

A stream is a Delta table partitioned by ``partition`` with columns ``key``, ``value``,
``timestamp``, ``type`` and ``producer``; offsets are ``"<version>:<index>"`` (see
:mod:`sparza.systems.delta.offsets` and ``docs/streams.md``). Needs no Spark.
"""

from __future__ import annotations

from sparza.systems.delta.admin import DeltaSystemAdmin
from sparza.systems.delta.consumer import DeltaSystemConsumer
from sparza.systems.delta.errors import (
    DeltaStreamError,
    InvalidOffsetError,
    OffsetRemovedError,
    PartitionCountMismatchError,
    StreamNotFoundError,
)
from sparza.systems.delta.factory import DeltaSystemFactory
from sparza.systems.delta.offsets import DeltaOffset, next_offset
from sparza.systems.delta.partitioner import partition_for
from sparza.systems.delta.producer import DeltaSystemProducer
from sparza.systems.delta.schema import READ_SCHEMA, TABLE_SCHEMA

__all__ = [
    "READ_SCHEMA",
    "TABLE_SCHEMA",
    "DeltaOffset",
    "DeltaStreamError",
    "DeltaSystemAdmin",
    "DeltaSystemConsumer",
    "DeltaSystemFactory",
    "DeltaSystemProducer",
    "InvalidOffsetError",
    "OffsetRemovedError",
    "PartitionCountMismatchError",
    "StreamNotFoundError",
    "next_offset",
    "partition_for",
]
