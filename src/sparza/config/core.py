"""Samza-style configuration: an immutable mapping of dotted keys to string values.

Every value is kept as a string (as in Samza) and typed by the getter that reads it, so one
config can be loaded from YAML, ``.properties`` files or environment variables alike. A getter
that cannot parse a value raises :class:`~sparza.errors.ConfigError` naming the key, the value
and what it expected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sparza.errors import ConfigError

__all__ = [
    "ENV_PREFIX",
    "Config",
    "ConfigError",
    "ValueCheck",
    "define_check",
    "defined_checks",
    "is_secret_key",
    "parse_bool",
    "parse_byte_size",
    "parse_duration_ms",
]

ENV_PREFIX = "SPARZA_CONF_"
"""Environment overrides: ``SPARZA_CONF_job__name=x`` sets ``job.name`` (``__`` stands for ``.``)."""

_MISSING: Any = object()
_T = TypeVar("_T")

_SECRET_WORDS = ("account.key", "password", "secret", "connect", "sas", "sensitive.", "token", "credential",
                 "user.info")


def is_secret_key(key: str) -> bool:
    """True for keys whose values must never be shown (account keys, connection strings, tokens)."""
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_WORDS)


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_DURATION_UNITS = {"": 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_NUM_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_byte_size(text: str) -> int:
    """Parse ``10485760``, ``10MB``, ``10 MiB`` or ``512k`` into bytes (units are binary, as Spark's).

    Raises ``ValueError`` for anything else.
    """
    match = _NUM_UNIT.match(str(text))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a byte size: {text!r}")
    return _scaled(match.group(1), _SIZE_UNITS[match.group(2).lower()])


def _scaled(number: str, unit: int) -> int:
    # Whole numbers stay exact (a float would round 2**63-1, Java's Long.MAX_VALUE, up).
    return int(number) * unit if number.isdigit() else int(float(number) * unit)


def parse_bool(text: str) -> bool:
    """Parse ``true``/``false`` (also yes/no, 1/0, on/off, any case, surrounding blanks ignored).

    Raises ``ValueError`` for anything else.
    """
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ValueError(text)


def parse_duration_ms(text: str) -> int:
    """Parse ``1500``, ``1500ms``, ``30s``, ``5m``, ``1h`` or ``2d`` into milliseconds."""
    match = _NUM_UNIT.match(str(text))
    if not match or match.group(2).lower() not in _DURATION_UNITS:
        raise ValueError(f"not a duration: {text!r}")
    return _scaled(match.group(1), _DURATION_UNITS[match.group(2).lower()])


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list | tuple):
        out[prefix] = ",".join(_scalar(v) for v in value)
    elif value is None:
        out[prefix] = ""
    else:
        out[prefix] = _scalar(value)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Config(Mapping[str, str]):
    """An immutable mapping of Samza-style dotted keys (``systems.out.samza.factory``) to strings.

    Typed getters parse on read and raise :class:`ConfigError` with the key and value on bad input;
    ``subset`` gives the keys under a prefix; secrets are masked in ``repr``. The string getters
    (``get_str("app.my.key", "x")``) are for a job's own settings; sparza reads its keys through the objects
    :func:`~sparza.config.define_key` returns, whose declaration holds the one default.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        flat: dict[str, str] = {}
        _flatten("", dict(values or {}), flat)
        self._values = flat

    # --- Mapping ---------------------------------------------------------------------------
    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: ("<redacted>" if is_secret_key(k) else v) for k, v in sorted(self._values.items())}
        return f"Config({shown})"

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._values == other._values
        return NotImplemented

    # --- construction ----------------------------------------------------------------------
    @classmethod
    def of(cls, values: Mapping[str, Any] | None) -> Config:
        """``values`` as a Config: itself when it is one already (no copy), else a new one (None: empty)."""
        return values if isinstance(values, Config) else cls(values)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Config:
        """Load a ``.yaml``/``.yml`` (nested or dotted keys) or ``.properties`` file."""
        p = Path(path)
        if not p.is_file():
            raise ConfigError("--config", str(p), "an existing YAML or .properties file")
        text = p.read_text(encoding="utf-8")
        if p.suffix.lower() in (".yaml", ".yml", ".json"):
            return cls.from_yaml(text, source=str(p))
        return cls.from_properties(text)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<yaml>") -> Config:
        """Parse YAML text; nested maps become dotted keys and lists become comma-separated values."""
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            # One line: the problem and where (PyYAML's message spans lines with a caret drawing).
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(source, None, "", message=f"config file {source} is not valid YAML: {problem}{where}"
                              ) from exc
        if not isinstance(data, Mapping):
            raise ConfigError(source, type(data).__name__, "a YAML mapping of config keys")
        return cls(data)

    @classmethod
    def from_properties(cls, text: str) -> Config:
        """Parse Java ``.properties`` text (``key=value`` or ``key: value``, ``#``/``!`` comments)."""
        values: dict[str, str] = {}
        pending = ""
        for raw in text.splitlines():
            line = pending + raw.strip()
            pending = ""
            if not line or line[0] in "#!":
                continue
            if line.endswith("\\"):
                pending = line[:-1]
                continue
            match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
            if match:
                values[match.group(1)] = match.group(2)
            else:
                values[line] = ""
        return cls(values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, prefix: str = ENV_PREFIX) -> Config:
        """Keys from environment variables: ``SPARZA_CONF_a__b=v`` gives ``a.b=v``."""
        env = os.environ if environ is None else environ
        return cls({k[len(prefix):].replace("__", "."): v for k, v in env.items() if k.startswith(prefix)})

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, *, overrides: Mapping[str, Any] | None = None,
             environ: Mapping[str, str] | None = None) -> Config:
        """A file, then ``SPARZA_CONF_*`` environment overrides, then explicit overrides (last wins)."""
        base = cls.from_file(path) if path is not None else cls()
        return base.with_overrides(cls.from_env(environ)).with_overrides(overrides or {})

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        """A new config with ``overrides`` applied on top of this one."""
        merged = dict(self._values)
        merged.update(Config(overrides)._values)
        return Config(merged)

    def subset(self, prefix: str, *, strip_prefix: bool = True) -> Config:
        """The keys starting with ``prefix`` (a trailing ``.`` is implied), optionally with it removed."""
        if prefix and not prefix.endswith("."):
            prefix += "."
        return Config({(k[len(prefix):] if strip_prefix else k): v
                       for k, v in self._values.items() if k.startswith(prefix)})

    # --- typed getters ---------------------------------------------------------------------
    def _raw(self, key: str, default: Any, expected: str) -> str | None:
        value = self._values.get(key)
        if value is None or value == "":
            if default is _MISSING:
                raise ConfigError(key, None, expected)
            return None
        return value

    def _parse(self, key: str, default: _T, expected: str, parse: Any) -> Any:
        raw = self._raw(key, default, expected)
        if raw is None:
            return default
        try:
            return parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(key, raw, expected, secret=is_secret_key(key)) from exc

    def get_str(self, key: str, default: Any = _MISSING) -> Any:
        """The value as a string; ``default`` when absent, else :class:`ConfigError`."""
        raw = self._raw(key, default, "a value")
        return default if raw is None else raw

    def get_int(self, key: str, default: Any = _MISSING, *, min_value: int | None = None) -> Any:
        """The value as an integer (optionally at least ``min_value``)."""
        expected = "an integer" + (f" >= {min_value}" if min_value is not None else "")

        def parse(raw: str) -> int:
            value = int(raw.strip())
            if min_value is not None and value < min_value:
                raise ValueError(raw)
            return value

        return self._parse(key, default, expected, parse)

    def get_float(self, key: str, default: Any = _MISSING) -> Any:
        """The value as a float."""
        return self._parse(key, default, "a number", lambda raw: float(raw.strip()))

    def get_bool(self, key: str, default: Any = _MISSING) -> Any:
        """``true``/``false`` (also yes/no, 1/0, on/off, any case): :func:`parse_bool`."""
        return self._parse(key, default, "true or false", parse_bool)

    def get_list(self, key: str, default: Any = _MISSING) -> Any:
        """A comma-separated list, items stripped and empty items dropped."""
        raw = self._raw(key, default, "a comma-separated list")
        if raw is None:
            return default
        return [item.strip() for item in raw.split(",") if item.strip()]

    def get_bytes(self, key: str, default: Any = _MISSING, *, min_value: int = 0) -> Any:
        """A byte size: ``1048576``, ``10MB``, ``512k`` (binary units)."""
        expected = "a byte size such as 10485760, 512KB or 10MB" + (f" (at least {min_value})" if min_value else "")

        def parse(raw: str) -> int:
            value = parse_byte_size(raw)
            if value < min_value:
                raise ValueError(raw)
            return value

        return self._parse(key, default, expected, parse)

    def get_duration_ms(self, key: str, default: Any = _MISSING) -> Any:
        """A duration in milliseconds: ``1500``, ``30s``, ``5m``, ``1h``."""
        return self._parse(key, default, "a duration in ms such as 1500, 30s or 5m", parse_duration_ms)

    def get_choice(self, key: str, choices: tuple[str, ...], default: Any = _MISSING) -> Any:
        """One of ``choices`` (case-insensitive); the error lists them."""
        expected = "one of " + ", ".join(choices)

        def parse(raw: str) -> str:
            lowered = raw.strip().lower()
            for choice in choices:
                if choice.lower() == lowered:
                    return choice
            raise ValueError(raw)

        return self._parse(key, default, expected, parse)

    def require(self, *keys: str) -> None:
        """Raise :class:`ConfigError` for the first of ``keys`` that is missing or empty."""
        for key in keys:
            self.get_str(key)


@dataclass(frozen=True, slots=True)
class ValueCheck:
    """How the package that owns some keys checks their values in a whole config (``sparza config check``
    and the start of ``sparza run``), declared like its keys so :mod:`sparza.config` imports no package.

    ``check(config)`` raises :class:`ConfigError` for the first problem it finds, or returns a list of the
    ConfigErrors it found (any other return value means no problem). Checks run by ``order``, then package.
    ``needs_translation``: False for a check that also runs when Samza's spellings could not all be
    translated (it reads nothing a translation would change)."""

    package: str
    check: Callable[[Config], object]
    order: int = 100
    needs_translation: bool = True


_CHECKS: dict[tuple[str, Callable[[Config], object]], ValueCheck] = {}


def define_check(package: str, check: Callable[[Config], object], *, order: int = 100,
                 needs_translation: bool = True) -> ValueCheck:
    """Declare a value check (call at import time of the package that owns the keys, as ``define_key``)."""
    entry = ValueCheck(package, check, order, needs_translation)
    _CHECKS[(package, check)] = entry
    return entry


def defined_checks() -> list[ValueCheck]:
    """Every value check declared so far, in the order they run."""
    return sorted(_CHECKS.values(), key=lambda c: (c.order, c.package))
