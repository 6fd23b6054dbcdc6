"""The root of sparza's exceptions and the errors shared by every package.

Each package keeps its own exceptions next to its code, derived from :class:`SparzaError`, so a
caller can catch everything sparza raises with one ``except`` and still match precise failures.
"""

from __future__ import annotations

__all__ = ["ConfigError", "SerdeError", "SparzaError", "StartCheckError", "StorageUnavailableError"]


class SparzaError(Exception):
    """Root of every error sparza raises on purpose."""


class ConfigError(SparzaError, ValueError):
    """A config key is missing or its value is malformed.

    The message names the key, the value found (masked for secrets) and what was expected, so
    the operator can fix the config file without reading code.
    """

    def __init__(self, key: str, value: object, expected: str, *, secret: bool = False,
                 message: str | None = None) -> None:
        self.key = key
        self.value = value
        self.expected = expected
        if message is not None:  # a caller that words the whole line itself (it still names the key)
            super().__init__(message)
            return
        if value is None:
            found = "is missing"
        else:
            shown = "<redacted>" if secret else repr(value)
            found = f"has value {shown}"
        super().__init__(f"config key '{key}' {found}: expected {expected}")


class StartCheckError(ConfigError):
    """A check ``sparza run`` makes on the driver before Spark starts failed (a class that does not
    import, an undeclared store, a missing stream, storage that refuses or does not answer).

    Deterministic or environmental, never worth a Spark retry: the message names the config key
    and what to do; the CLI exits 2.
    """


class SerdeError(SparzaError, ValueError):
    """A message could not be serialized or deserialized."""


class StorageUnavailableError(SparzaError, ConnectionError):
    """A storage service (Azure, Azurite, a blob store) could not be reached.

    Raised after retries are exhausted; the message says which endpoint and what to check.
    """
