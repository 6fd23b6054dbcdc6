"""Offsets: compact string form, parsing, ordering, next_offset, the admin's sort key."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.errors import SparzaError
from sparza.systems import SupportsOffsetKey
from sparza.systems.delta import DeltaOffset, DeltaSystemAdmin, InvalidOffsetError, next_offset


def test_round_trip_and_compact_form() -> None:
    offset = DeltaOffset(12, 3)
    assert str(offset) == "12:3"
    assert DeltaOffset.parse("12:3") == offset
    assert DeltaOffset.parse(" 7:0 ") == DeltaOffset(7, 0)


@pytest.mark.parametrize("garbage", ["", "12", "12:", ":3", "a:b", "-1:0", "1:-2", "1:2:3", "1.5:0", "٣:1", None, 5])
def test_garbage_is_rejected_clearly(garbage: object) -> None:
    with pytest.raises(InvalidOffsetError) as info:
        DeltaOffset.parse(garbage)  # type: ignore[arg-type]
    assert "delta stream offset" in str(info.value)
    assert isinstance(info.value, SparzaError) and isinstance(info.value, ValueError)


def test_total_order() -> None:
    offsets = [DeltaOffset(2, 0), DeltaOffset(1, 10), DeltaOffset(1, 2), DeltaOffset(10, 0), DeltaOffset(2, 1)]
    assert sorted(offsets) == [DeltaOffset(1, 2), DeltaOffset(1, 10), DeltaOffset(2, 0), DeltaOffset(2, 1),
                               DeltaOffset(10, 0)]
    assert DeltaOffset(1, 9) < DeltaOffset(1, 10)  # numeric, not string order
    assert DeltaOffset(3, 4) >= DeltaOffset(3, 4)


def test_next_offset() -> None:
    assert next_offset("4:7") == "4:8"
    assert DeltaOffset.parse(next_offset("4:7")) > DeltaOffset(4, 7)
    assert DeltaOffset.parse(next_offset("4:7")) < DeltaOffset(5, 0)


def test_offset_key_sorts_as_the_admin_compares(tmp_path: Path) -> None:
    # The sort key the adjunct manager uses (SupportsOffsetKey) must order offsets exactly as
    # offset_comparator does, for generated offsets with equal versions, equal indexes and multi-digit parts.
    rng = random.Random(11)
    offsets = [f"{rng.choice([0, 1, 2, 9, 10, 11, 100])}:{rng.randrange(0, 30)}" for _ in range(300)]
    admin = DeltaSystemAdmin("d", Config({"systems.d.samza.factory": "delta", "systems.d.delta.root": str(tmp_path)}))
    assert isinstance(admin, SupportsOffsetKey)
    by_key = sorted(offsets, key=admin.offset_key)
    by_comparator = sorted(offsets, key=functools.cmp_to_key(admin.offset_comparator))
    assert by_key == by_comparator
    assert [DeltaOffset.parse(o) for o in by_key] == sorted(DeltaOffset.parse(o) for o in offsets)  # independent order
    assert admin.offset_key(" 7:0 ") == (7, 0)  # the parser's spellings are accepted too
    with pytest.raises(InvalidOffsetError):
        admin.offset_key("7")
