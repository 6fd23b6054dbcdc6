"""``DeltaSystemAdmin.offset_after`` / ``count_between``: capping and counting from commit row counts,
checked against what a consumer actually reads from a real local Delta table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaOffset, DeltaSystemAdmin, DeltaSystemProducer

S = SystemStream("d", "s")
P0 = SystemStreamPartition("d", "s", 0)
P1 = SystemStreamPartition("d", "s", 1)


def _write(config: Config, commits: list[dict[int, int]], *, control_last: bool = False) -> None:
    """One commit per dict of ``{partition: rows}``; ``control_last`` makes each partition's last row of
    every commit a watermark (a control row)."""
    producer = DeltaSystemProducer("d", config)
    producer.register("w")
    producer.start()
    for rows in commits:
        for partition, n in rows.items():
            for i in range(n):
                kind = MessageType.WATERMARK if control_last and i == n - 1 else MessageType.USER
                producer.send("w", OutgoingMessageEnvelope(S, f"m{i}".encode(), partition=partition, timestamp=i,
                                                           type=kind))
        producer.flush("w")
    producer.stop()


def _admin(config: Config, partitions: int = 2) -> DeltaSystemAdmin:
    admin = DeltaSystemAdmin("d", config)
    admin.create_stream(StreamSpec("s", partitions))
    return admin


def _offsets(read_all: Callable[..., list], config: Config, partition: int) -> list[str]:
    return [e.offset for e in read_all(config, "s", partition)]


def _upcoming(admin: DeltaSystemAdmin) -> str:
    return admin.get_system_stream_metadata({"s"})["s"].partitions[0].upcoming


def test_many_small_commits_count_and_cap_match_the_rows_read(delta_config: Config,
                                                               read_all: Callable[..., list]) -> None:
    admin = _admin(delta_config)
    # 30 commits of 1-3 rows on partition 0; partition 1 gets rows only every third commit, so some
    # versions add nothing to partition 0's neighbour and vice versa.
    plan = [{0: 1 + v % 3, **({1: 2} if v % 3 == 0 else {})} for v in range(30)]
    plan[10] = {1: 4}   # a version with no rows for partition 0
    _write(delta_config, plan)
    upcoming = _upcoming(admin)
    assert upcoming == "31:0"
    read0 = _offsets(read_all, delta_config, 0)
    assert admin.count_between(P0, "0:0", upcoming) == len(read0) == sum(r.get(0, 0) for r in plan)
    assert admin.count_between(P1, "0:0", upcoming) == len(_offsets(read_all, delta_config, 1))
    # Every cap from every start agrees with the consumer: the offset after n rows is the (n+1)-th row's
    # offset, or the start of the next version when the n-th row ended its version, or the end.
    for s in range(0, len(read0), 4):
        start = read0[s]
        for n in (1, 2, 3, 7, 50):
            got = admin.offset_after(P0, start, upcoming, n)
            if s + n >= len(read0):
                assert got == upcoming
            else:
                last, following = DeltaOffset.parse(read0[s + n - 1]), DeltaOffset.parse(read0[s + n])
                expected = following if following.version == last.version else DeltaOffset(last.version + 1, 0)
                assert got == str(expected)
            assert admin.count_between(P0, start, got) == min(n, len(read0) - s)
            assert [e.offset for e in read_all(delta_config, "s", 0, start, got)] == read0[s:s + n]


def test_empty_range(delta_config: Config) -> None:
    admin = _admin(delta_config)
    _write(delta_config, [{0: 5}, {0: 5}])
    assert admin.count_between(P0, "2:1", "2:1") == 0
    assert admin.count_between(P0, "2:3", "1:0") == 0   # start after end
    assert admin.offset_after(P0, "2:1", "2:1", 10) == "2:1"
    # A range with versions but no rows for this partition.
    assert admin.count_between(P1, "1:0", "3:0") == 0
    assert admin.offset_after(P1, "1:0", "3:0", 1) == "3:0"
    # A range at upcoming (nothing written yet).
    assert admin.count_between(P0, "3:0", "5:0") == 0
    assert admin.offset_after(P0, "3:0", "5:0", 4) == "5:0"


def test_range_ending_mid_commit(delta_config: Config, read_all: Callable[..., list]) -> None:
    admin = _admin(delta_config)
    _write(delta_config, [{0: 10}, {0: 10}, {0: 10}])
    assert admin.count_between(P0, "1:0", "2:4") == 14
    assert admin.count_between(P0, "1:7", "3:2") == 3 + 10 + 2
    assert admin.count_between(P0, "2:3", "2:8") == 5
    assert admin.offset_after(P0, "1:0", "2:4", 5) == "1:5"
    assert admin.offset_after(P0, "1:0", "2:4", 10) == "2:0"    # ended its version: next version's start
    assert admin.offset_after(P0, "1:0", "2:4", 14) == "2:4"
    assert admin.offset_after(P0, "1:0", "2:4", 15) == "2:4"    # fewer rows than n: the end
    assert admin.offset_after(P0, "1:8", "3:5", 4) == "2:2"
    assert len(read_all(delta_config, "s", 0, "1:7", "3:2")) == 15


def test_control_rows_count_as_rows(delta_config: Config, read_all: Callable[..., list]) -> None:
    admin = _admin(delta_config, partitions=1)
    _write(delta_config, [{0: 3}, {0: 3}], control_last=True)
    producer = DeltaSystemProducer("d", delta_config)
    producer.register("e")
    producer.send("e", OutgoingMessageEnvelope(S, None, partition=0, type=MessageType.END_OF_STREAM))
    producer.flush("e")
    got = read_all(delta_config, "s", 0)
    assert [e.type for e in got].count(MessageType.USER) == 4 and len(got) == 7
    upcoming = _upcoming(admin)
    assert admin.count_between(P0, "0:0", upcoming) == 7
    assert admin.offset_after(P0, "1:0", upcoming, 3) == "2:0"   # the watermark is the 3rd row
    assert admin.offset_after(P0, "2:2", upcoming, 1) == "3:0"
    assert admin.offset_after(P0, "3:0", upcoming, 1) == upcoming   # the end-of-stream row


def test_offset_after_rejects_non_positive_n(delta_config: Config) -> None:
    admin = _admin(delta_config)
    with pytest.raises(ValueError, match="n >= 1"):
        admin.offset_after(P0, "0:0", "1:0", 0)


def test_counts_come_from_the_log_not_the_data_files(delta_config: Config) -> None:
    admin = _admin(delta_config)
    _write(delta_config, [{0: 4, 1: 2}, {0: 6}])
    data = [f for f in Path(admin.location("s").uri).rglob("*.parquet") if "_delta_log" not in f.parts]
    assert data
    for f in data:
        f.unlink()   # any data-file read would now fail
    assert admin.count_between(P0, "1:1", "3:0") == 9
    assert admin.offset_after(P0, "1:1", "3:0", 5) == "2:2"
