"""The root of sparza's exceptions and the errors shared by every package.

Each package keeps its own exceptions next to its code, derived from :class:`SparzaError`, so a
caller can catch everything sparza raises with one ``except`` and still match precise failures.
"""

from __future__ import annotations

__all__ = ["PAYLOAD_PREFIX_KEY", "ConfigError", "SerdeError", "SparzaError", "StartCheckError",
           "StorageUnavailableError", "payload_preview", "set_payload_prefix_bytes"]

PAYLOAD_PREFIX_KEY = "task.error.payload.prefix.bytes"
_payload_prefix_bytes = 16


def set_payload_prefix_bytes(limit: int) -> None:
    """How many bytes of a message payload an error message may show (``task.error.payload.prefix.bytes``;
    0 shows none). Payloads may hold personal data, so errors show a short, marked prefix at most."""
    global _payload_prefix_bytes
    _payload_prefix_bytes = max(0, int(limit))


def payload_preview(data: object) -> str:
    """A payload (bytes, or any value) as an error may show it: its size and at most the configured
    prefix, marked as such, e.g. ``[payload: 120 bytes, first 16: b'{"user": "alice'...]``."""
    raw = bytes(data) if isinstance(data, bytes | bytearray | memoryview) else repr(data).encode("utf-8", "replace")
    kind = "bytes" if isinstance(data, bytes | bytearray | memoryview) else f"chars of {type(data).__name__}"
    limit = _payload_prefix_bytes
    if limit == 0 or not raw:
        return f"[payload: {len(raw)} {kind}, not shown ({PAYLOAD_PREFIX_KEY})]"
    if len(raw) <= limit:
        return f"[payload: {len(raw)} {kind}: {raw!r}]"
    return f"[payload: {len(raw)} {kind}, first {limit}: {raw[:limit]!r}...]"


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
