"""The planner: an application config (``app.class``) → one ordinary low-level job config per stage.

``plan_application(config)`` imports ``app.class``, calls its ``describe``, splits the graph at
every ``partition_by`` and writes, per stage, a config the runtime runs like any ``task.class``
job: ``job.name`` = ``<job.name>-<stage>``, ``task.class`` = :class:`sparza.api.StageTask`,
``app.stage``, ``task.inputs``, ``task.intermediate.outputs``, the window and table stores it uses,
and the intermediate streams' flags. Intermediate streams are named ``<job.name>-<job.id>-<name>``
in ``job.intermediate.system`` (default: the first input's system) and get ``partitions`` or the
partition count of the writing stage's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparza.api.graph import ApiError, Application, OpKind, OpSpec, StreamApplication
from sparza.api.stage_split import StageSpec, split_stages, watermark_holdbacks
from sparza.config import STR, Choice, Config, Int, define_key
from sparza.config.shared import APP_CLASS, JOB_ID, JOB_NAME, TASK_BROADCAST_INPUTS
from sparza.control.settings import (
    DELETE_COMMITTED,
    INTERMEDIATE_OUTPUTS_KEY,
    delete_committed_key,
    holdback_key,
    intermediate_key,
)
from sparza.state.adjunct.settings import ADSTORE_INPUT
from sparza.streams import SystemStream
from sparza.systems import SYSTEM_FACTORY, StreamSpec, get_system_factory, load_object

__all__ = [
    "APP_CLASS_KEY",
    "APP_STAGE_KEY",
    "STAGE_TASK_CLASS",
    "ApplicationPlan",
    "StagePlan",
    "build_application",
    "intermediate_streams",
    "plan_application",
]

_PKG = "api"
APP_CLASS_KEY = "app.class"
APP_STAGE_KEY = "app.stage"
STAGE_TASK_CLASS = "sparza.api.StageTask"
INTERMEDIATE_SYSTEM_KEY = "job.intermediate.system"
WINDOW_STORE_PREFIX = "app.window.store."

INTERMEDIATE_SYSTEM = define_key(INTERMEDIATE_SYSTEM_KEY, None, "System of the intermediate streams partition_by "
                                 "creates (default: the first input's system).", _PKG, kind=STR)
INTERMEDIATE_STREAM = define_key("app.intermediate.<name>", None, "system.stream of the intermediate stream of "
                                 "partition_by(name) (set by the planner).", _PKG, kind=STR)
INTERMEDIATE_PARTITIONS = define_key("app.intermediate.<name>.partitions", None, "Partition count of that "
                                     "intermediate stream (set by the planner).", _PKG, kind=Int(min_value=1))
WINDOW_STORE_FACTORY = define_key("app.window.store.factory", "rocksdb", "Engine of the stores of windows and "
                                  "stream-stream joins (rocksdb or memory); every app.window.store.<key> is copied to "
                                  "stores.<window or join store>.<key>.", _PKG, kind=Choice("rocksdb", "memory"))
_WINDOW_STORE = define_key("app.window.store.*", None, "Any store setting (stores.<store>.*) for the stores of "
                           "windows and stream-stream joins.", _PKG)


def build_application(config: Config) -> StreamApplication:
    """Import ``app.class`` and let it describe its graph (done on the driver and in every task)."""
    target = load_object(APP_CLASS.require(config), APP_CLASS_KEY)
    instance = target() if isinstance(target, type) else target
    if not isinstance(instance, Application):
        raise ApiError(f"{APP_CLASS.get(config)} has no describe(app) method")
    app = StreamApplication(config)
    instance.describe(app)
    return app


def intermediate_streams(app: StreamApplication, config: Config) -> dict[str, SystemStream]:
    """``{partition_by name: intermediate stream}``; ``app.intermediate.<name>`` in config wins."""
    job_name = JOB_NAME.require(config)
    job_id = JOB_ID.get(config)
    inputs = app.inputs
    # Unset, the intermediate streams go to the system of the application's first input.
    system = INTERMEDIATE_SYSTEM.get(config) or (inputs[0].stream.system if inputs else None)
    out: dict[str, SystemStream] = {}
    for op in app.ops:
        if op.kind == OpKind.PARTITION_BY:
            name = op.params["name"]
            given = INTERMEDIATE_STREAM.get(config, name=name)
            if given:
                out[name] = SystemStream.parse(given)
            elif system is None:
                raise ApiError("no input declared, so set job.intermediate.system")
            else:
                out[name] = SystemStream(system, f"{job_name}-{job_id}-{name}")
    return out


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One stage as a runnable job: its name, its job config and the intermediate streams it reads/writes."""

    name: str
    config: Config
    intermediate_inputs: list[SystemStream]
    intermediate_outputs: list[SystemStream]
    inputs: list[SystemStream] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ApplicationPlan:
    """Every stage of an application (writers before readers) and its intermediate streams."""

    config: Config
    stages: list[StagePlan]
    intermediate_partitions: dict[SystemStream, int]

    def stage(self, name: str) -> StagePlan:
        """The stage called ``name``; the error lists the stage names."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise ApiError(f"no stage {name!r}; the application's stages are: {', '.join(s.name for s in self.stages)}")

    def create_streams(self) -> list[SystemStream]:
        """Create the intermediate streams that do not exist yet (idempotent); returns those created."""
        created: list[SystemStream] = []
        for stream, partitions in self.intermediate_partitions.items():
            admin = get_system_factory(self.config, stream.system).get_admin(stream.system, self.config)
            if admin.create_stream(StreamSpec(stream.stream, partitions, intermediate=True)):
                created.append(stream)
        return created


def _partition_count(config: Config, stream: SystemStream, known: Mapping[SystemStream, int]) -> int:
    if stream in known:
        return int(known[stream])
    admin = get_system_factory(config, stream.system).get_admin(stream.system, config)
    metadata = admin.get_system_stream_metadata({stream.stream})
    return metadata[stream.stream].partition_count


def _stores_of(stage: StageSpec) -> set[str]:
    stores: set[str] = set()
    for op in stage.ops:
        if op.kind in (OpKind.WINDOW, OpKind.STREAM_JOIN):
            stores.add(op.params["store"])
        elif op.kind in (OpKind.JOIN, OpKind.SEND_TO_TABLE):
            stores.add(op.params["table"].store)
    return stores


def _table_outputs(app: StreamApplication, config: Config) -> dict[str, str]:
    """The ``delta.table.*`` keys of every output declared with ``app.output(..., schema=...)``."""
    out: dict[str, str] = {}
    for op in app.ops:
        if op.kind != OpKind.SEND_TO or op.params["output"].table is None:
            continue
        descriptor = op.params["output"]
        factory = SYSTEM_FACTORY.get(config, system=descriptor.stream.system) or ""
        if "delta" not in factory.lower():
            raise ApiError(f"output {descriptor.stream} has a table schema, but typed tables need a delta system "
                           f"(systems.{descriptor.stream.system}.samza.factory is {factory or 'not set'!r})")
        out.update(descriptor.table.config_values(descriptor.stream))
    return out


def _join_sources(op: OpSpec, stage: StageSpec, names: Mapping[str, SystemStream]) -> set[SystemStream]:
    """The streams a stream-stream join side reads inside its stage: the source inputs and intermediate
    streams its messages come from."""
    ids = {o.id for o in stage.ops}
    found: set[SystemStream] = set()
    todo = [op]
    while todo:
        node = todo.pop()
        if node.kind == OpKind.INPUT:
            found.add(node.params["descriptor"].stream)
        elif node.kind == OpKind.PARTITION_BY and node.id not in ids:
            found.add(names[node.params["name"]])
        else:
            todo.extend(node.parents)
    return found


def _check_joins(stage: StageSpec, config: Config, counts: Mapping[SystemStream, int],
                 names: Mapping[str, SystemStream], broadcast: list[str]) -> None:
    """A stream-stream join must see both sides' event time through watermarks and both sides partitioned
    alike; anything else fails here, naming the join and what to change."""
    broadcast_streams = {b.split("#", 1)[0].strip() for b in broadcast}
    adjunct_inputs = {ADSTORE_INPUT.require(config, **names) for names in ADSTORE_INPUT.find(config)
                      if ADSTORE_INPUT.is_set(config, **names)}
    for op in stage.ops:
        if op.kind != OpKind.STREAM_JOIN:
            continue
        what = f"join {op.params['name']!r}"
        sides: list[tuple[str, set[SystemStream]]] = []
        for side, parent in zip(("left", "right"), op.parents, strict=True):
            streams = _join_sources(parent, stage, names)
            for stream in sorted(streams, key=str):
                if str(stream) in adjunct_inputs:
                    raise ApiError(f"{what}: its {side} input {stream} fills an adjunct store, so its messages never "
                                   f"reach the join and it has no watermarks; join the store as a table "
                                   f"(join(app.table(...), ...)) or read the stream as an ordinary input")
                if str(stream) in broadcast_streams:
                    raise ApiError(f"{what}: its {side} input {stream} is a broadcast input (every task reads all "
                                   f"of it), so its messages would be matched, and emitted unmatched, once per task; "
                                   f"partition_by both sides by the join key, or join a broadcast table instead")
            sides.append((side, streams))
        partitions = {stream: _partition_count(config, stream, counts) for _, streams in sides for stream in streams}
        if len(set(partitions.values())) > 1:
            listed = ", ".join(f"{s} has {n}" for s, n in sorted(partitions.items(), key=lambda kv: str(kv[0])))
            raise ApiError(f"{what}: its inputs are not partitioned alike ({listed}); a join matches inside one "
                           f"task, so partition_by both sides by the join key with the same partitions=")


def plan_application(config: Config, partition_counts: Mapping[SystemStream, int] | None = None) -> ApplicationPlan:
    """Plan the application of ``config``: one :class:`StagePlan` per stage, in topological order.

    ``partition_counts`` gives input partition counts without asking the systems (tests); missing
    ones come from each system's admin.
    """
    app = build_application(config)
    stages = split_stages(app)
    names = intermediate_streams(app, config)
    counts: dict[SystemStream, int] = dict(partition_counts or {})
    inter_partitions: dict[SystemStream, int] = {}
    all_stores = {key.split(".")[1] for key in config if key.startswith("stores.") and key.count(".") >= 2}
    window_defaults = {**_WINDOW_STORE.subset(config), "factory": WINDOW_STORE_FACTORY.get(config)}
    tables = _table_outputs(app, config)
    plans: list[StagePlan] = []
    extra_holdbacks: dict[str, str] = {}
    broadcast = list(TASK_BROADCAST_INPUTS.get(config))
    for stage in stages:
        reads = [names[op.params["name"]] for op in stage.reads]
        writes = [names[op.params["name"]] for op in stage.writes]
        used = _stores_of(stage)
        # A partitioned table (an adjunct store not filled from a broadcast input) is read by the tasks of
        # the stage that joins it, partition N by task N: it is one of that stage's inputs.
        partitioned_tables = [SystemStream.parse(ADSTORE_INPUT.require(config, store=s))
                              for s in sorted(used) if ADSTORE_INPUT.is_set(config, store=s)
                              and ADSTORE_INPUT.require(config, store=s) not in {b.split("#", 1)[0] for b in broadcast}]
        inputs = list(dict.fromkeys([*stage.inputs, *reads]))
        task_count = max(_partition_count(config, s, {**counts, **inter_partitions}) for s in inputs)
        inputs = list(dict.fromkeys([*inputs, *partitioned_tables]))
        _check_joins(stage, config, {**counts, **inter_partitions}, names, broadcast)
        holdbacks = watermark_holdbacks(stage)
        for op, stream in zip(stage.writes, writes, strict=True):
            inter_partitions[stream] = op.params["partitions"] or task_count
            if holdbacks.get(op.id):
                extra_holdbacks[holdback_key(stream)] = str(holdbacks[op.id])
        values = {k: v for k, v in config.items()
                  if not (k.startswith("stores.") and k.split(".")[1] in all_stores - used)}
        # A broadcast input that fills an adjunct store of another stage stays with that stage: here it
        # would have no store to go to and reach StageTask as a message of a stream it does not read.
        foreign = {ADSTORE_INPUT.require(config, store=s) for s in all_stores - used
                   if ADSTORE_INPUT.is_set(config, store=s)}
        if any(b.split("#", 1)[0] in foreign for b in broadcast):
            values["task.broadcast.inputs"] = ",".join(b for b in broadcast if b.split("#", 1)[0] not in foreign)
        for key, value in tables.items():
            values.setdefault(key, value)  # keys set in the config win over app.output(..., schema=...)
        values.update({
            JOB_NAME.key: f"{JOB_NAME.require(config)}-{stage.name}",
            JOB_ID.key: JOB_ID.get(config),
            "task.class": STAGE_TASK_CLASS,
            APP_STAGE_KEY: stage.name,
            "task.inputs": ",".join(str(s) for s in inputs),
            INTERMEDIATE_OUTPUTS_KEY: ",".join(str(s) for s in writes),
        })
        for op in stage.ops:
            if op.kind in (OpKind.WINDOW, OpKind.STREAM_JOIN):
                store = op.params["store"]
                defaults = {**window_defaults, "key.serde": "string", "msg.serde": "json"}
                for key, value in defaults.items():
                    values.setdefault(f"stores.{store}.{key}", value)
        plans.append(StagePlan(stage.name, Config(values), reads, writes, inputs))
    # Every stage learns every intermediate stream's name, partitions and flag (StageTask needs them).
    extra: dict[str, str] = dict(extra_holdbacks)
    for name, stream in names.items():
        extra[INTERMEDIATE_STREAM.name(name=name)] = str(stream)
        extra[INTERMEDIATE_PARTITIONS.name(name=name)] = str(inter_partitions[stream])
        extra[intermediate_key(stream)] = "true"
        # Its only reader is the next stage: what that stage committed goes (Samza's planner sets the same key).
        extra[delete_committed_key(stream)] = DELETE_COMMITTED.raw(config, system=stream.system,
                                                                   stream=stream.stream) or "true"
        extra[f"systems.{stream.system}.streams.{stream.stream}.samza.offset.default"] = "oldest"
        # StageTask (de)serializes what crosses an intermediate stream itself: the runtime must pass bytes.
        extra[f"systems.{stream.system}.streams.{stream.stream}.samza.key.serde"] = "bytes"
        extra[f"systems.{stream.system}.streams.{stream.stream}.samza.msg.serde"] = "bytes"
    plans = [StagePlan(p.name, p.config.with_overrides(extra), p.intermediate_inputs, p.intermediate_outputs,
                       p.inputs) for p in plans]
    return ApplicationPlan(config, plans, inter_partitions)
