"""The scenario generator: one seed → one job shape, one input, one fault schedule.

Everything random comes from ``random.Random(seed)``, so a seed is a complete reproduction. The
generator knows nothing of sparza's code: it only picks config values and input data.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["COMMIT_STEPS", "CONTAINER_FAULTS", "DAYOPS_FAULTS", "DAYOPS_SALT", "DRAIN_MODES", "DRAIN_SALT",
           "ENGINE_FAULTS", "EXECUTION_MODES", "EXECUTION_SALT", "EXTRA_FAULTS", "FAULTS", "GROWTH_POLICIES",
           "HOST_FAULTS", "INPUTS",
           "OPERATORS_SALT", "OUTPUTS",
           "InputMessage", "Profile", "Scenario", "generate", "operator_config", "scale_scenario"]

COMMIT_STEPS = ("after-intent", "after-flush", "after-adjunct", "after-snapshot", "after-checkpoint",
                "during-cleanup")
"""The commit steps a one-time failure can hit (``task.testing.fail.once.at``)."""

FAULTS = ("none", "poison", "kill9", "fail-once", "second-processor", "azurite-restart", "lost-state",
          "replay-spark-batch", "lost-spark-checkpoint", "deleted-snapshot")
"""Every fault the harness injects (one per scenario, at a random phase)."""

EXTRA_FAULTS = ("purged-snapshot", "kafka-restart")
"""Faults added after the first soaks, drawn from the extras generator (see :data:`EXTRAS_SALT`) so that the
draws of :data:`FAULTS` stay what they were: committed snapshot blobs *purged* (gone, not tombstoned) with
the local state, and the Kafka broker restarted mid-run (the Spark engine kills the broker with ``kill -9`` and
starts it again on its log dir; the in-process engine, which has no broker, makes the input vanish and produces
it again as its producers would)."""

CONTAINER_FAULTS = ("container-kill", "container-retry")
"""Faults of the container execution mode (issue 26), drawn from :data:`EXECUTION_SALT` for scenarios in that mode:
``kill -9`` of a Spark Python worker running a container while ``sparza run`` runs (the driver must start the
epoch again, and the same run finish with the exact output), and a one-time failure injected inside a
container after some of a task's commits there (``task.testing.fail.once.after.commits``): the epoch fails once and
is retried."""

HOST_FAULTS = ("executor-loss",)
"""A host of the container mode lost (issue 40): the Spark engine runs the scenario's job on a standalone cluster of
three one-core workers (each with its own state dir) beside CPU load, SIGKILLs the worker of one container with its
executor and Python workers mid-run and lets a fresh worker join; the very same run must finish with the exact
output, the lost tasks moving and the others staying. Drawn from :data:`EXECUTION_SALT` with the container faults, in a
range of that draw that replaced nothing before (the seeds with a container fault keep it)."""

ENGINE_FAULTS = CONTAINER_FAULTS + HOST_FAULTS
"""Every fault that needs the container mode."""

DAYOPS_FAULTS = ("savepoint-restore", "rewind-in-place", "partition-growth")
"""Day-two operations between runs (issue 37, :mod:`sparza.ops`), drawn from :data:`DAYOPS_SALT`: a savepoint
taken and restored over the job itself, or every task that has not ended rewound to its own offsets with the
state of a savepoint just taken. Both must leave the job exactly where it was (the stores come back from the
savepoint's copies), so the output stays exact. ``partition-growth``: the input gets more partitions
(``Scenario.grow_to``) after the run of its phase, the later chunks' messages spread over them (see
:func:`_plan_growth`); the job's ``job.partition.expansion`` (``Scenario.grow_policy``) says what the next run
does: one that stops must name the stream, and the harness then sets ``Scenario.grow_then`` as its operator would."""

_SAVEPOINT_OPS = DAYOPS_FAULTS[:2]
"""The day-two operations drawn at first (``partition-growth`` has a range of the draw of its own)."""

GROWTH_POLICIES = ("group", "fail", "auto", "new-tasks")
"""``job.partition.expansion`` values a ``partition-growth`` scenario draws (``new-tasks`` for jobs without stores)."""

DAYOPS_SALT = 0xDA7_0037
"""Whether a day-two operation is the second fault comes from ``random.Random(seed ^ DAYOPS_SALT)``, drawn last,
only with the extras, for low-level task jobs of one processor with no second fault (``partition-growth``: for
unbounded jobs of one processor, applications too, in two chunks or more); ``generate(seed, dayops=False)`` leaves
it out (the seed as it was). It adds no probe chunk: the harness's final run and the check of the committed state on
a new host (in-process) restore every store after it."""

AFTER_RUN_FAULTS = frozenset({"savepoint-restore", "rewind-in-place", "partition-growth",
                              "lost-state", "lost-spark-checkpoint", "replay-spark-batch", "deleted-snapshot",
                              "purged-snapshot"})
"""Faults applied between runs (the others happen during a run)."""

OUTPUTS = ("delta", "blob", "table-append", "table-upsert", "kafka")
"""Output kinds: a Delta stream, Azure blobs, a typed Delta table (append or keyed upsert), a Kafka topic."""

INPUTS = ("delta", "kafka")
"""Input kinds: a Delta stream or a Kafka topic (loaded in one Kafka transaction per chunk)."""

NEW_KINDS_SALT = 0x7AB1E_CAFE
"""The table and Kafka choices come from ``random.Random(seed ^ NEW_KINDS_SALT)``, drawn after every
other choice, so the draws of seeds from before they existed are unchanged (only a seed whose Delta
stream output or Delta input is now replaced by a new kind shows a different scenario)."""

TASK_APIS = ("stream", "batch")
"""How a low-level task job processes messages: ``process`` per message, or ``process_batch`` (Arrow)."""

BATCH_API_SALT = 0xBA7C4_A11
"""Whether a low-level task job uses the batch API (``HarnessBatchTask``) comes from
``random.Random(seed ^ BATCH_API_SALT)``, drawn apart from every other choice, so no other draw of a
seed changes."""

EXTRAS_SALT = 0x5EED_2FA7
"""Dimensions added after typed tables and Kafka come from ``random.Random(seed ^ EXTRAS_SALT)``, drawn
after everything else: Kafka (or Delta) intermediate streams, Delta streams and tables on ``az://``,
several processors under the azure coordinator, the :data:`EXTRA_FAULTS` and a second fault. No earlier
draw changes; ``generate(seed, extras=False)`` (``--extras none``) gives the scenario without them."""

OPERATORS_SALT = 0x0DE7_A115
"""The operators added after the extras (issue 29) come from ``random.Random(seed ^ OPERATORS_SALT)``, drawn
last and only with the extras: an application scenario may become a stream-stream ``join`` (its input split
by the parity of ``n`` into a left and a right stream, each repartitioned by key, joined within a bound,
inner/left/outer) or a ``session`` window (a gap, accumulators merged or not), and a window or session may
get early/late triggers and an allowed lateness. Such a scenario is bounded and has one chunk (the last
panes and unmatched messages come at end-of-stream). ``extras=False`` leaves them out, as before."""

DRAIN_SALT = 0xD4A1_0029
"""Drain (issue 29) comes from ``random.Random(seed ^ DRAIN_SALT)``, drawn after the operators, only with the
extras, and left out by ``generate(seed, drain=False)`` (``--drain none``: a seed as recorded before it existed).
A scenario may end every phase with a drain instead of ``--once`` (:data:`DRAIN_MODES`). It then runs unbounded
in at least two chunks (one bounded chunk is cut in two at a random message: the drain's moment), and each chunk
after the first starts later in event time than every window, session and join bound of the chunks before it can
reach, so the oracle of the whole input is the sum of the chunks' (a drain fires what is open and empties the
operators, so nothing of one chunk may meet the next). The harness checks the output after every phase:
everything appended so far must be out."""

DRAIN_MODES = ("run", "request")
"""How a drain scenario drains each phase: ``sparza run --drain``, or ``sparza drain`` while a ``sparza run`` runs
(after its first batch and a drawn delay)."""

EXECUTION_SALT = 0xC0_47A1_0026
"""The execution mode (issue 26) comes from ``random.Random(seed ^ EXECUTION_SALT)``, drawn after the drain, only
with the extras, and left out by ``generate(seed, execution=False)`` (``--execution none``: a seed as recorded
before it existed, in the default mode). Most scenarios run in ``job.execution.mode: containers`` (sometimes with a
short ``job.container.epoch.ms`` of 2-10 s, so epochs roll over mid-run), some in ``batches``. A standalone
container scenario without a drain may have its first fault, when it is one of :data:`FAULTS` during a run,
replaced by one of :data:`CONTAINER_FAULTS`."""

EXECUTION_MODES = ("containers", "batches")
"""``job.execution.mode`` values the harness draws: long-running containers (the default), or micro-batches."""

T0 = 1_700_000_000_000
"""Event time of the first message (epoch ms)."""


@dataclass(frozen=True)
class InputMessage:
    """One input message: its partition, its chunk (the run before which it is appended) and content."""

    id: int
    key: str
    n: int
    timestamp: int
    partition: int
    chunk: int


@dataclass(frozen=True)
class Profile:
    """One change-capture record of the ``profiles`` stream (the join table): ``key → {"c": c}``."""

    key: str
    c: str
    partition: int


@dataclass
class Scenario:
    """A generated job, its input and its fault. ``describe()`` is the one-line summary."""

    seed: int
    api: str                      # "task" or "app"
    kind: str                     # copy | count | filtermap | pipeline | window | join | session
    partitions: int               # input partitions = stage-1 tasks
    keys: int
    bounded: bool
    chunks: int                   # input chunks (one run after each)
    max_batch: int                # task.max.batch.messages
    event_order: str              # "sorted" or "shuffled"
    late: bool                    # small watermark lateness (late data possible)
    store: str                    # count job: rocksdb | memory
    backup: bool                  # stores backed up to the blob store
    blob_store: str               # local | azure
    output: str                   # delta | blob | table-append | table-upsert | kafka
    blob_format: str = "avro"     # avro | jsonl
    blob_gzip: bool = False
    blob_flush_threshold: int | None = None
    blob_rollover: str = "none"   # none | count | size
    blob_rollover_value: int = 0
    blob_partition: str = "none"  # none | key | number (tasks only)
    stage2_partitions: int = 2
    join: str = "none"            # none | broadcast | partitioned
    flatmap: bool = False
    window_size_ms: int = 0
    window_slide_ms: int = 0
    fault: str = "none"
    fault_phase: int = 0
    fail_step: str = "after-flush"
    fault_delay_s: float = 0.0
    input: str = "delta"          # delta | kafka
    once_always: bool = False     # every run with --once (stages one after the other: fewer Spark workers)
    task_api: str = "stream"      # task jobs: "stream" (process per message) or "batch" (process_batch)
    intermediate: str = "default"  # app: default (the input's system) | kafka | delta
    delta_location: str = "local"  # local | azure: every Delta stream and table on az:// (Azurite)
    processors: int = 1           # >1: that many `sparza run` per run, under job.coordinator.factory: azure
    fault2: str = "none"          # a second fault (an after-run one when in the same phase as the first)
    fault2_phase: int = 0
    stagger_s: float = 0.0        # processors > 1: seconds between their starts
    join_within_ms: int = 0       # join: largest event-time distance of a pair
    join_type: str = "inner"      # join: inner | left | outer
    session_gap_ms: int = 0       # session: the gap that ends a session
    session_merge: bool = False   # session: accumulators merged (else each session keeps its messages)
    early: str = ""               # window/session early trigger: "" | count:N | ms:N
    late_trigger: str = ""        # window/session late trigger (with an allowed lateness)
    allowed_lateness_ms: int = 0  # window/session/join: how far behind the watermark data still counts
    step_ms: int = 1              # event-time step between consecutive message ids (late ones go further back)
    drain: str = "none"           # none | run (sparza run --drain) | request (sparza drain while it runs)
    drain_delay_s: float = 0.0    # drain=request: seconds after the run's first batch
    execution: str = "containers"  # job.execution.mode: containers | batches
    epoch_ms: int = 0             # containers: job.container.epoch.ms (0: the default, longer than any run here)
    fail_after: int = 0           # container-retry: the task's commits in its container before the failure
    grow_to: int = 0              # partition-growth: the input's partition count after it (0: no growth)
    grow_policy: str = "auto"     # partition-growth: job.partition.expansion from the start (GROWTH_POLICIES)
    grow_then: str = ""           # partition-growth: what the harness sets when the run after it stopped
    messages: list[InputMessage] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)

    def faults_at(self, phase: int) -> list[str]:
        """The faults drawn for ``phase``, the one that happens during its run first (a second fault in the same
        phase is an after-run one)."""
        return [f for f, at in ((self.fault, self.fault_phase), (self.fault2, self.fault2_phase))
                if at == phase and f != "none"]

    def describe(self) -> str:
        """One line naming the job shape and the fault."""
        out = self.output if self.output != "blob" else (
            f"blob/{self.blob_format}{'.gz' if self.blob_gzip else ''}/thr={self.blob_flush_threshold}"
            f"/roll={self.blob_rollover}:{self.blob_rollover_value}/part={self.blob_partition}")
        shape = f"{'batch' if self.api == 'task' and self.task_api == 'batch' else self.api}:{self.kind}"
        if self.kind == "count":
            shape += f"({self.store}{'+backup' if self.backup else ''})"
        if self.api == "app":
            shape += f"(p2={self.stage2_partitions},join={self.join}"
            if self.kind == "window":
                shape += f",win={self.window_size_ms}/{self.window_slide_ms}"
            elif self.kind == "join":
                shape += f",{self.join_type} within={self.join_within_ms}"
            elif self.kind == "session":
                shape += f",gap={self.session_gap_ms}{',merge' if self.session_merge else ''}"
            else:
                shape += f",flatmap={self.flatmap}"
            triggers = "".join([f",early={self.early}" if self.early else "",
                                f",late={self.late_trigger}" if self.late_trigger else "",
                                f",lateness={self.allowed_lateness_ms}" if self.allowed_lateness_ms else ""])
            shape += triggers + ")"
        fault = self.fault + (f"@{self.fail_step}" if self.fault in ("fail-once", "container-retry") else "")
        fault += f"+{self.fail_after}" if self.fault == "container-retry" else ""
        source = "" if self.input == "delta" else f" in={self.input}"
        extras = "".join([
            f" intermediate={self.intermediate}" if self.intermediate != "default" else "",
            " delta=az" if self.delta_location == "azure" else "",
            f" processors={self.processors}" if self.processors > 1 else "",
            f" fault2={self.fault2}@phase{self.fault2_phase}" if self.fault2 != "none" else "",
            f" drain={self.drain}" + (f"@{self.drain_delay_s}s" if self.drain == "request" else "")
            if self.drain != "none" else "",
            f" exec={self.execution}" + (f"/epoch={self.epoch_ms / 1000:g}s" if self.epoch_ms else ""),
            f" grow={self.partitions}->{self.grow_to}/{self.grow_policy}"
            + (f"->{self.grow_then}" if self.grow_then else "") if self.grow_to else ""])
        return (f"seed={self.seed} {shape}{source} tasks={self.partitions} msgs={len(self.messages)} keys={self.keys} "
                f"{'bounded' if self.bounded else 'unbounded'} chunks={self.chunks} batch={self.max_batch} "
                f"{self.event_order}{' late' if self.late else ''} blobstore={self.blob_store} out={out} "
                f"fault={fault}@phase{self.fault_phase}{extras}")

    @property
    def uses_kafka(self) -> bool:
        """True when the scenario needs a Kafka broker (input, output or intermediate streams on it)."""
        return "kafka" in (self.input, self.output) or self.intermediate_system == "kafka"

    @property
    def intermediate_system(self) -> str | None:
        """The system of an application's intermediate streams (None for a task job): the drawn one, else
        the input's (the planner's default)."""
        if self.api != "app":
            return None
        return self.input if self.intermediate == "default" else self.intermediate

    def to_dict(self) -> dict[str, Any]:
        """Everything but the data, for reports."""
        data = asdict(self)
        data.pop("messages")
        data.pop("profiles")
        return data


def _keys(rng: random.Random, count: int, skew: bool) -> tuple[list[str], list[float]]:
    names = [f"k{i}" for i in range(count)]
    weights = [1.0 / (i + 1) ** 1.5 for i in range(count)] if skew else [1.0] * count
    return names, weights


def generate(seed: int, *, messages: int | None = None, fault: str | None = None, output: str | None = None,
             input: str | None = None, task_api: str | None = None, extras: bool = True,
             drain: bool = True, execution: bool = True, dayops: bool = True) -> Scenario:
    """The scenario of ``seed``; ``messages`` / ``fault`` / ``output`` / ``input`` / ``task_api`` override the
    drawn values (CI samples, and forcing a kind by hand); ``extras=False`` leaves out the dimensions drawn from
    :data:`EXTRAS_SALT` (the scenario as generated before they existed), ``drain=False`` the drain of
    :data:`DRAIN_SALT` (seeds recorded before it existed), ``execution=False`` the execution mode and container faults
    of :data:`EXECUTION_SALT`, ``dayops=False`` the day-two operations of :data:`DAYOPS_SALT`. A forced ``fault``
    also keeps the extras generator from replacing it or adding a second one; a forced container fault runs in the
    container mode."""
    forced_output, forced_input = output, input      # ``output`` is reused below for the drawn value
    rng = random.Random(seed)
    api = rng.choice(["task", "task", "app"])
    kind = rng.choice(["copy", "count", "filtermap"]) if api == "task" else rng.choice(["pipeline", "window"])
    partitions = rng.randint(1, 8)
    count = messages if messages is not None else rng.choice([40, 120, 300])
    keys = rng.randint(1, 12)
    skew = rng.random() < 0.5
    bounded = True if kind == "window" else rng.random() < 0.4
    chunks = 1 if bounded else rng.randint(1, 2)
    # Batches per run stay ≤ ~8 (each batch has a fixed cost of a second or more on a busy 2-core
    # machine): "tiny" caps are as small as that allows, "large" ones take a partition in one batch.
    per_partition = max(1, math.ceil(count / max(1, partitions)))
    tiny = max(1, math.ceil(per_partition / 8))
    max_batch = rng.choice([tiny, tiny, max(tiny, per_partition // 5), max(tiny, per_partition // 2), 100_000])
    event_order = rng.choice(["sorted", "shuffled"])
    late = api == "app" and rng.random() < 0.4
    store = rng.choice(["rocksdb", "memory"])
    backup = rng.random() < 0.7
    blob_store = rng.choice(["local", "azure"])
    output = rng.choice(["delta", "blob"])
    scenario = Scenario(seed=seed, api=api, kind=kind, partitions=partitions, keys=keys, bounded=bounded,
                        chunks=chunks, max_batch=max_batch, event_order=event_order, late=late, store=store,
                        backup=backup, blob_store=blob_store, output=output)
    if output == "blob":
        scenario.blob_format = rng.choice(["avro", "jsonl"])
        scenario.blob_gzip = rng.random() < 0.5
        scenario.blob_flush_threshold = rng.choice([None, 256, 1024, 4096])
        scenario.blob_rollover = rng.choice(["none", "count", "size"])
        scenario.blob_rollover_value = {"none": 0, "count": rng.choice([1, 5, 40]),
                                        "size": rng.choice([300, 2000, 20_000])}[scenario.blob_rollover]
        scenario.blob_partition = rng.choice(["none", "key", "number"]) if api == "task" else "none"
    if api == "app":
        scenario.stage2_partitions = rng.randint(1, 4)
        scenario.join = rng.choice(["none", "none", "broadcast", "partitioned"])
        scenario.flatmap = rng.random() < 0.5
        if kind == "window":
            size = rng.choice([50, 200, 1000, 5000])
            scenario.window_size_ms = size
            scenario.window_slide_ms = size if rng.random() < 0.6 else size // rng.choice([2, 4, 5])
            # Late data is only checked exactly for tumbling windows (see oracle.expected_windows).
            scenario.late = late and scenario.window_slide_ms == size

    # Input: ids 0..count-1; some partitions stay empty; shuffled order shuffles each partition.
    names, weights = _keys(rng, keys, skew)
    empty = set(rng.sample(range(partitions), rng.randint(0, partitions - 1))) if partitions > 1 else set()
    live = [p for p in range(partitions) if p not in empty]
    step = rng.choice([1, 10, 100, 1000])
    scenario.step_ms = step
    msgs: list[InputMessage] = []
    for i in range(count):
        ts = T0 + i * step
        if scenario.late and rng.random() < 0.05:
            ts -= rng.randint(1, 50) * step * 10        # far behind the others: late under a small lateness
        msgs.append(InputMessage(i, rng.choices(names, weights)[0], rng.randrange(0, 1000), ts,
                                 rng.choice(live), min(chunks - 1, i * chunks // count)))
    if event_order == "shuffled":
        by_chunk_partition: dict[tuple[int, int], list[InputMessage]] = {}
        for m in msgs:
            by_chunk_partition.setdefault((m.chunk, m.partition), []).append(m)
        msgs = []
        for group_key in sorted(by_chunk_partition):
            group = by_chunk_partition[group_key]
            stamps = [m.timestamp for m in group]
            rng.shuffle(stamps)
            msgs.extend(InputMessage(m.id, m.key, m.n, t, m.partition, m.chunk) for m, t in zip(group, stamps,
                                                                                                   strict=True))
        msgs.sort(key=lambda m: m.id)
    scenario.messages = msgs
    if scenario.join != "none":
        profile_parts = 1 if scenario.join == "broadcast" else scenario.stage2_partitions
        for name in names:
            if rng.random() < 0.8:
                for version in range(rng.randint(1, 3)):   # several updates: the last one wins
                    scenario.profiles.append(Profile(name, f"c{rng.randrange(100)}v{version}",
                                                     rng.randrange(profile_parts)))
    _pick_fault(rng, scenario, fault)
    _pick_new_kinds(random.Random(seed ^ NEW_KINDS_SALT), scenario, forced_output, forced_input)
    if task_api is not None and task_api not in TASK_APIS:
        raise ValueError(f"unknown task api {task_api!r}; known: {', '.join(TASK_APIS)}")
    if scenario.api == "task":
        drawn = "batch" if random.Random(seed ^ BATCH_API_SALT).random() < 0.5 else "stream"
        scenario.task_api = task_api or drawn
    if extras:
        _pick_extras(random.Random(seed ^ EXTRAS_SALT), scenario, fault_forced=fault is not None)
        _pick_operators(random.Random(seed ^ OPERATORS_SALT), scenario, output_forced=forced_output is not None)
        if drain:
            _pick_drain(random.Random(seed ^ DRAIN_SALT), scenario)
        if execution:
            _pick_execution(random.Random(seed ^ EXECUTION_SALT), scenario, fault_forced=fault is not None)
        if dayops and fault is None:
            _pick_dayops(random.Random(seed ^ DAYOPS_SALT), scenario)
    if fault == "partition-growth" and _fault_fits(fault, scenario):
        scenario.fault_phase = min(scenario.fault_phase, scenario.chunks - 2)
        _plan_growth(random.Random(seed ^ DAYOPS_SALT ^ 1), scenario, scenario.fault_phase)
    if scenario.fault in ENGINE_FAULTS and scenario.execution != "containers":
        scenario.execution = "containers"   # a forced container fault with the execution dimension left out
    if not _fault_fits(scenario.fault, scenario):
        need = ("one processor and no drain" if scenario.fault in ENGINE_FAULTS else
                "an unbounded job of one processor in two chunks or more, without kafka-restart"
                if scenario.fault == "partition-growth" else
                "a low-level task job (not an application) of one processor" if scenario.fault in DAYOPS_FAULTS else
                "a Kafka input (--input kafka) and no Kafka output or intermediate streams")
        raise ValueError(f"fault {scenario.fault!r} does not fit seed {seed}: it needs {need} ({scenario.describe()})")
    return scenario


def _pick_extras(rng: random.Random, scenario: Scenario, *, fault_forced: bool) -> None:
    """The dimensions of :data:`EXTRAS_SALT`. Every value is drawn whatever applies, in a fixed order, so
    a later dimension appended here leaves these draws alone."""
    r_intermediate = rng.random()
    r_location = rng.random()
    r_processors, processors = rng.random(), rng.choice([2, 3])
    r_extra_fault, extra_fault = rng.random(), rng.choice(EXTRA_FAULTS)
    r_fault2, fault2, fault2_phase = rng.random(), rng.choice(FAULTS[1:] + EXTRA_FAULTS), rng.randrange(scenario.chunks)
    stagger = rng.uniform(1.0, 6.0)
    if scenario.api == "app" and r_intermediate < 0.35:
        scenario.intermediate = "kafka" if scenario.input == "delta" else "delta"
    if r_location < 0.25:
        scenario.delta_location = "azure"
    if r_processors < 0.2 and scenario.fault not in ("second-processor", "kafka-restart", *ENGINE_FAULTS):
        scenario.processors, scenario.stagger_s = processors, round(stagger, 1)
    if not fault_forced and r_extra_fault < 0.15 and _fault_fits(extra_fault, scenario):
        _apply_fault_needs(extra_fault, scenario)
        scenario.fault = extra_fault
    if not fault_forced and r_fault2 < 0.25 and fault2 != scenario.fault and _fault_fits(fault2, scenario) and (
            fault2_phase != scenario.fault_phase or fault2 in AFTER_RUN_FAULTS):
        _apply_fault_needs(fault2, scenario)
        scenario.fault2, scenario.fault2_phase = fault2, fault2_phase
    _add_probe_chunk(random.Random(scenario.seed ^ EXTRAS_SALT ^ 1), scenario)


def _pick_dayops(rng: random.Random, scenario: Scenario) -> None:
    """The dimension of :data:`DAYOPS_SALT`: one of :data:`DAYOPS_FAULTS` as the second fault, at a drawn phase.
    ``partition-growth`` comes from a range of ``r_ops`` that drew nothing before (every earlier seed keeps its
    operation), at a phase before the last (later chunks fill the new partitions)."""
    r_ops, ops, phase = rng.random(), rng.choice(_SAVEPOINT_OPS), rng.randrange(scenario.chunks)
    if scenario.fault2 != "none" or scenario.fault in DAYOPS_FAULTS:
        return
    if r_ops < 0.15 and _fault_fits(ops, scenario):
        _apply_fault_needs(ops, scenario)
        scenario.fault2, scenario.fault2_phase = ops, phase
    elif 0.15 <= r_ops < 0.27 and _fault_fits("partition-growth", scenario):
        grow_phase = min(phase, scenario.chunks - 2)
        scenario.fault2, scenario.fault2_phase = "partition-growth", grow_phase
        _plan_growth(random.Random(scenario.seed ^ DAYOPS_SALT ^ 1), scenario, grow_phase)


def _plan_growth(rng: random.Random, scenario: Scenario, phase: int) -> None:
    """The growth of ``partition-growth`` after the run of ``phase``: ``n`` partitions become ``n + 1 .. 2n``; the
    expansion policy (``new-tasks`` only for jobs without stores) and what the harness sets when the run after the
    growth stopped. Each message of a later chunk in partition ``t`` moves to one partition of its task,
    ``c = t + j*n`` (``c % n == t``), drawn once per key and task: a task then reads each key from one partition
    only, so its count of the key stays in offset order (the partitions of one task interleave arbitrarily)."""
    n = scenario.partitions
    # Stores anywhere in the job refuse new-tasks; only the keyed count's are in the tasks of the grown input (an
    # application's first stage repartitions by key before any store), so only it stops under auto.
    stateful = scenario.kind in ("count", "window", "session", "join") or scenario.join != "none"
    first_stage_stores = scenario.kind == "count"
    scenario.grow_to = n + rng.randint(1, n)
    policies = [p for p in GROWTH_POLICIES if not (stateful and p == "new-tasks")]
    scenario.grow_policy = rng.choice(policies)
    stops = scenario.grow_policy == "fail" or (scenario.grow_policy == "auto" and first_stage_stores)
    then = "group" if stateful else rng.choice(["group", "new-tasks"])
    scenario.grow_then = then if stops else ""
    choices = {t: [c for c in range(scenario.grow_to) if c % n == t] for t in range(n)}
    target: dict[tuple[str, int], int] = {}
    moved = []
    for m in scenario.messages:
        if m.chunk > phase:
            c = target.setdefault((m.key, m.partition), rng.choice(choices[m.partition]))
            m = InputMessage(m.id, m.key, m.n, m.timestamp, c, m.chunk)
        moved.append(m)
    scenario.messages = moved


def _pick_operators(rng: random.Random, scenario: Scenario, *, output_forced: bool) -> None:
    """The dimensions of :data:`OPERATORS_SALT`. Every value is drawn whatever applies, in a fixed order."""
    r_kind, r_triggers = rng.random(), rng.random()
    step = scenario.step_ms
    within = rng.choice([0, 3, 10, 40]) * step
    join_type = rng.choice(["inner", "left", "outer"])
    gap = rng.choice([2, 5, 20]) * step
    merge = rng.random() < 0.5
    early = rng.choice(["count:1", "count:2", "count:5", f"ms:{5 * step}", f"ms:{50 * step}"])
    lateness = rng.choice([0, 0, 20, 200]) * step
    late_trigger = rng.choice(["", "", "count:2", f"ms:{10 * step}"])
    has_early = rng.random() < 0.7
    if scenario.api != "app":
        return
    if r_kind < 0.2:
        scenario.kind = "join"
        scenario.join, scenario.profiles = "none", []   # the stream-stream join replaces the table join
        scenario.join_within_ms, scenario.join_type = within, join_type
        scenario.allowed_lateness_ms = lateness
        if scenario.output == "table-upsert":         # pairs have no key of their own
            if output_forced:
                raise ValueError("table-upsert needs a keyed result (count or window), not a join")
            scenario.output = "table-append"
    elif r_kind < 0.4:
        scenario.kind = "session"
        scenario.session_gap_ms, scenario.session_merge = gap, merge
    elif scenario.kind != "window" or r_triggers >= 0.5:
        return                  # a pipeline, or a window left as it was
    if scenario.kind == "window" or (scenario.kind == "session" and r_triggers < 0.5):
        scenario.early = early if has_early else ""
        scenario.allowed_lateness_ms = lateness
        scenario.late_trigger = late_trigger if lateness else ""
    _one_bounded_chunk(scenario)


def _pick_drain(rng: random.Random, scenario: Scenario) -> None:
    """The dimension of :data:`DRAIN_SALT`. Every value is drawn whatever applies, in a fixed order."""
    r_drain, mode, cut, delay = rng.random(), rng.choice(DRAIN_MODES), rng.uniform(0.25, 0.75), rng.uniform(0.0, 3.0)
    # Drain needs a standalone job; a Kafka broker restart gives the input new offsets, which the drain's
    # observed ends would not know.
    if (r_drain >= 0.2 or scenario.processors > 1 or "kafka-restart" in (scenario.fault, scenario.fault2)
            or scenario.fault in ENGINE_FAULTS
            or not scenario.messages):
        return
    scenario.drain, scenario.drain_delay_s = mode, round(delay, 1)
    scenario.bounded = False
    if scenario.chunks == 1 and len(scenario.messages) > 1:
        at = max(1, min(len(scenario.messages) - 1, int(len(scenario.messages) * cut)))
        scenario.messages = [InputMessage(m.id, m.key, m.n, m.timestamp, m.partition, int(m.id >= at))
                             for m in scenario.messages]
        scenario.chunks = 2
    # Later chunks start beyond every window, session, join bound and late shift of the chunks before.
    reach = (max(scenario.window_size_ms, scenario.session_gap_ms, scenario.join_within_ms + 1)
             + scenario.allowed_lateness_ms + 600 * scenario.step_ms)
    shifted: list[InputMessage] = []
    newest: int | None = None
    for chunk in range(scenario.chunks):
        part = [m for m in scenario.messages if m.chunk == chunk]
        if not part:
            continue
        shift = 0 if newest is None else max(0, newest + reach - min(m.timestamp for m in part))
        part = [InputMessage(m.id, m.key, m.n, m.timestamp + shift, m.partition, m.chunk) for m in part]
        newest = max(m.timestamp for m in part)
        shifted.extend(part)
    scenario.messages = sorted(shifted, key=lambda m: m.id)


def _pick_execution(rng: random.Random, scenario: Scenario, *, fault_forced: bool) -> None:
    """The dimension of :data:`EXECUTION_SALT`. Every value is drawn whatever applies, in a fixed order."""
    r_mode, r_epoch, epoch_s = rng.random(), rng.random(), rng.choice([2, 3, 5, 10])
    r_fault, container_fault, fail_after = rng.random(), rng.choice(CONTAINER_FAULTS), rng.randrange(4)
    if scenario.fault in ENGINE_FAULTS:         # forced: it needs containers
        r_mode = 0.0
    if r_mode >= 0.75:
        scenario.execution = "batches"
        return
    scenario.execution = "containers"
    if r_epoch < 0.35:
        scenario.epoch_ms = epoch_s * 1000
    # A failure after more commits than a task makes in a run would not fire: at most one fewer than the batches
    # of the fullest partition of the fault's phase.
    scenario.fail_after = min(fail_after, max(0, _batches_per_task(scenario, scenario.fault_phase) - 1))
    # It replaces one of the first faults during a run (an after-run one may have brought a probe chunk of its own,
    # and an extra one is rare).
    if (not fault_forced and r_fault < 0.3 and scenario.fault in FAULTS and scenario.fault not in AFTER_RUN_FAULTS
            and _fault_fits(container_fault, scenario)):
        scenario.fault = container_fault
    elif (not fault_forced and 0.33 <= r_fault < 0.4 and scenario.fault in FAULTS
          and scenario.fault not in AFTER_RUN_FAULTS and _fault_fits(HOST_FAULTS[0], scenario)):
        # A range of r_fault that replaced nothing before: the seeds with a container fault keep it.
        scenario.fault = HOST_FAULTS[0]


def _batches_per_task(scenario: Scenario, chunk: int) -> int:
    """Batches the fullest task makes of ``chunk``'s input (at ``max_batch`` messages each)."""
    sizes: dict[int, int] = {}
    for m in scenario.messages:
        if m.chunk == chunk:
            sizes[m.partition] = sizes.get(m.partition, 0) + 1
    return max((math.ceil(n / max(1, scenario.max_batch)) for n in sizes.values()), default=0)


def _one_bounded_chunk(scenario: Scenario) -> None:
    """The new operators' last panes and unmatched messages come at end-of-stream: one bounded chunk."""
    scenario.bounded = True
    if scenario.chunks > 1:
        scenario.messages = [InputMessage(m.id, m.key, m.n, m.timestamp, m.partition, 0) for m in scenario.messages]
        scenario.chunks = 1
    scenario.fault_phase = 0
    if scenario.fault2 != "none" and (scenario.fault2_phase != 0 or scenario.fault2 not in AFTER_RUN_FAULTS):
        scenario.fault2, scenario.fault2_phase = "none", 0
    scenario.fault2_phase = 0


def operator_config(scenario: Scenario) -> dict[str, str]:
    """The ``app.harness.*`` keys of the :data:`OPERATORS_SALT` dimensions (read by ``HarnessApp``)."""
    out: dict[str, str] = {}
    if scenario.kind == "join":
        out["app.harness.join.within.ms"] = str(scenario.join_within_ms)
        out["app.harness.join.type"] = scenario.join_type
    if scenario.kind == "session":
        out["app.harness.session.gap.ms"] = str(scenario.session_gap_ms)
        out["app.harness.session.merge"] = str(scenario.session_merge).lower()
    if scenario.early:
        out["app.harness.early"] = scenario.early
    if scenario.late_trigger:
        out["app.harness.late"] = scenario.late_trigger
    if scenario.allowed_lateness_ms:
        out["app.harness.lateness.ms"] = str(scenario.allowed_lateness_ms)
    return out


def _add_probe_chunk(rng: random.Random, scenario: Scenario) -> None:
    """After-run damage in the last phase (lost or purged state, a lost Spark checkpoint, ...) was checked
    by runs with nothing left to process: no task restored anything, so a wrongly restored store could
    not show. An unbounded scenario so damaged gets one more chunk of input (new ids, the same keys and
    live partitions, later event times), appended and processed after the damage."""
    last = scenario.chunks - 1
    damaged = any(fault in AFTER_RUN_FAULTS and phase == last for fault, phase in (
        (scenario.fault, scenario.fault_phase), (scenario.fault2, scenario.fault2_phase)))
    if scenario.bounded or not damaged or not scenario.messages:
        return
    keys = sorted({m.key for m in scenario.messages})
    live = sorted({m.partition for m in scenario.messages})
    first = len(scenario.messages)
    newest = max(m.timestamp for m in scenario.messages)
    extra = max(4, len(scenario.messages) // 10)
    scenario.chunks += 1
    scenario.messages = scenario.messages + [
        InputMessage(first + i, rng.choice(keys), rng.randrange(0, 1000), newest + 1 + i, rng.choice(live),
                     scenario.chunks - 1) for i in range(extra)]


def _fault_fits(fault: str, scenario: Scenario) -> bool:
    """Whether ``fault`` can hit ``scenario`` and still leave an exact output to check."""
    if fault == "kafka-restart":
        # The in-process engine loses the input's records (and can produce only those again, as their
        # producers would), so the fault is drawn only where the input alone is on Kafka; the Spark engine's
        # broker keeps everything across its restart.
        return (scenario.input == "kafka" and scenario.output != "kafka"
                and scenario.intermediate_system != "kafka" and scenario.processors == 1)
    if fault == "second-processor":
        return scenario.processors == 1
    if fault == "partition-growth":
        # Later chunks fill the new partitions; a lost input produced again would not know them. An application's
        # intermediate streams keep their counts: only its first stage's tasks change.
        return (scenario.processors == 1 and not scenario.bounded and scenario.chunks >= 2
                and "kafka-restart" not in (scenario.fault, scenario.fault2))
    if fault in DAYOPS_FAULTS:
        # sparza.ops supports standalone low-level task jobs (no application stages, no adjunct stores).
        return scenario.api == "task" and scenario.processors == 1
    if fault in ENGINE_FAULTS:
        # One `sparza run` at a time, ended by itself (a drain has its own ways of ending the run).
        return scenario.execution == "containers" and scenario.processors == 1 and scenario.drain == "none"
    return True


def _apply_fault_needs(fault: str, scenario: Scenario) -> None:
    """What a fault needs of the scenario (as :func:`_pick_fault` does for the first fault)."""
    if fault == "azurite-restart" and scenario.output != "blob":
        scenario.blob_store = "azure"
    if fault in ("lost-state", "deleted-snapshot", "purged-snapshot", *DAYOPS_FAULTS):
        scenario.backup = True                # a savepoint copies backed-up snapshots only
    if fault in ("deleted-snapshot", "purged-snapshot") and scenario.api == "task":
        scenario.kind = "count"               # the fault needs a store with snapshots


def _pick_new_kinds(rng: random.Random, scenario: Scenario, output: str | None, input: str | None) -> None:
    """Typed tables and Kafka: a Delta stream output may become a typed table (append, or upsert for the
    keyed count and windows, whose results have a key) or a Kafka topic; the input may become a Kafka topic."""
    drawn_output = rng.choice(["delta", "delta", "table-append", "table-upsert", "kafka"])
    drawn_input = "kafka" if rng.random() < 0.25 else "delta"
    if output is not None:
        if output not in OUTPUTS:
            raise ValueError(f"unknown output {output!r}; known: {', '.join(OUTPUTS)}")
        if output == "blob" and scenario.output != "blob":
            raise ValueError("--output blob needs a seed that draws a blob output (its settings are drawn with it)")
        scenario.output = output
    elif scenario.output == "delta":
        scenario.output = drawn_output
    if scenario.output == "table-upsert" and scenario.kind not in ("count", "window"):
        if output is not None:
            raise ValueError(f"table-upsert needs a keyed result (count or window), not {scenario.kind}")
        scenario.output = "table-append"
    if input is not None and input not in INPUTS:
        raise ValueError(f"unknown input {input!r}; known: {', '.join(INPUTS)}")
    scenario.input = input if input is not None else drawn_input


def _pick_fault(rng: random.Random, scenario: Scenario, fault: str | None) -> None:
    choices = list(FAULTS)
    chosen = fault if fault is not None else rng.choice(choices)
    known = FAULTS + EXTRA_FAULTS + ENGINE_FAULTS + DAYOPS_FAULTS
    if chosen not in known:
        raise ValueError(f"unknown fault {chosen!r}; known: {', '.join(known)}")
    scenario.fault = chosen
    scenario.fault_phase = rng.randrange(scenario.chunks)
    scenario.fail_step = rng.choice(COMMIT_STEPS)
    scenario.fault_delay_s = round(rng.uniform(3.0, 20.0), 1)
    if chosen == "azurite-restart" and scenario.output != "blob":
        scenario.blob_store = "azure"         # the fault needs something on Azure
    if chosen in ("lost-state", "deleted-snapshot", "purged-snapshot", *DAYOPS_FAULTS):
        scenario.backup = True                # without a backup a lost disk loses state by definition
    if chosen in ("deleted-snapshot", "purged-snapshot") and scenario.api == "task":
        scenario.kind = "count"               # the fault needs a store with snapshots


def scale_scenario(seed: int = 100_000, messages: int = 100_000) -> Scenario:
    """The CI scale scenario: ``messages`` messages through a two-stage application with a broadcast
    join and tumbling windows, written as gzip Avro to Azure blobs, no fault, checked exactly."""
    rng = random.Random(seed)
    partitions, keys, stage2 = 4, 50, 2
    names = [f"k{i}" for i in range(keys)]
    scenario = Scenario(seed=seed, api="app", kind="window", partitions=partitions, keys=keys, bounded=True,
                        chunks=1, max_batch=20_000, event_order="sorted", late=False, store="rocksdb", backup=True,
                        blob_store="azure", output="blob", blob_format="avro", blob_gzip=True,
                        blob_flush_threshold=64 * 1024, blob_rollover="count", blob_rollover_value=400,
                        stage2_partitions=stage2, join="broadcast", window_size_ms=60_000,
                        window_slide_ms=60_000, once_always=True)
    scenario.messages = [InputMessage(i, names[rng.randrange(keys)], rng.randrange(1000), T0 + i * 10,
                                      rng.randrange(partitions), 0) for i in range(messages)]
    scenario.profiles = [Profile(name, f"c{rng.randrange(100)}", 0) for name in names if rng.random() < 0.9]
    return scenario
