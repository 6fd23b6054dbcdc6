"""sparza's configuration: the :class:`Config` mapping (:mod:`sparza.config.core`), the key registry every
package declares its keys in and reads them through (:mod:`sparza.config.registry`), the whole-config check
run before a job starts (:mod:`sparza.config.check`), Samza's spellings (:mod:`sparza.config.samza`) and the
generated key reference (:mod:`sparza.config.reference`).

``from sparza.config import Config, define_key, Int`` is the import every package uses; the names below are
those of :mod:`sparza.config.core` and :mod:`sparza.config.registry`.
"""

from sparza.config.core import (
    ENV_PREFIX,
    Config,
    ConfigError,
    ValueCheck,
    define_check,
    defined_checks,
    is_secret_key,
    parse_bool,
    parse_byte_size,
    parse_duration_ms,
)
from sparza.config.registry import (
    BOOL,
    BYTES,
    DURATION_MS,
    FLOAT,
    INT,
    LIST,
    STR,
    Bool,
    ByteSize,
    Choice,
    ConfigKey,
    DefaultKey,
    Duration,
    Float,
    Int,
    Kind,
    OptionalKey,
    Str,
    StrList,
    define_key,
    defined_keys,
    find_key,
)

__all__ = [
    "BOOL",
    "BYTES",
    "DURATION_MS",
    "ENV_PREFIX",
    "FLOAT",
    "INT",
    "LIST",
    "STR",
    "Bool",
    "ByteSize",
    "Choice",
    "Config",
    "ConfigError",
    "ConfigKey",
    "DefaultKey",
    "Duration",
    "Float",
    "Int",
    "Kind",
    "OptionalKey",
    "Str",
    "StrList",
    "ValueCheck",
    "define_check",
    "define_key",
    "defined_checks",
    "defined_keys",
    "find_key",
    "is_secret_key",
    "parse_bool",
    "parse_byte_size",
    "parse_duration_ms",
]
