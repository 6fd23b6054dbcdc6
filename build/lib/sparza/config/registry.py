"""The key registry: every config key sparza reads, declared once with its type, default and meaning.

A package declares each of its keys at import time and reads it only through the object it got back::

    COMMIT_MS = define_key("task.commit.ms", "1000", "Trigger interval...", "runtime", kind=Int(min_value=0))
    STORE_FACTORY = define_key("stores.<store>.factory", "rocksdb", "...", "state.kv",
                               kind=Choice("rocksdb", "memory"))

    COMMIT_MS.get(config)                      # an int: the value, or the declared default
    STORE_FACTORY.get(config, store="counts")  # placeholders are filled by keyword

So the default lives in one place (the declaration), the getter returns the declared type (mypy sees
``DefaultKey[int]``), a bad value fails with :class:`~sparza.errors.ConfigError` naming the key, and the
reference page (:mod:`sparza.config.reference`) is generated from the same declarations. A key without a
default is an :class:`OptionalKey`: ``get`` returns None when it is unset and ``require`` raises. A key may
fall back to another (``systems.<system>.streams.<stream>.samza.msg.serde`` to the system's
``systems.<system>.samza.msg.serde``): it is read first, then its fallback, then the fallback's default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from sparza.config.core import _scalar, is_secret_key, parse_bool, parse_byte_size, parse_duration_ms
from sparza.errors import ConfigError

__all__ = [
    "BOOL",
    "BYTES",
    "DURATION_MS",
    "FLOAT",
    "INT",
    "LIST",
    "STR",
    "Bool",
    "ByteSize",
    "Choice",
    "ConfigKey",
    "DefaultKey",
    "Duration",
    "Float",
    "Int",
    "Kind",
    "OptionalKey",
    "Str",
    "StrList",
    "define_key",
    "defined_keys",
    "find_key",
]

_T = TypeVar("_T")
_HOLE = re.compile(r"<([a-z]+)>")


# --- kinds: how the text of a value becomes a typed value --------------------------------------------
class Kind(Generic[_T]):
    """How the text of a config value becomes the typed value a getter returns.

    ``parse`` raises ``ValueError`` for text that is no such value; ``expected`` says what a good value
    looks like (in errors and in the reference); ``render`` writes a value back as config text."""

    expected = "a value"

    @property
    def shown(self) -> str:
        """What the reference's value column says: ``expected``."""
        return self.expected

    def parse(self, raw: str) -> _T:
        """The typed value of ``raw`` (stripped of surrounding blanks already); ValueError if it is none."""
        raise NotImplementedError

    def render(self, value: _T) -> str:
        """``value`` as config text (the reference shows defaults this way)."""
        return _scalar(value)


class Str(Kind[str]):
    """Any text, surrounding blanks removed."""

    @property
    def shown(self) -> str:
        """``text``."""
        return "text"

    def parse(self, raw: str) -> str:
        """The text itself."""
        return raw


class Bool(Kind[bool]):
    """``true``/``false`` (also yes/no, 1/0, on/off, any case)."""

    expected = "true or false"

    def parse(self, raw: str) -> bool:
        """:func:`~sparza.config.parse_bool`."""
        return parse_bool(raw)


class Int(Kind[int]):
    """An integer, optionally at least ``min_value``."""

    def __init__(self, min_value: int | None = None) -> None:
        self.min_value = min_value
        self.expected = "an integer" + (f" >= {min_value}" if min_value is not None else "")

    def parse(self, raw: str) -> int:
        """The integer; ValueError below ``min_value``."""
        value = int(raw)
        if self.min_value is not None and value < self.min_value:
            raise ValueError(raw)
        return value


class Float(Kind[float]):
    """A number, optionally within ``[min_value, max_value]`` (``min_exclusive``: above ``min_value``)."""

    def __init__(self, min_value: float | None = None, max_value: float | None = None, *,
                 min_exclusive: bool = False) -> None:
        self.min_value, self.max_value, self.min_exclusive = min_value, max_value, min_exclusive
        low = "" if min_value is None else f"{'>' if min_exclusive else '>='} {_scalar(min_value)}"
        high = "" if max_value is None else f"<= {_scalar(max_value)}"
        self.expected = "a number" + (" " + " and ".join(p for p in (low, high) if p) if low or high else "")

    def parse(self, raw: str) -> float:
        """The number; ValueError outside the bounds."""
        value = float(raw)
        if value != value:  # NaN passes no comparison
            raise ValueError(raw)
        if self.min_value is not None and (value < self.min_value or (self.min_exclusive and value == self.min_value)):
            raise ValueError(raw)
        if self.max_value is not None and value > self.max_value:
            raise ValueError(raw)
        return value


class ByteSize(Kind[int]):
    """A byte size: ``1048576``, ``10MB``, ``512k`` (binary units), at least ``min_value``."""

    def __init__(self, min_value: int = 0) -> None:
        self.min_value = min_value
        self.expected = "a byte size such as 10485760, 512KB or 10MB" + (
            f" (at least {min_value})" if min_value else "")

    def parse(self, raw: str) -> int:
        """The size in bytes."""
        value = parse_byte_size(raw)
        if value < self.min_value:
            raise ValueError(raw)
        return value


class Duration(Kind[int]):
    """A duration in milliseconds: ``1500``, ``30s``, ``5m``, ``1h``, ``2d``."""

    expected = "a duration in ms such as 1500, 30s or 5m"

    def parse(self, raw: str) -> int:
        """The duration in ms."""
        return parse_duration_ms(raw)


class StrList(Kind[tuple[str, ...]]):
    """A comma-separated list; items stripped, empty items dropped (a tuple: defaults cannot be mutated)."""

    expected = "a comma-separated list"

    def parse(self, raw: str) -> tuple[str, ...]:
        """The items."""
        return tuple(item.strip() for item in raw.split(",") if item.strip())

    def render(self, value: tuple[str, ...]) -> str:
        """Items joined with commas."""
        return ",".join(value)


class Choice(Kind[str]):
    """One of ``choices``, case-insensitive; the value returned is the choice as declared."""

    def __init__(self, *choices: str) -> None:
        if not choices:
            raise ValueError("Choice needs at least one choice")
        self.choices = choices
        self.expected = "one of " + ", ".join(choices)

    def parse(self, raw: str) -> str:
        """The matching choice."""
        lowered = raw.lower()
        for choice in self.choices:
            if choice.lower() == lowered:
                return choice
        raise ValueError(raw)


STR: Kind[str] = Str()
"""Text (the kind of keys declared without one)."""
BOOL: Kind[bool] = Bool()
"""true or false."""
INT: Kind[int] = Int()
"""Any integer."""
FLOAT: Kind[float] = Float()
"""Any number."""
BYTES: Kind[int] = ByteSize()
"""A byte size."""
DURATION_MS: Kind[int] = Duration()
"""A duration in ms."""
LIST: Kind[tuple[str, ...]] = StrList()
"""A comma-separated list."""


# --- keys ----------------------------------------------------------------------------------------------
class ConfigKey(Generic[_T]):
    """A declared config key: its pattern (``systems.<system>.azureblob.threadPoolCount``), its default as
    written in config (None: none), one line on what it does, the package that reads it, the kind of its
    value and the key it falls back to. Read it through :class:`DefaultKey` or :class:`OptionalKey`.

    Placeholders (``<system>``, ``<stream>``, ``<store>``...) are filled by keyword in every method; a
    pattern ending in ``.*`` stands for a namespace of keys passed on as they are (:meth:`subset`)."""

    __slots__ = ("_default_value", "_holes", "default", "description", "fallback", "key", "kind", "package",
                 "typed")

    def __init__(self, key: str, default: str | None, default_value: Any, description: str, package: str,
                 kind: Kind[_T], fallback: ConfigKey[_T] | None, *, typed: bool) -> None:
        self.key = key
        self.default = default
        self.description = description
        self.package = package
        self.kind = kind
        self.fallback = fallback
        self.typed = typed
        """False for a key declared without a kind (read as text, shown without a type)."""
        self._default_value = default_value
        self._holes = tuple(dict.fromkeys(_HOLE.findall(key)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r}, default={self.default!r}, package={self.package!r})"

    @property
    def placeholders(self) -> tuple[str, ...]:
        """The names of the pattern's placeholders, in order (``("system", "stream")``)."""
        return self._holes

    def name(self, **names: str) -> str:
        """The key with its placeholders filled: ``name(system="out")`` → ``systems.out.azureblob...``."""
        if set(names) != set(self._holes):
            raise TypeError(f"config key {self.key!r} takes the names {', '.join(self._holes) or 'none'}, "
                            f"got {', '.join(sorted(names)) or 'none'}")
        text = self.key
        for hole, value in names.items():
            text = text.replace(f"<{hole}>", str(value))
        return text

    def _lookup(self, config: Mapping[str, str], names: Mapping[str, str]) -> tuple[str, str] | None:
        """(key, text) of the first key set along this key and its fallbacks; blank values count as unset."""
        key = self.name(**names)
        raw = config.get(key)
        if raw is not None and raw.strip():
            return key, raw.strip()
        if self.fallback is None:
            return None
        return self.fallback._lookup(config, {h: names[h] for h in self.fallback.placeholders})

    def _parse(self, key: str, raw: str) -> _T:
        try:
            return self.kind.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(key, raw, self.kind.expected, secret=is_secret_key(key)) from exc

    def raw(self, config: Mapping[str, str], **names: str) -> str | None:
        """The text set for this key (or along its fallbacks), stripped; None when none is set."""
        hit = self._lookup(config, names)
        return None if hit is None else hit[1]

    def where(self, config: Mapping[str, str], **names: str) -> str:
        """The key the value comes from: the first key set along this key and its fallbacks, else this key
        (for errors that name the key to fix)."""
        hit = self._lookup(config, names)
        return self.name(**names) if hit is None else hit[0]

    def is_set(self, config: Mapping[str, str], **names: str) -> bool:
        """True when ``config`` sets this key (or one of its fallbacks) to a non-blank value."""
        return self._lookup(config, names) is not None

    def find(self, config: Mapping[str, str]) -> list[dict[str, str]]:
        """The placeholder names of every instance of this pattern ``config`` sets, sorted: for
        ``stores.<store>.factory`` one ``{"store": ...}`` per store with a factory. ``<stream>`` may span dots."""
        regex = _pattern_regex(self.key)
        found = {tuple(sorted(m.groupdict().items())) for k in config if (m := regex.match(k))}
        return [dict(item) for item in sorted(found)]

    def subset(self, config: Mapping[str, str], **names: str) -> dict[str, str]:
        """For a ``prefix.*`` key: every key under the filled prefix, with the prefix removed."""
        if not self.key.endswith(".*"):
            raise TypeError(f"config key {self.key!r} is no namespace (a pattern ending in .*)")
        prefix = self.name(**names)[:-1]
        return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix) and len(k) > len(prefix)}

    def to_config(self, value: _T) -> str:
        """``value`` as the text this key takes in a config (to write a key for another job, a stage)."""
        return self.kind.render(value)


class DefaultKey(ConfigKey[_T]):
    """A key with a default (its own, or its fallback chain's): :meth:`get` always returns a value."""

    __slots__ = ()

    def get(self, config: Mapping[str, str], **names: str) -> _T:
        """The value set in ``config`` (or along the fallbacks), else the declared default."""
        hit = self._lookup(config, names)
        if hit is None:
            return self._default()
        return self._parse(*hit)

    def _default(self) -> _T:
        if isinstance(self.fallback, DefaultKey):
            return self.fallback._default()
        return self._default_value  # type: ignore[no-any-return]


class OptionalKey(ConfigKey[_T]):
    """A key without a default: :meth:`get` returns None when it is unset, :meth:`require` raises."""

    __slots__ = ()

    def get(self, config: Mapping[str, str], **names: str) -> _T | None:
        """The value set in ``config`` (or along the fallbacks), else None."""
        hit = self._lookup(config, names)
        return None if hit is None else self._parse(*hit)

    def require(self, config: Mapping[str, str], *, expected: str | None = None, **names: str) -> _T:
        """The value; :class:`ConfigError` naming the key (and ``expected``, else the kind) when it is unset."""
        hit = self._lookup(config, names)
        if hit is None:
            raise ConfigError(self.name(**names), None, expected or self.kind.expected)
        return self._parse(*hit)


_DEFINED: dict[str, ConfigKey[Any]] = {}


@overload
def define_key(key: str, default: None, description: str, package: str, *, kind: Kind[_T],
               fallback: DefaultKey[_T]) -> DefaultKey[_T]: ...
@overload
def define_key(key: str, default: None, description: str, package: str, *, kind: Kind[_T],
               fallback: OptionalKey[_T] | None = None) -> OptionalKey[_T]: ...
@overload
def define_key(key: str, default: _T | str, description: str, package: str, *,  # type: ignore[overload-overlap]
               kind: Kind[_T]) -> DefaultKey[_T]: ...
@overload
def define_key(key: str, default: None, description: str, package: str) -> OptionalKey[str]: ...
@overload
def define_key(key: str, default: object, description: str, package: str) -> DefaultKey[str]: ...


def define_key(key: str, default: object, description: str, package: str, *, kind: Kind[Any] | None = None,
               fallback: ConfigKey[Any] | None = None) -> ConfigKey[Any]:
    """Declare a config key (at import time of the package that reads it) and get the object to read it with.

    ``default`` is the value as written in config (``"8MB"``, ``"30s"``) or as the kind's type (``8 << 20``);
    it is parsed now, so a bad default fails at import. ``kind`` types the value (:class:`Int`,
    :class:`Choice`...; without it the key is text). ``fallback`` is read when this key is unset; a key
    with a fallback has no default of its own. One key is declared by one package: declaring it again from
    another raises, so two packages cannot disagree about its default."""
    typed = kind is not None
    value_kind: Kind[Any] = kind if kind is not None else STR
    if fallback is not None:
        if default is not None:
            raise ValueError(f"config key {key!r}: a key with a fallback takes its default from it")
        if not set(fallback.placeholders) <= set(_HOLE.findall(key)):
            raise ValueError(f"config key {key!r}: its fallback {fallback.key!r} has placeholders it lacks")
    text: str | None = None
    value: Any = None
    if default is not None:
        text = default if isinstance(default, str) else value_kind.render(default)
        value = value_kind.parse(text.strip()) if text.strip() else _empty(value_kind, key)
    entry: ConfigKey[Any]
    if default is None and not isinstance(fallback, DefaultKey):
        entry = OptionalKey(key, None, None, description, package, value_kind, fallback, typed=typed)
    else:
        entry = DefaultKey(key, text, value, description, package, value_kind, fallback, typed=typed)
    existing = _DEFINED.get(key)
    if existing is not None and existing.package != package:
        raise ValueError(f"config key {key!r} is declared by {existing.package} and again by {package}: "
                         f"import the key object from {existing.package} instead")
    _DEFINED[key] = entry
    return entry


def _empty(kind: Kind[Any], key: str) -> Any:
    """The value of an empty default: an empty list for lists, else the declaration is wrong."""
    if isinstance(kind, StrList):
        return ()
    if isinstance(kind, Str):
        return ""
    raise ValueError(f"config key {key!r}: an empty default is no {kind.expected}")


def defined_keys() -> list[ConfigKey[Any]]:
    """Every key declared so far, sorted by package then key."""
    return sorted(_DEFINED.values(), key=lambda k: (k.package, k.key))


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A key pattern as a regex with a named group per placeholder: ``<stream>``/``<key>``/``<name>`` and
    ``*`` may span dots (stream ids and pass-through keys contain dots), other placeholders not."""
    out = []
    for part in re.split(r"(<[a-z]+>|\*)", pattern):
        if part == "*":
            out.append(r".+")
        elif part.startswith("<") and part.endswith(">"):
            name = part[1:-1]
            out.append(f"(?P<{name}>.+)" if name in ("stream", "key", "name") else f"(?P<{name}>[^.]+)")
        else:
            out.append(re.escape(part))
    return re.compile("^" + "".join(out) + "$")


def find_key(key: str, declared: Sequence[ConfigKey[Any]] | None = None) -> ConfigKey[Any] | None:
    """The declared key whose pattern ``key`` matches, the most specific first (fewest placeholders, then
    the longest pattern); None when no declared pattern matches."""
    best: ConfigKey[Any] | None = None
    best_rank: tuple[int, int] | None = None
    for entry in declared if declared is not None else _DEFINED.values():
        if _compiled(entry.key).match(key):
            rank = (entry.key.count("<") + entry.key.count("*"), -len(entry.key))
            if best_rank is None or rank < best_rank:
                best, best_rank = entry, rank
    return best


_REGEXES: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    regex = _REGEXES.get(pattern)
    if regex is None:
        regex = _REGEXES[pattern] = _pattern_regex(pattern)
    return regex
