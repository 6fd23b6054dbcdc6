"""What happens to a record with a data error (:class:`~sparza.errors.DataError`: a serde failure, a typed
table's not-null or type violation, a record over a size limit): such an error is deterministic, so it is
never retried.

- Default: the job fails at once, naming the stream, partition, offset, key and column.
- ``task.dead.letter.stream: <system>.<stream>``: the input record goes there instead, with the error
  attached (:func:`dead_letter_value`), and the job goes on. Counted in the status line, the summary and
  ``aggregate/messages-dead-lettered``.
- Samza's own choice, accepted in its spelling: ``task.drop.deserialization.errors: true`` (input that does
  not deserialize) and ``task.drop.serialization.errors: true`` (output that cannot be written: does not
  serialize, breaks a typed table's schema, is too large) skip the record, counted like the above, and
  the summary names the setting. With a dead-letter stream as well, such records go there rather than
  being dropped.

Outputs the task sent for the record before the error stay sent.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from sparza.config import BOOL, STR, Config, define_check, define_key
from sparza.errors import ConfigError, DataError
from sparza.streams import SystemStream

__all__ = ["DEAD_LETTER_KEY", "DEAD_LETTER_STREAM", "DROP_DESERIALIZATION", "DROP_DESERIALIZATION_KEY",
           "DROP_SERIALIZATION", "DROP_SERIALIZATION_KEY", "DataErrorPolicy", "dead_letter_value"]

DEAD_LETTER_KEY = "task.dead.letter.stream"
DROP_DESERIALIZATION_KEY = "task.drop.deserialization.errors"
DROP_SERIALIZATION_KEY = "task.drop.serialization.errors"

DEAD_LETTER_STREAM = define_key(DEAD_LETTER_KEY, None,
                                "system.stream that receives input records with a data error (serde failure, "
                                "typed-table not-null or type violation, oversized record), with the error attached, "
                                "instead of failing the job; counted (aggregate/messages-dead-lettered). Unset: such "
                                "a record fails the job, naming it.", "runtime", kind=STR)
DROP_SERIALIZATION = define_key(DROP_SERIALIZATION_KEY, False,
                                "Samza's: skip (and count) input messages whose output cannot be written (does not "
                                "serialize, breaks a typed table's schema, too large) instead of stopping the job; "
                                "task.dead.letter.stream keeps them instead.", "runtime", kind=BOOL)
DROP_DESERIALIZATION = define_key(DROP_DESERIALIZATION_KEY, False,
                                  "Skip (and count) messages that fail to deserialize instead of stopping the job.",
                                  "runtime", kind=BOOL)


@dataclass(frozen=True)
class DataErrorPolicy:
    """What a task does with a record that has a data error (see the module docstring)."""

    dead_letter: SystemStream | None = None
    drop_deserialization: bool = False
    drop_serialization: bool = False

    @classmethod
    def from_config(cls, config: Config) -> DataErrorPolicy:
        """Read ``task.dead.letter.stream`` and Samza's two ``task.drop.*.errors`` keys."""
        raw = DEAD_LETTER_STREAM.get(config)
        stream = None
        if raw:
            try:
                stream = SystemStream.parse(raw)
            except ValueError as exc:
                raise ConfigError(DEAD_LETTER_KEY, raw, "system.stream, e.g. delta.dead-letters") from exc
        return cls(stream, DROP_DESERIALIZATION.get(config), DROP_SERIALIZATION.get(config))

    def drops(self, deserializing: bool) -> bool:
        """True when such a record is skipped (Samza's drop keys) rather than failing the job."""
        return self.drop_deserialization if deserializing else self.drop_serialization


define_check("runtime", DataErrorPolicy.from_config)


def dead_letter_value(error: BaseException, *, task: str, ssp: str, offset: str, key: bytes | None,
                      value: bytes | None, timestamp: int | None) -> bytes:
    """The dead-letter record's value: JSON with the error (kind, message, column), where the record came
    from, and its key and value as base64 (the original bytes, whatever their serde)."""
    doc: dict[str, Any] = {
        "error": f"{type(error).__name__}: {error}",
        "kind": "data error",
        "column": getattr(error, "column", None) if isinstance(error, DataError) else None,
        "task": task,
        "ssp": ssp,
        "offset": offset,
        "timestamp": timestamp,
        "key_base64": None if key is None else base64.b64encode(bytes(key)).decode("ascii"),
        "value_base64": None if value is None else base64.b64encode(bytes(value)).decode("ascii"),
    }
    return json.dumps(doc, sort_keys=True).encode("utf-8")
