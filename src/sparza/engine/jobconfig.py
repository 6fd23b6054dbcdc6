"""The job config model: every runtime key parsed and validated once, at start, on the driver.

A bad value fails here with :class:`ConfigError` naming the key, before Spark starts. The same
:class:`JobConfig` is rebuilt on executors from the plain config mapping (it is cheap and pure).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sparza.config import INT, LIST, STR, Choice, Config, Int, define_check, define_key
from sparza.config.samza import translate
from sparza.config.shared import (
    APP_CLASS,
    JOB_ID,
    JOB_NAME,
    LOGGED_STORE_BASE_DIR,
    TASK_BROADCAST_INPUTS,
    TASK_CLASS,
    TASK_INPUTS,
)
from sparza.coordination.settings import COORDINATOR_FACTORY
from sparza.deadletters import DROP_DESERIALIZATION
from sparza.engine.expansion import expansion_policy
from sparza.errors import PAYLOAD_PREFIX_KEY, ConfigError, set_payload_prefix_bytes
from sparza.state.kv.factory import STORE_FACTORY
from sparza.streams import SystemStream, parse_input_list
from sparza.systems import SYSTEM_FACTORY
from sparza.systems.settings import STREAM_BOOTSTRAP, STREAM_BOUNDED, STREAM_RESET_OFFSET

__all__ = [
    "CHECKPOINT_AZURE_CONTAINER",
    "CHECKPOINT_FACTORY",
    "CHECKPOINT_LOCAL_DIR",
    "COMMIT_MS",
    "MAX_BATCH_MESSAGES",
    "METRICS_JSONL_PATH",
    "PROCESSOR_ID",
    "PROMETHEUS_PORT",
    "SPARK_CHECKPOINT_DIR",
    "WINDOW_MS",
    "InputSpec",
    "JobConfig",
    "offset_default",
]

_PKG = "runtime"

PAYLOAD_PREFIX = define_key(PAYLOAD_PREFIX_KEY, 16, "At most this many bytes of a message payload (key or value) "
                            "appear in an error message, marked as a prefix; payloads may hold personal data. 0 shows "
                            "none.", _PKG, kind=Int(min_value=0))
MAX_BATCH_MESSAGES = define_key("task.max.batch.messages", 100_000, "Most messages per SSP in one batch (caps each "
                                "plan).", _PKG, kind=Int(min_value=1))
COMMIT_MS = define_key("task.commit.ms", 1000, "Trigger interval: a batch (and its commit) at most this often.", _PKG,
                       kind=Int(min_value=0))
WINDOW_MS = define_key("task.window.ms", -1, "Call WindowableTask.window this often, the first time this long after "
                       "the task's first batch (checked at batch boundaries; a due window plans a batch of its own, "
                       "except under --once); -1 off.", _PKG, kind=INT)
IGNORED_EXCEPTIONS = define_key("task.ignored.exceptions", "", "Comma list of exception class names (or *) a task may "
                                "raise per message without stopping the job.", _PKG, kind=LIST)
GROUPER_FACTORY = define_key("task.name.grouper.factory", "partition", "How SSPs become tasks; only 'partition' "
                             "(Samza's GroupByPartition) exists.", _PKG,
                             kind=Choice("partition", "group-by-partition", "groupbypartition"))
CHECKPOINT_FACTORY = define_key("job.checkpoint.factory", "blobstore", "Where task checkpoints live: blobstore (the "
                                "configured blob store's location), local or azure.", _PKG,
                                kind=Choice("blobstore", "local", "azure"))
CHECKPOINT_LOCAL_DIR = define_key("job.checkpoint.local.dir", None, "Dir of task checkpoints for "
                                  "job.checkpoint.factory=local.", _PKG, kind=STR)
CHECKPOINT_AZURE_CONTAINER = define_key("job.checkpoint.azure.container", None, "Container of task checkpoints for "
                                        "job.checkpoint.factory=azure (account: azure.storage.connect).", _PKG,
                                        kind=STR)
SPARK_CHECKPOINT_DIR = define_key("job.spark.checkpoint.dir", None, "Spark's streaming checkpoint dir (default "
                                  "<job.logged.store.base.dir>/_spark/<job>/<processor>).", _PKG, kind=STR)
PROCESSOR_ID = define_key("processor.id", "0", "This processor's id (--processor-id wins); names its Spark checkpoint "
                          "dir.", _PKG, kind=STR)
SYSTEM_OFFSET_DEFAULT = define_key("systems.<system>.samza.offset.default", "upcoming", "Where a task without "
                                   "checkpoint starts: oldest or upcoming.", _PKG, kind=Choice("oldest", "upcoming"))
STREAM_OFFSET_DEFAULT = define_key("systems.<system>.streams.<stream>.samza.offset.default", None, "Where a task "
                                   "without checkpoint starts reading the stream.", _PKG,
                                   kind=Choice("oldest", "upcoming"), fallback=SYSTEM_OFFSET_DEFAULT)
PROMETHEUS_PORT = define_key("metrics.reporter.prometheus.port", None, "Serve job metrics for Prometheus on this "
                             "loopback port.", _PKG, kind=Int(min_value=0))
METRICS_JSONL_PATH = define_key("metrics.reporter.jsonl.path", None, "Append a metrics snapshot per batch to this "
                                "JSON-lines file.", _PKG, kind=STR)
define_key("spark.*", None, "Any Spark setting, passed to the SparkSession as is.", _PKG)

def offset_default(config: Config, stream: SystemStream) -> str:
    """``oldest`` or ``upcoming``: where a task without checkpoint starts reading ``stream``."""
    return STREAM_OFFSET_DEFAULT.get(config, system=stream.system, stream=stream.stream)


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
        explicit = SPARK_CHECKPOINT_DIR.get(self.config)
        if explicit:
            return explicit
        base = self.store_base_dir
        if "${" in base:
            # A base dir each executor resolves from its own environment (${SPARZA_EXECUTOR_STATE}) means nothing
            # here on the driver: the driver's own dir under .sparza, never a literal "${...}" dir in the cwd.
            base = str(Path(".sparza") / "state")
        return str(Path(base) / "_spark" / self.job_key / processor_id)

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
        set_payload_prefix_bytes(PAYLOAD_PREFIX.get(config))
        name = JOB_NAME.require(config)
        if any(ch in name for ch in "/\\#"):
            raise ConfigError(JOB_NAME.key, name, "a non-empty name without '/', '\\' or '#'")
        job_id = JOB_ID.get(config)
        if any(ch in job_id for ch in "/\\#"):
            raise ConfigError(JOB_ID.key, job_id, "a non-empty id without '/', '\\' or '#'")
        task_class = TASK_CLASS.get(config)
        app_class = APP_CLASS.get(config)
        if task_class is None and app_class is None:
            raise ConfigError(TASK_CLASS.key, None, "a dotted path of a StreamTask class (or set app.class)")
        for key, value in ((TASK_CLASS.key, task_class), (APP_CLASS.key, app_class)):
            if value is not None and not _is_dotted_path(value):
                raise ConfigError(key, value, "a dotted path like package.module.ClassName")
        GROUPER_FACTORY.get(config)
        expansion_policy(config)  # job.partition.expansion: a bad value, or new-tasks with stores, fails at start
        inputs = _parse_inputs(config, require=require_inputs and task_class is not None and app_class is None)
        checkpoint_factory = CHECKPOINT_FACTORY.get(config)
        coordinator = COORDINATOR_FACTORY.get(config)
        ignored = frozenset(IGNORED_EXCEPTIONS.get(config))
        window_ms = WINDOW_MS.get(config)
        if window_ms == 0 or window_ms < -1:
            raise ConfigError(WINDOW_MS.key, str(window_ms), "a positive number of ms, or -1 for off")
        store_names = tuple(sorted(names["store"] for names in STORE_FACTORY.find(config)))
        port = PROMETHEUS_PORT.get(config)
        spark_conf = {k: v for k, v in config.items() if k.startswith("spark.")}
        return cls(
            config=config,
            name=name,
            job_id=job_id,
            task_class=task_class,
            app_class=app_class,
            inputs=tuple(inputs),
            max_batch_messages=MAX_BATCH_MESSAGES.get(config),
            commit_ms=COMMIT_MS.get(config),
            window_ms=window_ms,
            drop_deserialization_errors=DROP_DESERIALIZATION.get(config),
            ignored_exceptions=ignored,
            # ${VARS} are expanded where the config is used: on executors this gives per-host dirs.
            store_base_dir=os.path.abspath(os.path.expandvars(LOGGED_STORE_BASE_DIR.get(config))),
            checkpoint_factory=checkpoint_factory,
            coordinator_factory=coordinator,
            spark_conf=spark_conf,
            store_names=store_names,
            prometheus_port=port,
            metrics_jsonl_path=METRICS_JSONL_PATH.get(config),
        )


def _is_dotted_path(value: str) -> bool:
    text = value.strip().replace(":", ".")
    parts = text.split(".")
    return len(parts) >= 2 and all(p.isidentifier() for p in parts)


def _parse_inputs(config: Config, *, require: bool) -> list[InputSpec]:
    main = list(TASK_INPUTS.get(config) or ())
    broadcast = list(TASK_BROADCAST_INPUTS.get(config))
    if require and not main and not broadcast:
        raise ConfigError(TASK_INPUTS.key, None, "a comma list of system.stream inputs")
    specs: list[InputSpec] = []
    seen: set[tuple[SystemStream, bool]] = set()
    for key, items, is_broadcast in ((TASK_INPUTS.key, main, False), (TASK_BROADCAST_INPUTS.key, broadcast, True)):
        for stream, partitions in parse_input_list(key, items):
            if not is_broadcast and partitions is not None:
                raise ConfigError(key, f"{stream}#...", "system.stream (whole streams; partitions are tasks) — "
                                  "list single partitions under task.broadcast.inputs")
            if is_broadcast and partitions is None:
                raise ConfigError(key, str(stream), "system.stream#N or system.stream#[N-M] (broadcast partitions)")
            if (stream, is_broadcast) in seen:
                raise ConfigError(key, str(stream), "each stream listed once")
            seen.add((stream, is_broadcast))
            if not SYSTEM_FACTORY.is_set(config, system=stream.system):
                raise ConfigError(SYSTEM_FACTORY.name(system=stream.system), None,
                                  f"the factory of system '{stream.system}' used by {key}")
            names = {"system": stream.system, "stream": stream.stream}
            specs.append(InputSpec(
                stream=stream,
                broadcast=is_broadcast,
                partitions=tuple(partitions) if partitions is not None else None,
                bootstrap=STREAM_BOOTSTRAP.get(config, **names),
                bounded=STREAM_BOUNDED.get(config, **names),
                offset_default=offset_default(config, stream),
                reset_offset=STREAM_RESET_OFFSET.get(config, **names),
            ))
    return specs


define_check(_PKG, JobConfig.from_config, order=10)  # the job's own keys are checked first
