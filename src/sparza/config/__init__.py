"""sparza's configuration: the :class:`Config` mapping and the key registry (:mod:`sparza.config.core`),
the whole-config check run before a job starts (:mod:`sparza.config.check`), Samza's spellings
(:mod:`sparza.config.samza`) and the generated key reference (:mod:`sparza.config.reference`).

``from sparza.config import Config, define_key`` is the import every package uses; the names below are
those of :mod:`sparza.config.core`.
"""

from sparza.config.core import (
    ENV_PREFIX,
    Config,
    ConfigError,
    ConfigKey,
    ValueCheck,
    define_check,
    define_key,
    defined_checks,
    defined_keys,
    is_secret_key,
    parse_bool,
    parse_byte_size,
    parse_duration_ms,
)

__all__ = [
    "ENV_PREFIX",
    "Config",
    "ConfigError",
    "ConfigKey",
    "ValueCheck",
    "define_check",
    "define_key",
    "defined_checks",
    "defined_keys",
    "is_secret_key",
    "parse_bool",
    "parse_byte_size",
    "parse_duration_ms",
]
