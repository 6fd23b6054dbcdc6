"""A per-message task's input as column lists (:func:`sparza.engine.worker.read_split_rows`): the same messages, in
the same order, whichever way a consumer reads (column lists, Arrow, envelopes), and control messages in place among
the data all the way to the task and its TaskControl."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from sparza.control import TaskControl
from sparza.engine.instance import _arrow_chunks, _max_timestamp, _sizes
from sparza.engine.split import TaskSplit
from sparza.engine.worker import SplitInput, read_split, read_split_rows
from sparza.streams import IncomingMessageEnvelope, MessageType, SystemStreamPartition
from sparza.systems import MessageRows, SupportsArrowRead, SupportsRowRead
from sparza.systems.rows import rows_to_arrow
from sparza.testing import TestMessage, TestRunner, end_of_stream, watermark

Row = tuple[str, bytes | None, bytes | None, int | None, int]


def _stored(rng: random.Random, n: int) -> list[Row]:
    """``n`` rows at offsets 0..n-1: user messages with control messages (watermarks, a drain) among them,
    some keys and values missing."""
    rows: list[Row] = []
    for i in range(n):
        kind = rng.choice([0, 0, 0, 0, 1, 3])
        key = None if kind or rng.random() < 0.2 else f"k{i % 5}".encode()
        value = None if kind else b"v" * rng.randrange(0, 9)
        rows.append((str(i), key, value, None if rng.random() < 0.1 else 1000 + i, kind))
    return rows


class _Stored:
    """What the three consumers read: each SSP's rows, sliced to ``[start, end)`` in chunks of 3."""

    def __init__(self, data: dict[SystemStreamPartition, list[Row]]) -> None:
        self.data = data

    def chunks(self, ssp: SystemStreamPartition, start: str | None, end: str | None) -> Iterator[list[Row]]:
        rows = self.data[ssp][int(start or 0):int(end) if end is not None else None]
        for i in range(0, len(rows), 3):
            yield rows[i:i + 3]

    def read(self, ssp: SystemStreamPartition, start: str | None,
             end: str | None = None) -> Iterator[IncomingMessageEnvelope]:
        for chunk in self.chunks(ssp, start, end):
            for offset, key, value, ts, kind in chunk:
                yield IncomingMessageEnvelope(ssp, offset, key, value, ts, 0, MessageType(kind))


class RowsConsumer(_Stored):
    def read_rows(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                  include_control: bool = True, *, bounded: bool | None = None) -> Iterator[MessageRows]:
        for chunk in self.chunks(ssp, start, end):
            yield MessageRows(*(list(column) for column in zip(*chunk, strict=True)))  # type: ignore[arg-type]


class ArrowConsumer(_Stored):
    def read_arrow(self, ssp: SystemStreamPartition, start: str | None, end: str | None = None,
                   include_control: bool = True, *, bounded: bool | None = None) -> Iterator[Any]:
        for chunk in self.chunks(ssp, start, end):
            rows = MessageRows(*(list(column) for column in zip(*chunk, strict=True)))  # type: ignore[arg-type]
            yield rows_to_arrow(rows, ssp.partition, [None] * len(chunk))


class EnvelopeConsumer(_Stored):
    """Only ``read``, as every consumer has."""


class _Clients:
    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer

    def consumer(self, system: str) -> Any:
        return self._consumer


@pytest.mark.parametrize("seed", range(4))
def test_every_consumer_kind_gives_the_same_rows_as_the_arrow_path_in_order(seed: int) -> None:
    rng = random.Random(seed)
    ssps = [SystemStreamPartition("s", "events", p) for p in range(3)]
    data = {ssp: _stored(rng, rng.randrange(5, 40)) for ssp in ssps}
    bounds = []
    for ssp in ssps:
        start = rng.randrange(0, len(data[ssp]))
        bounds.append((start, rng.randrange(start, len(data[ssp]) + 1)))
    bounds[1] = (bounds[1][0], bounds[1][0])  # an SSP with nothing to read in this batch
    split = TaskSplit(0, "Partition 0", 1, 0, [str(s) for s in ssps], [str(a) for a, _ in bounds],
                      [str(b) for _, b in bounds], False)
    # The oracle: each SSP's stored rows in [start, end), SSPs in the split's order.
    expected = [(i, row) for i, (ssp, (a, b)) in enumerate(zip(ssps, bounds, strict=True)) for row in data[ssp][a:b]]

    def flat(chunks: Iterator[tuple[int, MessageRows]]) -> list[tuple[int, Row]]:
        out = []
        for i, rows in chunks:
            assert rows.offsets  # no empty chunks reach the task loop
            out.extend((i, row) for row in zip(*rows, strict=True))
        return out

    assert isinstance(RowsConsumer(data), SupportsRowRead)
    assert isinstance(ArrowConsumer(data), SupportsArrowRead) and not isinstance(ArrowConsumer(data), SupportsRowRead)
    for consumer in (RowsConsumer(data), ArrowConsumer(data), EnvelopeConsumer(data)):
        clients: Any = _Clients(consumer)
        assert flat(read_split_rows(clients, split)) == expected, type(consumer).__name__
        assert flat(SplitInput(clients, split).rows()) == expected
        # The batch task's Arrow rows, taken apart as a caller's Arrow batches are: the same again.
        assert flat(_arrow_chunks(read_split(clients, split))) == expected
        assert flat(_arrow_chunks(SplitInput(clients, split))) == expected


def test_sizes_and_max_timestamp_match_plain_loops() -> None:
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randrange(1, 20)
        keys = [None if rng.random() < 0.2 else b"k" * rng.randrange(4) for _ in range(n)]
        values = [None if rng.random() < 0.2 else b"v" * rng.randrange(9) for _ in range(n)]
        stamps = [None if rng.random() < 0.3 else rng.randrange(100) for _ in range(n)]
        assert _sizes(keys, values) == [len(k or b"") + len(v or b"") for k, v in zip(keys, values, strict=True)]
        full = [b"x" * rng.randrange(5) for _ in range(n)]
        assert _sizes(full, full) == [2 * len(v) for v in full]
        present = [t for t in stamps if t is not None]
        assert _max_timestamp(stamps) == (max(present) if present else None)


LOG: list[tuple[Any, ...]] = []
"""What the task and its TaskControl saw, in the order they saw it."""


class RecordingTask:
    """Records every message it gets; a watermark listener, so its inputs' control messages go to TaskControl."""

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        LOG.append(("message", envelope.ssp.partition, envelope.offset, envelope.key, envelope.message, envelope.size))

    def on_watermark(self, watermark: int, collector: Any, coordinator: Any) -> None:
        LOG.append(("on_watermark", watermark))


def test_control_messages_reach_task_control_in_place_among_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    original = TaskControl.on_envelope

    def recording(self: TaskControl, envelope: IncomingMessageEnvelope) -> Any:
        if envelope.type != MessageType.USER:
            LOG.append(("control", envelope.ssp.partition, envelope.offset, int(envelope.type)))
        return original(self, envelope)

    monkeypatch.setattr(TaskControl, "on_envelope", recording)
    LOG.clear()
    # One partition: a run of user messages only (the fast path), then messages and watermarks mixed, then the end.
    items: list[Any] = [TestMessage(f"v{i}".encode(), key=f"k{i}".encode(), timestamp=100 + i) for i in range(5)]
    for i in range(5, 30):
        items.append(watermark(100 + i) if rng.random() < 0.3 else
                     TestMessage(f"v{i}".encode(), key=f"k{i}".encode(), timestamp=100 + i))
    items.append(end_of_stream())
    # The oracle: the input's order, user messages to the task, control messages (with their offsets) to control.
    expected: list[tuple[Any, ...]] = []
    for offset, item in enumerate(items):
        if isinstance(item, TestMessage):
            expected.append(("message", 0, str(offset), item.key, item.value, len(item.key) + len(item.value)))
        else:
            expected.append(("control", 0, str(offset), int(item.type)))
    with TestRunner.of(RecordingTask) as runner:
        runner.add_input("mem.events", items)
        report = runner.run()
    assert report.ended
    seen = [entry for entry in LOG if entry[0] != "on_watermark"]
    assert seen == expected
    # The watermark callback ran at the batch boundary, after every message it covers.
    assert LOG[-1][0] == "on_watermark" and LOG.index(LOG[-1]) == len(expected)
