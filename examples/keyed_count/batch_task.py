"""The keyed count as a ``BatchStreamTask``: the same job and output as ``task.KeyedCountTask``, column at a time.

Per batch of messages (Arrow columns) it looks every distinct key up once (``get_all``), computes
each message's running count with numpy (the count before the batch plus the message's occurrence
number among its key's messages in the batch), writes each key's new count once (``put_all``) and
sends the outputs as one Arrow batch: the same ``{"key": k, "count": n}`` JSON values, keyed by
``k``, as the per-message task sends. Choose it with ``task.class:
examples.keyed_count.batch_task.KeyedCountBatchTask``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from examples.keyed_count.task import OUTPUT

from sparza.streams import SystemStream
from sparza.task import BatchCollector, MessageBatch, TaskCoordinator

__all__ = ["KeyedCountBatchTask", "running_counts"]

_encode_json = msgspec.json.Encoder().encode


def running_counts(indices: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(count of each message, total of each key)``: message *i* of key *k* (``indices[i] == k``) gets
    ``before[k]`` plus its occurrence number among key *k*'s messages, in order."""
    n = len(indices)
    order = np.argsort(indices, kind="stable")
    grouped = indices[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    first_of_group = np.repeat(starts, np.diff(np.r_[starts, n]))
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n, dtype=np.int64) - first_of_group + 1
    totals = before + np.bincount(indices, minlength=len(before))
    return before[indices] + occurrence, totals


class KeyedCountBatchTask:
    """BatchStreamTask + InitableTask: the store ``counts`` maps key (string) → count (json int)."""

    output: SystemStream = OUTPUT

    def init(self, context: Any) -> None:
        """Take the task's ``counts`` store (restored by the runtime before this call)."""
        self.store = context.get_store("counts")
        self.output = SystemStream.parse(context.config.get("keyed_count.output", str(OUTPUT)))

    def process_batch(self, batch: MessageBatch, collector: BatchCollector, coordinator: TaskCoordinator) -> None:
        """Count a batch of messages and send each one's running count of its key."""
        raw = pc.fill_null(batch.keys, b"None")  # the per-message task counts a missing key as "None"
        encoded = pc.dictionary_encode(raw)
        distinct = [k.decode() for k in encoded.dictionary.to_pylist()]
        stored = self.store.get_all(distinct)
        before = np.array([int(stored.get(k) or 0) for k in distinct], dtype=np.int64)
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        counts, totals = running_counts(indices, before)
        self.store.put_all(zip(distinct, totals.tolist(), strict=True))
        key_json = pa.array([_encode_json(k) for k in distinct], pa.binary()).take(encoded.indices)
        values = pc.binary_join_element_wise(b'{"key":', key_json, b',"count":',
                                             pa.array(counts).cast(pa.string()).cast(pa.binary()), b"}", b"")
        collector.send_batch(self.output, pa.RecordBatch.from_arrays([raw, values], names=["key", "value"]))
