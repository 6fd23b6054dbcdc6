"""Stream-stream joins of the high-level API: pairs of messages of two streams with equal keys whose event
times are at most ``within`` apart.

``left.join(right, key_fn, other_key_fn, join_fn, within=timedelta(hours=1))`` buffers both sides in the
join's task store, keyed by key and event time (:mod:`sparza.api.join_state`). A message is matched
against the other side's buffer when it arrives, so each pair is emitted once, by whichever of its two
messages came second: ``join_fn(left, right)`` with the join key and the later event time of the two.
Buffers are dropped by the watermark (never by a clock), so a replay matches the same pairs:

- a message at ``t`` can still be matched while a message of the other side at ``t + within`` can arrive,
  i.e. until the watermark passes ``t + within + allowed_lateness_ms``; then it leaves the buffer, and a
  ``left`` (or ``outer``) join emits it unmatched as ``join_fn(left, None)`` (``join_fn(None, right)``)
  with its own event time;
- a message more than ``allowed_lateness_ms`` behind the watermark would miss partners already dropped:
  it is late, dropped and counted (``control/late-messages``) like a late window message.

Both inputs must be partitioned alike (the same key to the same partition number, the same partition
count: ``partition_by`` both sides with the same key and ``partitions``), as in Samza, whose join also
runs inside one task. Messages and keys are stored as JSON, so they must be JSON-able.

Samza's form is accepted too: ``join(other, join_function, key_serde, message_serde, other_message_serde,
ttl, name)`` with a ``JoinFunction`` (``apply``, ``getFirstKey``, ``getSecondKey``); the serdes are
unused (buffers are JSON) and the TTL is the time bound ``within``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from sparza.api.triggers import bounded_ms

__all__ = ["DRAIN_POLICIES", "JOIN_KINDS", "JoinFunction", "JoinSpec", "join_function_parts", "parse_duration"]

DRAIN_POLICIES = ("emit", "keep")
"""What a join does with its buffers when the job drains: ``emit`` its unmatched messages (left/outer) as at
end-of-stream and start the next run empty, or ``keep`` them in the store for the next run to match."""

JOIN_KINDS = ("inner", "left", "outer")
"""``inner``: matched pairs only; ``left``: also every left message that matched nothing, when its bound
expires; ``outer``: unmatched messages of both sides too."""


@runtime_checkable
class JoinFunction(Protocol):
    """Samza's ``JoinFunction`` in Python spelling: the join result and both sides' keys in one object
    (Samza's camelCase ``getFirstKey``/``getSecondKey`` are accepted as well)."""

    def apply(self, message: Any, other_message: Any) -> Any:
        """The result of a matched (or, in left/outer joins, unmatched: one side None) pair."""
        ...


def join_function_parts(fn: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """``(key_fn, other_key_fn, join_fn)`` of a Samza-style join function object; ValueError if it is none."""
    first = getattr(fn, "get_first_key", None) or getattr(fn, "getFirstKey", None)
    second = getattr(fn, "get_second_key", None) or getattr(fn, "getSecondKey", None)
    if not isinstance(fn, JoinFunction) or first is None or second is None:
        raise ValueError(f"{type(fn).__name__} is not a JoinFunction: it needs apply(message, other_message), "
                         f"get_first_key(message) and get_second_key(other_message)")
    return first, second, fn.apply


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A stream-stream join as declared: the two key functions, the result function, the time bound, the
    kind (:data:`JOIN_KINDS`) and how far behind the watermark a message may still be matched."""

    key_fn: Callable[[Any], Any]
    other_key_fn: Callable[[Any], Any]
    join_fn: Callable[[Any, Any], Any]
    within_ms: int
    kind: str = "inner"
    allowed_lateness_ms: int = 0
    on_drain: str = "emit"

    def emits_unmatched(self, side: str) -> bool:
        """Whether an unmatched message of ``side`` (``"l"`` or ``"r"``) is emitted when its bound expires."""
        return self.kind == "outer" or (self.kind == "left" and side == "l")

    @property
    def holdback_ms(self) -> int:
        """How far behind the join's watermark its output may be: operators after it see the watermark this
        much later, so what the join emits is never late for them. Matched pairs carry the later event time
        of two messages within the allowed lateness; unmatched messages leave ``within`` after that."""
        return self.allowed_lateness_ms + (self.within_ms if self.kind != "inner" else 0)


def parse_duration(value: Any, what: str) -> int:
    """``value`` (int ms or ``timedelta``) as ms >= 0, else ValueError naming ``what``."""
    return bounded_ms(value, what)
