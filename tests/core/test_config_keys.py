"""The key registry: a declared key is read through its object, with its one default, typed, placeholders filled
by keyword and fallbacks followed; a bad value or a bad declaration fails naming the key."""

from __future__ import annotations

import pytest

from sparza.config import (
    BOOL,
    DURATION_MS,
    LIST,
    STR,
    ByteSize,
    Choice,
    Config,
    DefaultKey,
    Float,
    Int,
    OptionalKey,
    define_key,
    find_key,
)
from sparza.config.registry import _DEFINED
from sparza.errors import ConfigError

PKG = "tests.config_keys"


@pytest.fixture(autouse=True)
def _forget_test_keys():
    yield
    for key in [k for k, v in _DEFINED.items() if v.package.startswith(PKG)]:
        del _DEFINED[key]


def test_a_key_returns_its_declared_type_and_default():
    size = define_key("t.block.size", "8MB", "Block size.", PKG, kind=ByteSize(min_value=1 << 16))
    flag = define_key("t.flag", True, "A flag.", PKG, kind=BOOL)
    wait = define_key("t.wait", "30s", "A wait.", PKG, kind=DURATION_MS)
    items = define_key("t.items", "", "Some items.", PKG, kind=LIST)
    assert isinstance(size, DefaultKey)
    assert size.get(Config()) == 8 << 20
    assert size.default == "8MB"
    assert size.get({"t.block.size": "1MB"}) == 1 << 20
    assert flag.get({}) is True and flag.get({"t.flag": "off"}) is False
    assert flag.default == "true"
    assert wait.get({}) == 30_000 and wait.get({"t.wait": "2m"}) == 120_000
    assert items.get({}) == () and items.get({"t.items": " a, ,b "}) == ("a", "b")
    # A blank value is no value: the default applies.
    assert size.get({"t.block.size": "  "}) == 8 << 20


def test_a_key_without_default_is_optional_and_require_names_it():
    name = define_key("t.name", None, "A name.", PKG, kind=STR)
    assert isinstance(name, OptionalKey)
    assert name.get({}) is None
    assert name.get({"t.name": "  x "}) == "x"
    with pytest.raises(ConfigError, match="'t.name' is missing: expected a value"):
        name.require({})
    with pytest.raises(ConfigError, match="'t.name' is missing: expected the job's name"):
        name.require({}, expected="the job's name")
    assert name.require({"t.name": "y"}) == "y"


def test_bad_values_name_the_key_the_value_and_what_was_expected():
    count = define_key("t.count", 4, "A count.", PKG, kind=Int(min_value=1))
    mode = define_key("t.mode", "none", "A mode.", PKG, kind=Choice("none", "gzip"))
    share = define_key("t.share", 0.5, "A share.", PKG, kind=Float(0, 1, min_exclusive=True))
    secret = define_key("t.account.key", None, "A secret.", PKG, kind=Int())
    with pytest.raises(ConfigError, match=r"'t.count' has value '0': expected an integer >= 1"):
        count.get({"t.count": "0"})
    assert mode.get({"t.mode": "GZIP"}) == "gzip"
    with pytest.raises(ConfigError, match="one of none, gzip"):
        mode.get({"t.mode": "zip"})
    assert share.get({"t.share": "1"}) == 1.0
    for bad in ("0", "1.5", "nan"):
        with pytest.raises(ConfigError, match="'t.share'"):
            share.get({"t.share": bad})
    with pytest.raises(ConfigError) as info:
        secret.get({"t.account.key": "SuperSecret=="})
    assert "SuperSecret" not in str(info.value)


def test_placeholders_are_filled_by_keyword_and_checked():
    factory = define_key("t.stores.<store>.factory", "rocksdb", "Engine.", PKG, kind=Choice("rocksdb", "memory"))
    config = {"t.stores.a.factory": "memory", "t.stores.b.factory": "RocksDB", "t.stores.b.other": "x"}
    assert factory.get(config, store="a") == "memory"
    assert factory.get(config, store="b") == "rocksdb"
    assert factory.get(config, store="c") == "rocksdb"
    assert factory.name(store="a") == "t.stores.a.factory"
    assert factory.find(config) == [{"store": "a"}, {"store": "b"}]
    with pytest.raises(TypeError, match="takes the names store"):
        factory.get(config)
    with pytest.raises(TypeError, match="got stor"):
        factory.get(config, stor="a")


def test_a_fallback_chain_is_followed_and_errors_name_the_key_that_was_set():
    system = define_key("t.systems.<system>.serde", "bytes", "System serde.", PKG, kind=STR)
    stream = define_key("t.systems.<system>.streams.<stream>.serde", None, "Stream serde.", PKG, kind=STR,
                        fallback=system)
    sized = define_key("t.systems.<system>.size", None, "System size.", PKG, kind=Int(min_value=1))
    own_size = define_key("t.systems.<system>.streams.<stream>.size", None, "Stream size.", PKG,
                          kind=Int(min_value=1), fallback=sized)
    assert isinstance(stream, DefaultKey) and isinstance(own_size, OptionalKey)
    config = {"t.systems.s.serde": "json", "t.systems.s.streams.x.serde": "string"}
    assert stream.get(config, system="s", stream="x") == "string"
    assert stream.get(config, system="s", stream="y") == "json"
    assert stream.get(config, system="other", stream="y") == "bytes"
    assert stream.where(config, system="s", stream="y") == "t.systems.s.serde"
    assert stream.where({}, system="s", stream="y") == "t.systems.s.streams.y.serde"
    # A stream id may contain dots.
    assert stream.get({"t.systems.s.streams.a.b.serde": "avro"}, system="s", stream="a.b") == "avro"
    assert own_size.get({}, system="s", stream="x") is None
    with pytest.raises(ConfigError, match="'t.systems.s.size' has value '0'"):
        own_size.get({"t.systems.s.size": "0"}, system="s", stream="x")


def test_namespace_keys_give_their_subset():
    passthrough = define_key("t.systems.<system>.consumer.*", None, "Client settings.", PKG)
    config = {"t.systems.k.consumer.linger.ms": "5", "t.systems.k.consumer.a": "b", "t.systems.j.consumer.c": "d"}
    assert passthrough.subset(config, system="k") == {"linger.ms": "5", "a": "b"}
    assert find_key("t.systems.k.consumer.linger.ms") is passthrough


def test_bad_declarations_fail_at_import():
    with pytest.raises(ValueError, match="not a byte size"):
        define_key("t.bad.size", "lots", "Bad.", PKG, kind=ByteSize())
    with pytest.raises(ValueError):
        define_key("t.bad.count", 0, "Bad.", PKG, kind=Int(min_value=1))
    base = define_key("t.base", "x", "Base.", PKG, kind=STR)
    with pytest.raises(ValueError, match="takes its default from it"):
        define_key("t.derived", "y", "Derived.", PKG, kind=STR, fallback=base)  # type: ignore[call-overload]
    stream = define_key("t.<stream>.base", "x", "Base.", PKG, kind=STR)
    with pytest.raises(ValueError, match="placeholders it lacks"):
        define_key("t.other", None, "Other.", PKG, kind=STR, fallback=stream)


def test_one_key_one_declaring_package():
    define_key("t.shared", "1", "Shared.", PKG + ".a", kind=Int())
    with pytest.raises(ValueError, match=r"declared by tests.config_keys.a and again by tests.config_keys.b"):
        define_key("t.shared", "2", "Shared.", PKG + ".b", kind=Int())
    # The same package declaring it again (a module reloaded) replaces it.
    again = define_key("t.shared", "3", "Shared.", PKG + ".a", kind=Int())
    assert again.get({}) == 3


def test_values_written_back_as_config_text():
    flag = define_key("t.written", False, "A flag.", PKG, kind=BOOL)
    items = define_key("t.written.list", "", "Items.", PKG, kind=LIST)
    assert flag.to_config(True) == "true"
    assert items.to_config(("a", "b")) == "a,b"
    assert items.get({"t.written.list": items.to_config(("a", "b"))}) == ("a", "b")


def test_keys_declared_without_a_kind_are_text():
    legacy = define_key("t.legacy", 100, "Legacy.", PKG)
    assert legacy.get({}) == "100"
    assert not legacy.typed
