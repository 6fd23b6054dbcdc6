"""The root of sparza's exceptions and the errors shared by every package.

Each package keeps its own exceptions next to its code, derived from :class:`SparzaError`, so a
caller can catch everything sparza raises with one ``except`` and still match precise failures.
"""

from __future__ import annotations

import enum

__all__ = ["JOB_CONFIG_PLACEHOLDER", "PAYLOAD_PREFIX_KEY", "ConfigError", "DataError", "ErrorKind", "SerdeError",
           "SparzaError", "StartCheckError", "StorageUnavailableError", "classify", "job_config_ref", "payload_preview",
           "set_job_config_path", "set_payload_prefix_bytes"]

JOB_CONFIG_PLACEHOLDER = "<job config>"
"""Stands for the job's config file in a hint (``--config <job config>``); the CLI puts in the path it was given."""

_job_config_path: str | None = None


def set_job_config_path(path: str | None) -> None:
    """The config file this process runs (the CLI's ``--config``): what :func:`job_config_ref` names."""
    global _job_config_path
    _job_config_path = path


def job_config_ref() -> str:
    """The job's config file for a hint: the path the CLI was given, else :data:`JOB_CONFIG_PLACEHOLDER`."""
    return _job_config_path or JOB_CONFIG_PLACEHOLDER

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


class DataError(SparzaError, ValueError):
    """One record can never be processed as it is: a serde failure, a typed table's not-null or type
    violation, a record over a size limit. Deterministic (a retry fails the same way), so it is never
    retried: the job fails naming the record, or routes it to the dead-letter stream
    (``task.dead.letter.stream``). ``column`` names the offending column when there is one."""

    def __init__(self, message: str, *, column: str | None = None) -> None:
        self.column = column
        super().__init__(message)


class SerdeError(DataError):
    """A message could not be serialized or deserialized."""


class StorageUnavailableError(SparzaError, ConnectionError):
    """A storage service (Azure, Azurite, a blob store) could not be reached.

    Raised after retries are exhausted; the message says which endpoint and what to check.
    """


class ErrorKind(enum.Enum):
    """What an exception raised while a task handles a message is, which decides what may happen to it."""

    CONFIG = "configuration error"
    """A config value cannot work (:class:`ConfigError`): exit code 2, never ignorable."""
    SYSTEM = "system error"
    """sparza's own machinery under the task failed (a missing stream, a broker, storage): never ignorable."""
    DATA = "data error"
    """The record cannot be processed (:class:`DataError`): fail, or route to the dead-letter stream."""
    TASK = "task exception"
    """The task's own code raised: fail, or skip when ``task.ignored.exceptions`` names it."""


def classify(exc: BaseException) -> ErrorKind:
    """The :class:`ErrorKind` of ``exc``: config and data errors by type, any other error sparza raises on
    purpose is a system error, everything else is the task's own exception."""
    if isinstance(exc, ConfigError):
        return ErrorKind.CONFIG
    if isinstance(exc, DataError):
        return ErrorKind.DATA
    if isinstance(exc, SparzaError | StorageUnavailableError):
        return ErrorKind.SYSTEM
    return ErrorKind.TASK
