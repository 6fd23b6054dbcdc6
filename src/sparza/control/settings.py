"""The config keys control messages read, parsed once into :class:`ControlSettings`.

Keys are declared here with their defaults so the docs' reference tables list them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparza.config import BOOL, FLOAT, INT, LIST, STR, Choice, Config, Int, define_check, define_key
from sparza.control.messages import FORMATS, SAMZA_FORMAT, SPARZA_FORMAT
from sparza.errors import ConfigError
from sparza.streams import SystemStream
from sparza.systems.settings import STREAM_INTERMEDIATE

__all__ = [
    "CONTROL_FORMAT",
    "DELETE_COMMITTED",
    "HOLDBACK_MS",
    "IDLE_TIMEOUT",
    "IDLE_TIMEOUT_KEY",
    "INTERMEDIATE_OUTPUTS",
    "INTERMEDIATE_OUTPUTS_KEY",
    "LATENESS_MS",
    "LATE_POLICY",
    "LATE_POLICY_KEY",
    "LATE_STREAM",
    "LATE_STREAM_KEY",
    "PRODUCER_COUNT",
    "QUORUM",
    "QUORUM_KEY",
    "ControlSettings",
    "LatePolicy",
    "delete_committed_key",
    "format_key",
    "holdback_key",
    "intermediate_key",
    "lateness_key",
    "producer_count_key",
]

_PKG = "control"
IDLE_TIMEOUT_KEY = "task.watermark.idle.timeout.ms"
QUORUM_KEY = "task.watermark.quorum.percentage"
INTERMEDIATE_OUTPUTS_KEY = "task.intermediate.outputs"
LATE_POLICY_KEY = "task.late.messages.policy"
LATE_STREAM_KEY = "task.late.messages.stream"

_S = "systems.<system>.streams.<stream>."
IDLE_TIMEOUT = define_key(IDLE_TIMEOUT_KEY, -1, "Upstream producers (and source partitions) not heard from for this "
                          "long are left out of the watermark min, if a quorum remains; -1 turns idle handling off.",
                          _PKG, kind=INT)
QUORUM = define_key(QUORUM_KEY, 0.5, "Fraction (0-1] of an intermediate partition's live producers that must be "
                    "active for idle ones to be left out of its watermark.", _PKG, kind=FLOAT)
INTERMEDIATE_OUTPUTS = define_key(INTERMEDIATE_OUTPUTS_KEY, "", "Comma list of system.stream a task writes that are "
                                  "intermediate streams: it writes watermark and end-of-stream control messages to "
                                  "every partition of each (set by the planner).", _PKG, kind=LIST)
LATE_POLICY = define_key(LATE_POLICY_KEY, "drop", "What happens to a user message behind the task watermark: 'drop' "
                         "(counted in the late-messages metric) or 'route' (sent to task.late.messages.stream).", _PKG,
                         kind=Choice("drop", "route"))
LATE_STREAM = define_key(LATE_STREAM_KEY, None, "The system.stream late messages are routed to when the policy is "
                         "'route'.", _PKG, kind=STR)
LATENESS_MS = define_key(_S + "watermark.lateness.ms", 0, "How far behind the largest event time seen a source "
                         "partition's watermark stays (allowed out-of-orderness).", _PKG, kind=Int(min_value=0))
CONTROL_FORMAT = define_key(_S + "control.format", SPARZA_FORMAT, "Control-message protocol of an intermediate "
                            "stream: 'sparza' (bodies with taskCount, every upstream task to every partition) or "
                            "'samza' (Samza's bodies without taskCount, sent to one aggregate partition whose reader "
                            "re-broadcasts them), for a Samza job upstream or downstream. Both bodies are always read.",
                            _PKG, kind=Choice(*FORMATS))
HOLDBACK_MS = define_key(_S + "watermark.holdback.ms", 0, "How far behind the task watermark the watermark this job "
                         "writes into this intermediate output stream is: what its stateful operators may still emit "
                         "behind their watermark (a stream-stream join's unmatched messages, a window's late panes), "
                         "so it is not late downstream (set by the planner).", _PKG, kind=Int(min_value=0))
PRODUCER_COUNT = define_key(_S + "control.producer.count", 0, "How many upstream tasks write control messages into "
                            "this intermediate input stream; needed when they carry no taskCount (format 'samza'). "
                            "Samza takes it from its job model: the tasks of the upstream job that read its inputs.",
                            _PKG, kind=Int(min_value=0))
DELETE_COMMITTED = define_key(_S + "samza.delete.committed.messages", False,
                              "Delete the stream's messages once every task of the job reading it committed past them "
                              "(Samza's streams.<id>.samza.delete.committed.messages); an application's plan sets it "
                              "for the intermediate streams it creates, whose only reader is the next stage.", _PKG,
                              kind=BOOL)


def _names(stream: SystemStream) -> dict[str, str]:
    return {"system": stream.system, "stream": stream.stream}


def lateness_key(stream: SystemStream) -> str:
    """``systems.<s>.streams.<x>.watermark.lateness.ms`` for ``stream``."""
    return LATENESS_MS.name(**_names(stream))


def format_key(stream: SystemStream) -> str:
    """``systems.<s>.streams.<x>.control.format`` for ``stream``."""
    return CONTROL_FORMAT.name(**_names(stream))


def holdback_key(stream: SystemStream) -> str:
    """``systems.<s>.streams.<x>.watermark.holdback.ms`` for ``stream``."""
    return HOLDBACK_MS.name(**_names(stream))


def producer_count_key(stream: SystemStream) -> str:
    """``systems.<s>.streams.<x>.control.producer.count`` for ``stream``."""
    return PRODUCER_COUNT.name(**_names(stream))


def delete_committed_key(stream: SystemStream) -> str:
    """``systems.<s>.streams.<x>.samza.delete.committed.messages`` for ``stream``."""
    return DELETE_COMMITTED.name(**_names(stream))


def intermediate_key(stream: SystemStream) -> str:
    """``systems.<s>.streams.<x>.samza.intermediate`` for ``stream``."""
    return STREAM_INTERMEDIATE.name(**_names(stream))


class LatePolicy:
    """Names of the late-message policies (``task.late.messages.policy``)."""

    DROP = "drop"
    ROUTE = "route"
    ALL = (DROP, ROUTE)


@dataclass(frozen=True, slots=True)
class ControlSettings:
    """The control-message settings of one job, read from its config with key-naming errors."""

    idle_timeout_ms: int = -1
    quorum: float = 0.5
    intermediate_outputs: tuple[SystemStream, ...] = ()
    late_policy: str = LatePolicy.DROP
    late_stream: SystemStream | None = None
    _intermediate: frozenset[SystemStream] = field(default_factory=frozenset)
    _lateness: dict[SystemStream, int] = field(default_factory=dict)
    _formats: dict[SystemStream, str] = field(default_factory=dict)
    _producer_counts: dict[SystemStream, int] = field(default_factory=dict)
    _holdbacks: dict[SystemStream, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Config, streams: list[SystemStream] | None = None) -> ControlSettings:
        """Parse the keys; ``streams`` are the inputs whose intermediate flag and lateness are read."""
        idle = IDLE_TIMEOUT.get(config)
        if idle == 0 or idle < -1:
            raise ConfigError(IDLE_TIMEOUT_KEY, str(idle), "-1 (off) or a positive number of ms")
        quorum = QUORUM.get(config)
        if not 0.0 < quorum <= 1.0:
            raise ConfigError(QUORUM_KEY, str(quorum), "a fraction in (0, 1]")
        outputs: list[SystemStream] = []
        for item in INTERMEDIATE_OUTPUTS.get(config):
            try:
                outputs.append(SystemStream.parse(item))
            except ValueError as exc:
                raise ConfigError(INTERMEDIATE_OUTPUTS_KEY, item, "a comma list of system.stream") from exc
        policy = LATE_POLICY.get(config)
        late_stream: SystemStream | None = None
        raw_stream = LATE_STREAM.get(config)
        if raw_stream:
            try:
                late_stream = SystemStream.parse(raw_stream)
            except ValueError as exc:
                raise ConfigError(LATE_STREAM_KEY, raw_stream, "system.stream") from exc
        if policy == LatePolicy.ROUTE and late_stream is None:
            raise ConfigError(LATE_STREAM_KEY, None, f"a system.stream because {LATE_POLICY_KEY} is 'route'")
        intermediate: set[SystemStream] = set()
        lateness: dict[SystemStream, int] = {}
        formats: dict[SystemStream, str] = {}
        counts: dict[SystemStream, int] = {}
        holdbacks: dict[SystemStream, int] = {}
        for stream in outputs:
            formats[stream] = CONTROL_FORMAT.get(config, **_names(stream))
            holdbacks[stream] = HOLDBACK_MS.get(config, **_names(stream))
        for stream in streams or []:
            if STREAM_INTERMEDIATE.get(config, **_names(stream)):
                intermediate.add(stream)
            lateness[stream] = LATENESS_MS.get(config, **_names(stream))
            formats[stream] = CONTROL_FORMAT.get(config, **_names(stream))
            counts[stream] = PRODUCER_COUNT.get(config, **_names(stream))
            if formats[stream] == SAMZA_FORMAT and counts[stream] == 0:
                raise ConfigError(producer_count_key(stream), None,
                                  f"the number of upstream tasks writing {stream}, because its control.format is "
                                  "'samza' (Samza's messages do not carry it; Samza takes it from the upstream job "
                                  "model: the tasks that read the upstream job's inputs)")
        return cls(idle, quorum, tuple(outputs), policy, late_stream, frozenset(intermediate), lateness, formats,
                   counts, holdbacks)

    def format(self, stream: SystemStream) -> str:
        """The control-message format of an intermediate stream (``sparza`` unless configured)."""
        return self._formats.get(stream, SPARZA_FORMAT)

    def producer_count(self, stream: SystemStream) -> int:
        """The configured number of upstream tasks of an intermediate input stream (0: not configured)."""
        return self._producer_counts.get(stream, 0)

    def holdback_ms(self, stream: SystemStream) -> int:
        """How far behind the task watermark the watermark written into intermediate output ``stream`` is."""
        return self._holdbacks.get(stream, 0)

    def is_intermediate(self, stream: SystemStream) -> bool:
        """True when ``stream`` carries control messages from upstream tasks."""
        return stream in self._intermediate

    def lateness_ms(self, stream: SystemStream) -> int:
        """The allowed lateness of a source stream (0 unless configured)."""
        return self._lateness.get(stream, 0)


define_check(_PKG, ControlSettings.from_config)
