"""Samza's config spellings, in one table: factory class names, key aliases and ``sensitive.*`` keys.

A Samza job config names features by Java class (``stores.s.factory:
org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory``) and spells some keys differently
from sparza. :func:`translate` rewrites such a config into sparza's spelling and says what it did;
:func:`resolve_factory` maps one value, for readers that must not trust that a config was
translated. A Samza class name for a feature sparza does not have is an error naming the feature
and what to use instead, never a silently ignored value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sparza.config import STR, Config, define_key
from sparza.errors import ConfigError

__all__ = [
    "FACTORY_KINDS",
    "KEY_ALIASES",
    "SAMZA_UNUSED",
    "FactoryKind",
    "Note",
    "Translation",
    "resolve_factory",
    "translate",
]

_PKG = "sparza.config.samza"
_SAMZA = "org.apache.samza."


SAMZA_UNUSED: dict[str, str] = {
    "job.factory.class": "sparza runs jobs on Spark with `sparza run`; there is no YARN or process job factory",
    "job.container.count": "Spark decides the executors (spark.executor.instances); tasks are input partitions",
    "job.container.thread.pool.size": "tasks of a batch run in parallel as Spark tasks",
    "job.coordinator.system": "sparza needs no coordinator stream: job models live in the blob store / Azure",
    "job.coordinator.replication.factor": "sparza needs no coordinator stream",
    "job.coordinator.azure.blob.length": "sparza's job-model blob is a block blob without a fixed length",
    "job.default.system": "sparza names every stream as system.stream",
    "job.changelog.system": "sparza keeps no changelog topics: back stores up with backup.factories: blobstore",
    "job.jmx.enabled": "sparza exports metrics as JSON lines or Prometheus, not JMX",
    "job.config.rewriters": "sparza has no config rewriters",
    "job.config.rewriter.<name>.class": "sparza has no config rewriters",
    "job.security.manager.factory": "sparza has no security manager (use Azure credentials)",
    "task.checkpoint.system": "task checkpoints live in the blob store, not a Kafka topic",
    "task.checkpoint.replication.factor": "task checkpoints live in the blob store, not a Kafka topic",
    "task.checkpoint.segment.bytes": "task checkpoints live in the blob store, not a Kafka topic",
    "task.checkpoint.write.versions": "sparza always writes one checkpoint version (Samza's CheckpointV2 content)",
    "task.checkpoint.read.versions": "sparza always reads its one checkpoint version",
    "task.opts": "JVM options: set Spark's spark.executor.extraJavaOptions",
    "task.java.home": "Spark's JVM is configured by Spark",
    "task.log4j.system": "logs go to Spark's log4j configuration",
    "task.poll.interval.ms": "inputs are read per batch by Spark",
    "job.coordinator.monitor-partition-change.frequency.ms": "a job sees an input's changed partition count at every "
                                                             "metadata read of its containers (within one poll); "
                                                             "job.partition.expansion says what it does then",
    "task.shutdown.ms": "a stop finishes the running batch and commits",
    "task.max.concurrency": "one task processes its messages in order, one batch at a time",
    "task.callback.timeout.ms": "sparza tasks are synchronous",
    "task.commit.max.delay.ms": "a batch commits when its tasks finished",
    "task.consumer.batch.size": "task.max.batch.messages caps a batch",
    "task.drop.producer.errors": "a failed producer flush fails the batch, which is retried",
    "task.transactional.state.restore.enabled": "sparza's state is always transactional (versioned by batch)",
    "stores.<store>.changelog": "sparza keeps no changelog: set stores.<store>.backup.factories: blobstore to "
                                "keep the store when a host is lost",
    "stores.<store>.changelog.replication.factor": "sparza keeps no changelog",
    "stores.<store>.write.batch.size": "writes go through the object cache and are batched per commit",
    "stores.<store>.container.write.buffer.size.bytes": "set stores.<store>.rocksdb.write.buffer.size.bytes",
    "stores.<store>.container.cache.size.bytes": "set stores.<store>.rocksdb.cache.size.bytes",
    "stores.<store>.rocksdb.ttl.ms": "sparza's RocksDB stores have no TTL",
    "stores.<store>.clean.on.container.start": "restores always verify the local copy against the snapshot",
    "stores.<store>.side.inputs.processor.serialized.instance": "a serialized Java instance cannot be used",
    "systems.<system>.streams.<stream>.samza.priority": "sparza reads every input of a batch; bootstrap streams "
                                                        "go first",
    "systems.<system>.samza.fetch.threshold": "inputs are read per batch by Spark",
    "metrics.reporters": "sparza reports metrics with metrics.reporter.jsonl.path and "
                         "metrics.reporter.prometheus.port",
    "metrics.reporter.<name>.class": "sparza reports metrics with metrics.reporter.jsonl.path and "
                                     "metrics.reporter.prometheus.port",
    "metrics.reporter.<name>.stream": "sparza has no metrics stream reporter",
    "metrics.reporter.<name>.interval": "metrics are reported once per batch",
    "yarn.*": "sparza runs on Spark: set spark.* (spark.executor.memory, spark.executor.cores, ...)",
    "cluster-manager.*": "sparza runs on Spark: set spark.*",
    "app.runner.class": "sparza runs applications with `sparza run`",
    "app.mode": "sparza decides batch or stream from bounded inputs",
}
"""Samza keys sparza knows and deliberately does not use, with why: warned about, never silently ignored."""


@dataclass(frozen=True, slots=True)
class FactoryKind:
    """Where one kind of factory is configured and how Samza's class names map onto sparza's.

    ``classes`` maps a Samza class name to sparza's short name; ``unsupported`` maps a Samza class
    of a feature sparza lacks to what to do instead; ``feature`` names the kind in messages.
    """

    feature: str
    key_pattern: str
    choices: tuple[str, ...]
    classes: Mapping[str, str]
    unsupported: Mapping[str, str] = field(default_factory=dict)
    is_list: bool = False


FACTORY_KINDS: dict[str, FactoryKind] = {
    "system": FactoryKind(
        "system", r"systems\.[^.]+\.samza\.factory",
        ("delta", "azureblob", "kafka", "eventhubs", "inmemory", "a dotted Python path"),
        {
            "org.apache.samza.system.azureblob.AzureBlobSystemFactory": "azureblob",
            "org.apache.samza.system.kafka.KafkaSystemFactory": "kafka",
            "org.apache.samza.system.eventhub.EventHubSystemFactory": "eventhubs",
            "org.apache.samza.system.inmemory.InMemorySystemFactory": "inmemory",
        },
        {
            "org.apache.samza.system.hdfs.HdfsSystemFactory": "sparza has no HDFS system: use a delta system "
            "(tables on a directory or az://) instead",
            "org.apache.samza.system.elasticsearch.ElasticsearchSystemFactory": "sparza has no Elasticsearch "
            "system: write results to a delta system and index them from there",
            "org.apache.samza.system.kinesis.KinesisSystemFactory": "sparza has no Kinesis system: use kafka, "
            "eventhubs or delta",
        }),
    "coordinator": FactoryKind(
        "job coordinator", r"job\.coordinator\.factory", ("standalone", "azure"),
        {
            "org.apache.samza.coordinator.AzureJobCoordinatorFactory": "azure",
            "org.apache.samza.standalone.PassthroughJobCoordinatorFactory": "standalone",
        },
        {
            "org.apache.samza.zk.ZkJobCoordinatorFactory": "sparza has no ZooKeeper coordination: use "
            "org.apache.samza.coordinator.AzureJobCoordinatorFactory (azure) to share tasks between processors",
        }),
    "store": FactoryKind(
        "storage engine", r"stores\.[^.]+\.factory", ("rocksdb", "memory"),
        {
            "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory": "rocksdb",
            "org.apache.samza.storage.kv.inmemory.InMemoryKeyValueStorageEngineFactory": "memory",
        }),
    "backup": FactoryKind(
        "state backend", r"stores\.(?:[^.]+\.)?(?:backup|restore)\.factories", ("blobstore",),
        {"org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory": "blobstore"},
        {
            "org.apache.samza.storage.KafkaChangelogStateBackendFactory": "sparza keeps no changelog topics: back "
            "the store up with org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory (blobstore)",
        }, is_list=True),
    "checkpoint": FactoryKind(
        "checkpoint manager", r"job\.checkpoint\.factory", ("blobstore", "local", "azure"),
        {
            # Task checkpoints live in sparza's blob store, next to the state they name; a Kafka
            # checkpoint topic has no role there (translate() says so in a note).
            "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory": "blobstore",
            "org.apache.samza.checkpoint.file.FileSystemCheckpointManagerFactory": "local",
            "org.apache.samza.checkpoint.azure.AzureCheckpointManagerFactory": "azure",
        }),
    "serde": FactoryKind(
        "serde", r"serializers\.registry\.[^.]+\.class", ("bytes", "string", "json", "integer", "long", "double",
                                                           "avro"),
        {
            "org.apache.samza.serializers.ByteSerdeFactory": "bytes",
            "org.apache.samza.serializers.ByteBufferSerdeFactory": "bytes",
            "org.apache.samza.serializers.StringSerdeFactory": "string",
            "org.apache.samza.serializers.JsonSerdeFactory": "json",
            "org.apache.samza.serializers.JsonSerdeV2Factory": "json",
            "org.apache.samza.serializers.IntegerSerdeFactory": "integer",
            "org.apache.samza.serializers.LongSerdeFactory": "long",
            "org.apache.samza.serializers.DoubleSerdeFactory": "double",
        },
        {
            "org.apache.samza.serializers.SerializableSerdeFactory": "Java serialization cannot be read from "
            "Python: use json or avro",
            "org.apache.samza.serializers.MetricsSnapshotSerdeFactory": "sparza has no metrics snapshot stream: it "
            "reports metrics through metrics.reporter.jsonl.path and metrics.reporter.prometheus.port",
            "org.apache.samza.serializers.UUIDSerdeFactory": "sparza has no UUID serde: use string",
            "org.apache.samza.serializers.KVSerdeFactory": "a KV serde is configured as separate key and msg serdes "
                                                           "in sparza",
        }),
    "partition mapper": FactoryKind(
        "stream partition mapper (partition expansion)", r"job\.partition\.expansion",
        ("auto", "fail", "group", "new-tasks"),
        {
            "org.apache.samza.container.grouper.stream.HashSystemStreamPartitionMapperFactory": "group",
        }),
    "grouper": FactoryKind(
        "stream partition grouper", r"task\.name\.grouper\.factory", ("partition",),
        {
            "org.apache.samza.container.grouper.stream.GroupByPartitionFactory": "partition",
        },
        {
            "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory": "sparza groups input "
            "partitions by partition number only (GroupByPartition): remove the key",
            "org.apache.samza.container.grouper.stream.AllSspToSingleTaskGrouperFactory": "sparza groups input "
            "partitions by partition number only (GroupByPartition): remove the key",
        }),
}
"""Every config key that takes a factory, by kind: the one table of Samza class names sparza accepts."""

_KIND_PATTERNS = [(re.compile(f"^{kind.key_pattern}$"), name) for name, kind in FACTORY_KINDS.items()]


KEY_ALIASES: dict[str, str] = {
    "task.checkpoint.factory": "job.checkpoint.factory",
    "task.checkpoint.path": "job.checkpoint.local.dir",
    "task.watermark.quorum.size.percentage": "task.watermark.quorum.percentage",
    # Samza's TaskConfig constant really contains a comma.
    "task.watermark.quorum.size,percentage": "task.watermark.quorum.percentage",
    "job.systemstreampartition.grouper.factory": "task.name.grouper.factory",
    "job.system.stream.partition.mapper.factory": "job.partition.expansion",
    "app.name": "job.name",
    "app.id": "job.id",
}
"""Samza key spellings and the sparza key each one sets (both set to different values is an error)."""

SENSITIVE_PREFIX = "sensitive."

define_key("stores.backup.factories", None, "Samza's job-wide default of stores.<store>.backup.factories for every "
           "store that names none (blobstore or Samza's BlobStoreStateBackendFactory).", _PKG, kind=STR)
define_key("stores.<store>.restore.factories", None, "Accepted for Samza configs: sparza restores a store from "
           "where it backs it up, so this must name the same backend as backup.factories.", _PKG, kind=STR)
define_key("stores.restore.factories", None, "Job-wide stores.<store>.restore.factories.", _PKG, kind=STR)
define_key("serializers.registry.<name>.class", None, "Samza serde registry: a name usable in *.key.serde / "
           "*.msg.serde, bound to a Samza SerdeFactory class or a built-in serde name.", _PKG, kind=STR)
define_key("sensitive.<key>", None, "Samza's prefix for secret values (sensitive.systems.<container>.azureblob."
           "account.key): the value is used as <key> and never shown.", _PKG, kind=STR)
define_key("streams.<stream>.samza.system", None, "Samza's stream-id configs: the system of stream id <stream>; "
           "its streams.<stream>.* keys become systems.<system>.streams.<physical name>.* keys.", _PKG, kind=STR)
define_key("stores.<store>.side.inputs", None, "Samza's side inputs: one system.stream that fills the store; "
           "becomes stores.<store>.adstore.input (a partitioned adjunct store) and joins task.inputs.", _PKG, kind=STR)
define_key("stores.<store>.side.inputs.processor.factory", None, "Samza's spelling of "
           "stores.<store>.adstore.key.value.extractor.factory (a Python KeyValueExtractorFactory).", _PKG, kind=STR)
for _alias, _target in KEY_ALIASES.items():
    define_key(_alias, None, f"Samza's spelling of {_target}.", _PKG, kind=STR)


@dataclass(frozen=True, slots=True)
class Note:
    """One thing :func:`translate` did or found: ``level`` ``info`` (a rewrite), ``warning`` (a value
    that has no effect in sparza) or ``error`` (a value sparza cannot honour)."""

    key: str
    level: Literal["info", "warning", "error"]
    message: str


@dataclass(frozen=True)
class Translation:
    """The config in sparza's spelling and the notes on how it got there."""

    config: Config
    notes: tuple[Note, ...]

    @property
    def errors(self) -> list[Note]:
        """The notes that stop a job from starting."""
        return [n for n in self.notes if n.level == "error"]

    def raise_first_error(self) -> None:
        """Raise :class:`ConfigError` for the first error note, if there is one."""
        for note in self.errors:
            text = note.message if f"'{note.key}'" in note.message else f"config key '{note.key}': {note.message}"
            raise ConfigError(note.key, None, note.message, message=text)


def factory_kind_of(key: str) -> FactoryKind | None:
    """The factory kind configured at ``key``, or None for keys that name no factory."""
    for pattern, name in _KIND_PATTERNS:
        if pattern.match(key):
            return FACTORY_KINDS[name]
    return None


def resolve_factory(kind: str, key: str, value: str) -> str:
    """``value`` of ``key`` with Samza class names replaced by sparza's short names.

    Short names and non-Samza dotted paths come back unchanged (their readers validate them); a
    Samza class of a feature sparza lacks, or one this table does not know, raises
    :class:`ConfigError` naming the feature and what to use instead.
    """
    spec = FACTORY_KINDS[kind]
    items = [v.strip() for v in value.split(",") if v.strip()] if spec.is_list else [value.strip()]
    out = []
    for item in items:
        if item in spec.classes:
            out.append(spec.classes[item])
        elif item in spec.unsupported:
            raise ConfigError(key, item, spec.unsupported[item],
                              message=f"config key '{key}' names {item}: {spec.unsupported[item]}")
        elif item.startswith(_SAMZA):
            known = ", ".join(f"{c} ({n})" for c, n in spec.classes.items())
            raise ConfigError(key, item, "", message=(
                f"config key '{key}' names {item}, a Samza {spec.feature} sparza does not have: use one of "
                f"{', '.join(spec.choices)}" + (f" (Samza names accepted: {known})" if known else "")))
        else:
            out.append(item)
    return ",".join(out)


def translate(config: Mapping[str, str]) -> Translation:
    """Rewrite a config in Samza's spelling into sparza's; idempotent on a sparza config.

    Applies, in order: ``sensitive.<key>`` → ``<key>``; Samza key aliases; the job-wide
    ``stores.backup.factories``; factory class names → short names; serde registry names → the
    built-in serde they stand for. Every rewrite and every problem is a :class:`Note`.
    """
    values = dict(config.items())
    notes: list[Note] = []

    # sensitive.streams.<x>.eventhubs.* is read with its prefix by the Event Hubs mapping (pass-through).
    for key in [k for k in values if k.startswith(SENSITIVE_PREFIX) and not k.startswith("sensitive.streams.")]:
        target = key[len(SENSITIVE_PREFIX):]
        _set(values, notes, key, target, values[key], secret=True)

    # Samza's task.name.grouper.factory places tasks on containers (sparza's key of that name groups
    # partitions into tasks): Spark and the job coordinator place tasks, so it has no effect here.
    grouper = values.get("task.name.grouper.factory", "").strip()
    if grouper.startswith(_SAMZA + "container.grouper.task."):
        del values["task.name.grouper.factory"]
        notes.append(Note("task.name.grouper.factory", "warning", f"{grouper} places tasks on Samza containers; "
                                                                  "in sparza Spark and the job coordinator place "
                                                                  "tasks, so it is not used"))

    for alias, target in KEY_ALIASES.items():
        if alias in values:
            # Moved, not copied: the translated config has one spelling, so translating it again is a no-op.
            _set(values, notes, alias, target, values[alias], secret=False)
            if values.get(target) == values[alias]:
                del values[alias]

    _stream_ids(values, notes)
    _side_inputs(values, notes)

    default_backup = values.get("stores.backup.factories")
    if default_backup:
        for store in sorted(_store_names(values)):
            own = f"stores.{store}.backup.factories"
            if own not in values:
                values[own] = default_backup
                notes.append(Note(own, "info", f"set from stores.backup.factories ({default_backup})"))

    for key in sorted(values):
        kind = factory_kind_of(key)
        if kind is None or not values[key].strip():
            continue
        name = next(n for n, k in FACTORY_KINDS.items() if k is kind)
        try:
            resolved = resolve_factory(name, key, values[key])
        except ConfigError as exc:
            if name == "serde" and not _serde_used(values, key.split(".")[2]):
                notes.append(Note(key, "warning", f"{exc} (not used by any key.serde/msg.serde here, so ignored)"))
                continue
            notes.append(Note(key, "error", str(exc)))
            continue
        if resolved != values[key].strip():
            notes.append(Note(key, "info", f"{values[key].strip()} → {resolved}"))
            if values[key].strip() == "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory":
                notes.append(Note(key, "warning", "task checkpoints go to the blob store (blob.store.*) instead of "
                                                  "a Kafka topic: the same guarantee, one place for state and "
                                                  "checkpoints"))
            values[key] = resolved

    _check_backups(values, notes)
    _resolve_serde_names(values, notes)
    return Translation(Config(values), tuple(notes))


_STREAM_KEY = re.compile(r"^streams\.([^.]+)\.(.+)$")
_STREAM_ID_KEYS = ("samza.system", "samza.physical.name")


def _stream_ids(values: dict[str, str], notes: list[Note]) -> None:
    """Samza's stream-id configs ``streams.<id>.*`` → ``systems.<s>.streams.<physical>.*``.

    ``streams.<id>.samza.system`` (else ``job.default.system``) names the system and
    ``streams.<id>.samza.physical.name`` (else the id) the stream; every other key of the id moves
    under the stream's ``systems.<s>.streams.<physical>.`` prefix. Event Hubs keys
    (``streams.<id>.eventhubs.*``) stay, as the Event Hubs mapping reads them there."""
    ids: dict[str, list[str]] = {}
    for key in values:
        match = _STREAM_KEY.match(key)
        if match and not match.group(2).startswith("eventhubs."):
            ids.setdefault(match.group(1), []).append(key)
    for stream_id, keys in sorted(ids.items()):
        system = values.get(f"streams.{stream_id}.samza.system") or values.get("job.default.system")
        if not system:
            notes.append(Note(keys[0], "error", f"stream id {stream_id!r} has no system: set "
                                                f"streams.{stream_id}.samza.system (or job.default.system)"))
            continue
        physical = values.get(f"streams.{stream_id}.samza.physical.name") or stream_id
        for key in sorted(keys):
            rest = key[len(f"streams.{stream_id}."):]
            target = f"systems.{system}.streams.{physical}.{rest}"
            if rest not in _STREAM_ID_KEYS:
                _set(values, notes, key, target, values[key], secret=False)
            if rest in _STREAM_ID_KEYS or values.get(target) == values[key]:
                del values[key]   # moved: translating the result again changes nothing
        if physical != stream_id:
            notes.append(Note(f"streams.{stream_id}.samza.physical.name", "info",
                              f"stream id {stream_id} is {system}.{physical}: name it so in task.inputs and "
                              "outputs"))


_SIDE_INPUTS = re.compile(r"^stores\.([^.]+)\.side\.inputs$")


def _side_inputs(values: dict[str, str], notes: list[Note]) -> None:
    """Samza's side-input stores become partitioned adjunct stores: ``stores.<s>.side.inputs`` (one
    ``system.stream``) is ``stores.<s>.adstore.input``, and the stream joins ``task.inputs`` as Samza adds
    side inputs to the job's inputs; the processor factory is the adjunct store's extractor factory."""
    for key in sorted(k for k in values if _SIDE_INPUTS.match(k)):
        store = key.split(".")[1]
        streams = [v.strip() for v in values[key].split(",") if v.strip()]
        if len(streams) != 1 or "." not in streams[0]:
            notes.append(Note(key, "error", f"{values[key]!r}: sparza fills a side-input (adjunct) store from "
                                            "exactly one system.stream; give each stream its own store"))
            continue
        target = f"stores.{store}.adstore.input"
        _set(values, notes, key, target, streams[0], secret=False)
        if values.get(target) != streams[0]:
            continue
        del values[key]
        listed = {item.strip().split("#")[0] for name in ("task.inputs", "task.broadcast.inputs")
                  for item in values.get(name, "").split(",") if item.strip()}
        if streams[0] not in listed:
            values["task.inputs"] = ",".join([*(v.strip() for v in values.get("task.inputs", "").split(",")
                                                if v.strip()), streams[0]])
            notes.append(Note("task.inputs", "info", f"{streams[0]} added: the side input of store {store} "
                                                     "(Samza adds side inputs to the job's inputs)"))
        factory = f"stores.{store}.side.inputs.processor.factory"
        if factory in values:
            extractor = f"stores.{store}.adstore.key.value.extractor.factory"
            _set(values, notes, factory, extractor, values[factory], secret=False)
            if values.get(extractor) == values[factory]:
                del values[factory]
                notes.append(Note(extractor, "warning", "a side-input processor is a KeyValueExtractorFactory "
                                                        "in sparza (get_key / get_value per message)"))


def _set(values: dict[str, str], notes: list[Note], source: str, target: str, value: str, *, secret: bool) -> None:
    existing = values.get(target)
    if existing is not None and existing != value:
        shown = "" if secret else f" ({value!r} vs {existing!r})"
        notes.append(Note(source, "error", f"both {source} and {target} are set, to different values{shown}: "
                                           "keep one"))
        return
    if existing is None:
        values[target] = value
        notes.append(Note(source, "info", f"used as {target}"))


def _store_names(values: Mapping[str, str]) -> set[str]:
    return {k.split(".")[1] for k in values if k.startswith("stores.") and k.count(".") >= 2
            and k.split(".")[1] not in ("backup", "restore")}


def _check_backups(values: dict[str, str], notes: list[Note]) -> None:
    for store in sorted(_store_names(values)):
        backup = {v.strip().lower() for v in values.get(f"stores.{store}.backup.factories", "").split(",")
                  if v.strip()}
        for factory in backup - {"blobstore"}:
            if not factory.startswith(_SAMZA):  # Samza classes were reported by resolve_factory already
                notes.append(Note(f"stores.{store}.backup.factories", "error",
                                  f"{factory!r} is not a state backend: use blobstore (or Samza's "
                                  "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory)"))
        restore_key = f"stores.{store}.restore.factories"
        restore = values.get(restore_key) or values.get("stores.restore.factories", "")
        wanted = {v.strip().lower() for v in restore.split(",") if v.strip()}
        if wanted and not wanted <= backup and not any(w.startswith(_SAMZA) for w in wanted):
            notes.append(Note(restore_key, "error", f"restores from {', '.join(sorted(wanted))} but the store is "
                                                    f"not backed up there: set stores.{store}.backup.factories to "
                                                    "blobstore as well"))


_BUILTIN_SERDES = {"bytes", "byte", "noop", "string", "str", "utf8", "json", "avro", "integer", "int", "long",
                   "double"}
_SERDE_KEY = re.compile(r"^(?:systems\.[^.]+\.(?:streams\..+\.)?samza|stores\.[^.]+)\.(?:key|msg)\.serde$")


def _serde_used(values: Mapping[str, str], name: str) -> bool:
    return any(_SERDE_KEY.match(k) and v.strip() == name for k, v in values.items())


def _resolve_serde_names(values: dict[str, str], notes: list[Note]) -> None:
    """``samza.msg.serde: mystring`` with ``serializers.registry.mystring.class: ...StringSerdeFactory``
    becomes ``string``; an unregistered name that is not built in is an error naming the registry key."""
    for key in sorted(values):
        if not _SERDE_KEY.match(key) or not values[key].strip():
            continue
        name = values[key].strip()
        registry = values.get(f"serializers.registry.{name}.class")
        if registry is not None and registry.strip() != name:
            if registry.strip().startswith(_SAMZA):
                continue  # an unsupported class: reported as an error on the registry key
            values[key] = registry.strip()
            notes.append(Note(key, "info", f"serde {name!r} → {registry.strip()} "
                                           f"(serializers.registry.{name}.class)"))
        elif registry is None and name.lower() not in _BUILTIN_SERDES:
            notes.append(Note(key, "error", f"serde {name!r} is neither built in (bytes, string, json, integer, "
                                            f"long, double, avro) nor registered: set "
                                            f"serializers.registry.{name}.class"))
