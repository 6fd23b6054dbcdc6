"""The task's store handle and its write-back object cache (:class:`sparza.engine.stores.StoreHandle`) against a plain
dict: whatever the cache size, every read sees the last write, and a flushed cache leaves the store holding exactly
what the dict holds."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sparza.engine.errors import RuntimeStateError
from sparza.engine.stores import StoreHandle


class DictStore:
    """A store over a dict with a KeyValueStore's calls (None deletes); counts reads to see the cache work."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.reads = 0

    def get(self, key: str) -> Any:
        self.reads += 1
        return self.data.get(key)

    def put(self, key: str, value: Any) -> None:
        self.put_all([(key, value)])

    def put_all(self, entries: list[tuple[str, Any]]) -> None:
        for key, value in entries:
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value

    def get_all(self, keys: list[str]) -> dict[str, Any]:
        self.reads += 1
        return {k: self.data[k] for k in keys if k in self.data}

    def range(self, lo: str, hi: str) -> list[tuple[str, Any]]:
        return sorted((k, v) for k, v in self.data.items() if lo <= k < hi)

    def all(self) -> list[tuple[str, Any]]:
        return sorted(self.data.items())


@pytest.mark.parametrize("cache_size", [0, 1, 3, 1000])
def test_random_calls_match_a_dict_at_every_cache_size(cache_size: int) -> None:
    rng = random.Random(cache_size)
    store = DictStore()
    handle = StoreHandle("s", cache_size)
    handle._bind(store)
    oracle: dict[str, Any] = {}
    keys = [f"k{i}" for i in range(8)]
    for _ in range(3000):
        op = rng.randrange(9)
        key = rng.choice(keys)
        if op == 0:
            assert handle.get(key) == oracle.get(key)
        elif op == 1:
            value = rng.randrange(5)
            handle.put(key, value)
            oracle[key] = value
        elif op == 2:
            handle.delete(key)
            oracle.pop(key, None)
        elif op == 3:
            some = rng.sample(keys, 3)
            assert handle.get_all(some) == {k: oracle[k] for k in some if k in oracle}
        elif op == 4:
            entries = {k: rng.choice([None, rng.randrange(5)]) for k in rng.sample(keys, 2)}
            handle.put_all(entries)
            for k, v in entries.items():
                if v is None:
                    oracle.pop(k, None)
                else:
                    oracle[k] = v
        elif op == 5:
            some = rng.sample(keys, 2)
            handle.delete_all(some)
            for k in some:
                oracle.pop(k, None)
        elif op == 6:
            assert handle.peek(key) == oracle.get(key)
            assert handle.peek_all() == sorted(oracle.items())
        elif op == 7:
            assert list(handle.range("k2", "k6")) == sorted((k, v) for k, v in oracle.items() if "k2" <= k < "k6")
        else:
            handle.flush_cache()
            assert store.data == oracle  # what a commit checkpoints lacks no write
    handle.flush_cache()
    assert store.data == oracle
    assert list(handle.all()) == sorted(oracle.items())


def test_repeated_keys_are_read_from_the_store_once_and_an_unbound_handle_refuses() -> None:
    store = DictStore()
    store.data["a"] = 1
    handle = StoreHandle("s", 10)
    handle._bind(store)
    assert [handle.get("a"), handle.get("a"), handle.get("b"), handle.get("b")] == [1, 1, None, None]
    assert store.reads == 2  # a present and an absent key, each read once
    handle.put("a", 2)
    assert handle.get("a") == 2 and store.data["a"] == 1  # written back at the flush only
    handle._bind(None)
    with pytest.raises(RuntimeStateError, match="outside a batch"):
        handle.get("a")


def test_a_bound_handle_reaches_every_store_attribute_without_a_getattr_hook(tmp_path) -> None:
    """The handle's class has no ``__getattr__`` while a store is bound (it made every get and put about 3x slower);
    each store's own attributes and methods are still reached through it, and an unbound handle refuses them."""
    from sparza.serde import JsonSerde, StringSerde
    from sparza.state.kv.memory import InMemoryStore
    from sparza.state.kv.rocksdb import RocksDbStore

    rocks = RocksDbStore(tmp_path / "rocks", StringSerde(), JsonSerde(), name="counts")
    memory = InMemoryStore("counts", StringSerde(), JsonSerde())
    handle = StoreHandle("counts", 10)
    assert isinstance(handle, StoreHandle)
    with pytest.raises(RuntimeStateError, match="outside a batch"):
        handle.flush()
    try:
        handle._bind(rocks)
        assert all("__getattr__" not in vars(cls) for cls in type(handle).__mro__)
        assert handle.name == "counts" and handle.path == tmp_path / "rocks" and handle.read_only is False
        handle.put("a", 1)
        handle.flush_cache()
        handle.flush()
        assert rocks.get("a") == 1 and handle.approximate_size_bytes() >= 0
        assert handle.checkpoint(tmp_path / "cp").exists()
        with pytest.raises(AttributeError):
            handle.no_such_attribute  # noqa: B018
        handle._bind(memory)  # another engine: its attributes, not the last one's
        assert not hasattr(handle, "path") and not hasattr(handle, "approximate_size_bytes")
        handle.put("b", 2)
        handle.flush_cache()
        assert memory.get("b") == 2 and handle.load is not None

        class Custom(DictStore):
            def extra(self) -> str:
                return "extra"

        custom = Custom()
        custom.label = "mine"  # type: ignore[attr-defined]
        handle._bind(custom)
        assert handle.extra() == "extra" and handle.label == "mine" and handle.reads == 0
        handle._bind(None)
        with pytest.raises(RuntimeStateError, match="outside a batch"):
            handle.extra()
    finally:
        rocks.close()
