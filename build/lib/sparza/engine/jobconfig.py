"""The job config model: every runtime key parsed and validated once, at start, on the driver.

A bad value fails here with :class:`ConfigError` naming the key, before Spark starts. The same
:class:`JobConfig` is rebuilt on executors from the plain config mapping (it is cheap and pure).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sparza.config import Config, define_check, define_key
from sparza.config.samza import translate
from sparza.errors import PAYLOAD_PREFIX_KEY, ConfigError, set_payload_prefix_bytes
from sparza.streams import SystemStream, parse_input_list

__all__ = [
    "InputSpec",
    "JobConfig",
    "offset_default",
]

_PKG = "runtime"

define_key(PAYLOAD_PREFIX_KEY, "16", "At most this many bytes of a message payload (key or value) appear in an "
           "error message, marked as a prefix; payloads may hold personal data. 0 shows none.", _PKG)
define_key("task.max.batch.messages", "100000", "Most messages per SSP in one batch (caps each plan).", _PKG)
define_key("task.commit.ms", "1000", "Trigger interval: a batch (and its commit) at most this often.", _PKG)
define_key("task.window.ms", "-1", "Call WindowableTask.window this often, the first time this long after the task's "
           "first batch (checked at batch boundaries; a due window plans a batch of its own, except under --once); "
           "-1 off.",
           _PKG)
define_key("task.drop.deserialization.errors", "false",
           "Skip (and count) messages that fail to deserialize instead of stopping the job.", _PKG)
define_key("task.ignored.exceptions", "",
           "Comma list of exception class names (or *) a task may raise per message without stopping the job.",
           _PKG)
define_key("task.name.grouper.factory", "partition",
           "How SSPs become tasks; only 'partition' (Samza's GroupByPartition) exists.", _PKG)
define_key("job.checkpoint.factory", "blobstore",
           "Where task checkpoints live: blobstore (the configured blob store's location), local or azure.", _PKG)
define_key("job.checkpoint.local.dir", None, "Dir of task checkpoints for job.checkpoint.factory=local.", _PKG)
define_key("job.checkpoint.azure.container", None,
           "Container of task checkpoints for job.checkpoint.factory=azure (account: azure.storage.connect).", _PKG)
define_key("job.spark.checkpoint.dir", None,
           "Spark's streaming checkpoint dir (default <job.logged.store.base.dir>/_spark/<job>/<processor>).", _PKG)
define_key("processor.id", "0", "This processor's id (--processor-id wins); names its Spark checkpoint dir.", _PKG)
define_key("systems.<system>.samza.offset.default", "upcoming",
           "Where a task without checkpoint starts: oldest or upcoming.", _PKG)
define_key("systems.<system>.streams.<stream>.samza.offset.default", None,
           "Per-stream override of systems.<system>.samza.offset.default.", _PKG)
define_key("systems.<system>.streams.<stream>.samza.bootstrap", "false",
           "Bootstrap stream: other inputs wait until it reached the offsets seen at start.", _PKG)
define_key("metrics.reporter.prometheus.port", None, "Serve job metrics for Prometheus on this loopback port.",
           _PKG)
define_key("metrics.reporter.jsonl.path", None, "Append a metrics snapshot per batch to this JSON-lines file.",
           _PKG)
define_key("spark.*", None, "Any Spark setting, passed to the SparkSession as is.", _PKG)

_OFFSET_DEFAULTS = ("oldest", "upcoming")


def offset_default(config: Config, stream: SystemStream) -> str:
    """``oldest`` or ``upcoming``: where a task without checkpoint starts reading ``stream``."""
    key = f"systems.{stream.system}.streams.{stream.stream}.samza.offset.default"
    value = config.get_str(key, None)
    if value is None:
        key = f"systems.{stream.system}.samza.offset.default"
        value = config.get_str(key, "upcoming")
    value = value.strip().lower()
    if value not in _OFFSET_DEFAULTS:
        raise ConfigError(key, value, "oldest or upcoming")
    return value


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One input stream of the job: which partitions (None: all, i.e. partitioned by task) and how read."""

    stream: SystemStream
    broadcast: bool
    partitions: tuple[int, ...] | None
    bootstrap: bool
    bounded: bool
    offset_default: str
    reset_offset: bool = False
    """``samza.reset.offset``: at every start, ignore the checkpointed offset and start at ``offset_default``."""


@dataclass(frozen=True)
class JobConfig:
    """The validated runtime view of a job's config (the raw :class:`Config` stays in ``config``)."""

    config: Config
    name: str
    job_id: str
    task_class: str | None
    app_class: str | None
    inputs: tuple[InputSpec, ...]
    max_batch_messages: int
    commit_ms: int
    window_ms: int
    drop_deserialization_errors: bool
    ignored_exceptions: frozenset[str]
    store_base_dir: str
    checkpoint_factory: str
    coordinator_factory: str
    spark_conf: dict[str, str] = field(default_factory=dict)
    store_names: tuple[str, ...] = ()
    prometheus_port: int | None = None
    metrics_jsonl_path: str | None = None

    @property
    def job_key(self) -> str:
        """``<job.name>-<job.id>``: the job's identity in paths, app transactions and checkpoints."""
        return f"{self.name}-{self.job_id}"

    @property
    def task_store_base_dir(self) -> str:
        """``<job.logged.store.base.dir>/<job.name>-<job.id>``: task stores of different jobs (or stages of
        one application) sharing a base dir never collide, even with the same store names."""
        return str(Path(self.store_base_dir) / self.job_key)

    @property
    def systems(self) -> list[str]:
        """The systems the job's inputs come from, sorted."""
        return sorted({spec.stream.system for spec in self.inputs})

    def spark_checkpoint_dir(self, processor_id: str) -> str:
        """Spark's checkpoint dir for this processor's query."""
        explicit = self.config.get_str("job.spark.checkpoint.dir", None)
        if explicit:
            return explicit
        return str(Path(self.store_base_dir) / "_spark" / self.job_key / processor_id)

    @classmethod
    def from_config(cls, config: Config, *, require_inputs: bool = True) -> JobConfig:
        """Parse and validate every runtime key; raises :class:`ConfigError` naming the first bad one.

        Samza's spellings (factory class names, key aliases, ``sensitive.*``) are translated first, and
        ``config`` of the result is the translated config, so every reader of ``job.config`` sees sparza's.
        """
        translation = translate(config)
        translation.raise_first_error()
        config = translation.config
        # Driver and executors build a JobConfig before touching any message: the limit holds everywhere.
        set_payload_prefix_bytes(config.get_int(PAYLOAD_PREFIX_KEY, 16, min_value=0))
        name = config.get_str("job.name").strip()
        if not name or any(ch in name for ch in "/\\#"):
            raise ConfigError("job.name", name, "a non-empty name without '/', '\\' or '#'")
        job_id = config.get_str("job.id", "1").strip()
        if not job_id or any(ch in job_id for ch in "/\\#"):
            raise ConfigError("job.id", job_id, "a non-empty id without '/', '\\' or '#'")
        task_class = config.get_str("task.class", None)
        app_class = config.get_str("app.class", None)
        if task_class is None and app_class is None:
            raise ConfigError("task.class", None, "a dotted path of a StreamTask class (or set app.class)")
        for key, value in (("task.class", task_class), ("app.class", app_class)):
            if value is not None and not _is_dotted_path(value):
                raise ConfigError(key, value, "a dotted path like package.module.ClassName")
        grouper = config.get_str("task.name.grouper.factory", "partition").strip().lower()
        if grouper not in ("partition", "group-by-partition", "groupbypartition"):
            raise ConfigError("task.name.grouper.factory", grouper, "partition (GroupByPartition)")
        inputs = _parse_inputs(config, require=require_inputs and task_class is not None and app_class is None)
        checkpoint_factory = config.get_str("job.checkpoint.factory", "blobstore").strip().lower()
        if checkpoint_factory not in ("blobstore", "local", "azure"):
            raise ConfigError("job.checkpoint.factory", checkpoint_factory, "blobstore, local or azure")
        coordinator = config.get_str("job.coordinator.factory", "standalone").strip().lower()
        if coordinator not in ("standalone", "azure", "passthrough"):
            raise ConfigError("job.coordinator.factory", coordinator, "standalone or azure")
        ignored = frozenset(x.strip() for x in config.get_list("task.ignored.exceptions", []) if x.strip())
        window_ms = config.get_int("task.window.ms", -1)
        if window_ms == 0 or window_ms < -1:
            raise ConfigError("task.window.ms", str(window_ms), "a positive number of ms, or -1 for off")
        store_names = tuple(sorted({k.split(".")[1] for k in config if k.startswith("stores.") and
                                    k.endswith(".factory") and k.count(".") == 2}))
        port = config.get_int("metrics.reporter.prometheus.port", None, min_value=0)
        spark_conf = {k: v for k, v in config.items() if k.startswith("spark.")}
        return cls(
            config=config,
            name=name,
            job_id=job_id,
            task_class=task_class,
            app_class=app_class,
            inputs=tuple(inputs),
            max_batch_messages=config.get_int("task.max.batch.messages", 100_000, min_value=1),
            commit_ms=config.get_int("task.commit.ms", 1000, min_value=0),
            window_ms=window_ms,
            drop_deserialization_errors=config.get_bool("task.drop.deserialization.errors", False),
            ignored_exceptions=ignored,
            # ${VARS} are expanded where the config is used: on executors this gives per-host dirs.
            store_base_dir=os.path.abspath(os.path.expandvars(config.get_str("job.logged.store.base.dir",
                                                                             ".sparza/state"))),
            checkpoint_factory=checkpoint_factory,
            coordinator_factory=coordinator,
            spark_conf=spark_conf,
            store_names=store_names,
            prometheus_port=port,
            metrics_jsonl_path=config.get_str("metrics.reporter.jsonl.path", None),
        )


def _is_dotted_path(value: str) -> bool:
    text = value.strip().replace(":", ".")
    parts = text.split(".")
    return len(parts) >= 2 and all(p.isidentifier() for p in parts)


def _parse_inputs(config: Config, *, require: bool) -> list[InputSpec]:
    main = config.get_list("task.inputs", [])
    broadcast = config.get_list("task.broadcast.inputs", [])
    if require and not main and not broadcast:
        raise ConfigError("task.inputs", None, "a comma list of system.stream inputs")
    specs: list[InputSpec] = []
    seen: set[tuple[SystemStream, bool]] = set()
    for key, items, is_broadcast in (("task.inputs", main, False), ("task.broadcast.inputs", broadcast, True)):
        for stream, partitions in parse_input_list(key, items):
            if not is_broadcast and partitions is not None:
                raise ConfigError(key, f"{stream}#...", "system.stream (whole streams; partitions are tasks) — "
                                  "list single partitions under task.broadcast.inputs")
            if is_broadcast and partitions is None:
                raise ConfigError(key, str(stream), "system.stream#N or system.stream#[N-M] (broadcast partitions)")
            if (stream, is_broadcast) in seen:
                raise ConfigError(key, str(stream), "each stream listed once")
            seen.add((stream, is_broadcast))
            factory_key = f"systems.{stream.system}.samza.factory"
            if config.get_str(factory_key, None) is None:
                raise ConfigError(factory_key, None, f"the factory of system '{stream.system}' used by {key}")
            prefix = f"systems.{stream.system}.streams.{stream.stream}."
            specs.append(InputSpec(
                stream=stream,
                broadcast=is_broadcast,
                partitions=tuple(partitions) if partitions is not None else None,
                bootstrap=config.get_bool(prefix + "samza.bootstrap", False),
                bounded=config.get_bool(prefix + "bounded", False),
                offset_default=offset_default(config, stream),
                reset_offset=config.get_bool(prefix + "samza.reset.offset", False),
            ))
    return specs


define_check(_PKG, JobConfig.from_config, order=10)  # the job's own keys are checked first
