"""Window definitions and window state in a real store: assignment, firing once, flush, restart, lateness."""

from __future__ import annotations

import pytest

from sparza.api import WindowError, WindowPane, Windows
from sparza.api.window_state import WindowState
from sparza.serde import JsonSerde, StringSerde
from sparza.state.kv import InMemoryStore, RocksDbStore


def count(_m, acc):
    return acc + 1


def test_tumbling_and_sliding_window_starts():
    tumbling = Windows.tumbling(10, lambda m: m, 0, count)
    assert tumbling.kind == "tumbling" and tumbling.starts(25) == [20] and tumbling.starts(-1) == [-10]
    sliding = Windows.sliding(10, 5, lambda m: m, 0, count)
    assert sliding.kind == "sliding" and sliding.starts(12) == [5, 10] and sliding.starts(10) == [5, 10]
    with pytest.raises(WindowError):
        Windows.tumbling(0, lambda m: m, 0, count)
    with pytest.raises(WindowError, match="skip"):
        Windows.sliding(5, 10, lambda m: m, 0, count)


def test_callable_init_gives_fresh_accumulators():
    spec = Windows.tumbling(10, lambda m: m, list, lambda m, acc: [*acc, m])
    assert spec.initial() == [] and spec.initial() is not spec.initial()


def test_windows_fire_once_in_end_order_and_flush_the_rest(tmp_path):
    store = RocksDbStore(tmp_path / "w", StringSerde(), JsonSerde())
    state = WindowState(Windows.tumbling(10, lambda m: m["k"], 0, count), store)
    for k, t in [("a", 1), ("b", 3), ("a", 12), ("a", 9), ("b", 25)]:
        assert state.add(k, t, {"k": k}) is False
    assert state.fire(9) == []
    assert state.fire(10) == [WindowPane("a", 0, 10, 2), WindowPane("b", 0, 10, 1)]
    assert state.fire(10) == []  # a watermark that did not advance fires nothing again
    assert state.fire(20) == [WindowPane("a", 10, 20, 1)]
    # A restart over the same store remembers what fired.
    store.flush()
    again = WindowState(state.spec, store)
    assert again.fired == 20
    assert again.add("a", 5, {"k": "a"}) is True and again.late == 1
    assert again.flush() == [WindowPane("b", 20, 30, 1)]
    assert list(store.range("w|", "w}")) == []
    store.close()


def test_sliding_window_counts_each_message_in_every_window():
    state = WindowState(Windows.sliding(10, 5, lambda m: "k", 0, count), InMemoryStore("w", StringSerde(), JsonSerde()))
    for t in (1, 6, 11):
        state.add("k", t, t)
    panes = state.flush()
    assert [(p.start, p.end, p.value) for p in panes] == [(-5, 5, 1), (0, 10, 2), (5, 15, 2), (10, 20, 1)]


def test_partially_late_sliding_message_is_counted_and_kept_in_open_windows():
    state = WindowState(Windows.sliding(10, 5, lambda m: "k", 0, count), InMemoryStore("w", StringSerde(), JsonSerde()))
    state.add("k", 6, 6)
    state.fire(10)
    assert state.add("k", 7, 7) is True  # window [0, 10) fired, [5, 15) is open
    assert [(p.start, p.value) for p in state.flush()] == [(5, 2)]
