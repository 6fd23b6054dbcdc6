"""Which streams feed which adjunct stores, parsed once from config (the seed's keys).

``stores.<store>.adstore.input`` binds a store to one stream. The stream must also be an input of
the job: in ``task.inputs`` (a *partitioned* store, one per task) or in ``task.broadcast.inputs``
(a *broadcast* store: one designated task builds it, every task reads a published snapshot).
Bootstrap and reset come from the stream's ``samza.bootstrap`` / ``samza.reset.offset``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparza.config import BOOL, STR, Config, define_check, define_key
from sparza.config.shared import APP_CLASS, APP_STAGE, TASK_BROADCAST_INPUTS, TASK_INPUTS
from sparza.errors import ConfigError
from sparza.state.backup.backup import BACKUP_FACTORIES
from sparza.state.kv.factory import STORE_FACTORY
from sparza.streams import SystemStream, SystemStreamPartition, parse_input_list
from sparza.systems.settings import STREAM_BOOTSTRAP, STREAM_RESET_OFFSET

__all__ = ["DEFAULT_BUILDER_TASK", "AdjunctConfig", "AdjunctStoreSpec", "container_store_dir"]

_PKG = "sparza.state.adjunct"
DEFAULT_BUILDER_TASK = "Partition 0"
"""The task that builds and publishes broadcast stores unless ``adstore.builder.task`` says otherwise."""

ADSTORE_INPUT = define_key("stores.<store>.adstore.input", None,
                           "system.stream whose messages fill this read-only store (one stream per store); never "
                           "delivered to the task", _PKG, kind=STR)
_EXTRACTOR = define_key("stores.<store>.adstore.key.value.extractor.factory", None,
                        "dotted path of a KeyValueExtractorFactory (default: the envelope's key and message; an "
                        "extractor may project or transform, and returns key None to skip a message)", _PKG, kind=STR)
_MANAGER = define_key("stores.<store>.adstore.manager.factory", None,
                      "dotted path of an AdjunctStoreManagerFactory replacing the built-in store manager", _PKG,
                      kind=STR)
_VERSIONED = define_key("stores.<store>.adstore.versioned", False,
                        "true: the stream delivers versions of a bounded dataset separated by end-of-dataset "
                        "markers; the store serves the last complete version", _PKG, kind=BOOL)
_BUILDER_TASK = define_key("stores.<store>.adstore.builder.task", DEFAULT_BUILDER_TASK,
                           "broadcast stores: the task that applies the stream and publishes snapshots", _PKG, kind=STR)
_CONTAINER_DIR = define_key("job.container.store.base.dir", None,
                            "host-local dir shared by the tasks of one host for broadcast store snapshots "
                            "(default <job.logged.store.base.dir>/<job.name>-<job.id>/_container)", _PKG, kind=STR)


@dataclass(frozen=True, slots=True)
class AdjunctStoreSpec:
    """One adjunct store as configured.

    ``broadcast_partitions`` lists the partitions every task reads (broadcast stores only);
    ``persistent`` is false for ``memory`` stores; ``backed_up`` when the store's snapshots go to the
    blob store (``stores.<store>.backup.factories`` has ``blobstore``; always for broadcast stores,
    which publish through it).
    """

    name: str
    stream: SystemStream
    broadcast: bool
    broadcast_partitions: tuple[int, ...]
    bootstrap: bool
    reset_offset: bool
    persistent: bool
    backed_up: bool
    versioned: bool
    extractor_factory: str | None
    manager_factory: str | None
    builder_task: str

    def is_builder(self, task_name: str) -> bool:
        """True when ``task_name`` applies this store's stream (every task for partitioned stores)."""
        return not self.broadcast or task_name == self.builder_task


@dataclass(frozen=True)
class AdjunctConfig:
    """The adjunct stores of a job and the streams bound to them. Cheap and pure: rebuild it anywhere."""

    stores: tuple[AdjunctStoreSpec, ...]

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> AdjunctConfig:
        """Parse every ``stores.<store>.adstore.input``; bad or inconsistent values raise ConfigError."""
        cfg = Config.of(config)
        main = {stream for stream, _ in parse_input_list(TASK_INPUTS.key, list(TASK_INPUTS.get(cfg) or ()))}
        broadcast: dict[SystemStream, list[int]] = {}
        for stream, parts in parse_input_list(TASK_BROADCAST_INPUTS.key, list(TASK_BROADCAST_INPUTS.get(cfg))):
            broadcast.setdefault(stream, []).extend(parts or [])
        specs = [_parse_store(cfg, names["store"], main, broadcast) for names in ADSTORE_INPUT.find(cfg)]
        return cls(tuple(specs))

    # --- questions the runtime asks ------------------------------------------------------------
    def store(self, name: str) -> AdjunctStoreSpec | None:
        """The spec of adjunct store ``name`` (None: not an adjunct store)."""
        return next((s for s in self.stores if s.name == name), None)

    def store_names(self) -> list[str]:
        """Names of the adjunct stores: the runtime must not open these as ordinary task stores."""
        return [s.name for s in self.stores]

    def is_adjunct_store(self, name: str) -> bool:
        """True when ``stores.<name>`` is an adjunct store (its directory belongs to this package)."""
        return self.store(name) is not None

    def is_adjunct(self, system_stream: SystemStream | SystemStreamPartition) -> bool:
        """True when messages of this stream fill an adjunct store (and are never delivered to tasks)."""
        stream = system_stream.system_stream if isinstance(system_stream, SystemStreamPartition) else system_stream
        return any(s.stream == stream for s in self.stores)

    def stores_of(self, system_stream: SystemStream) -> list[AdjunctStoreSpec]:
        """The stores one stream fills (usually one)."""
        return [s for s in self.stores if s.stream == system_stream]

    def input_streams(self) -> set[SystemStream]:
        """Every stream bound to an adjunct store."""
        return {s.stream for s in self.stores}

    def bootstrap_streams(self) -> set[SystemStream]:
        """Adjunct streams marked ``samza.bootstrap``: main input waits until these reach the newest
        offsets seen at job start."""
        return {s.stream for s in self.stores if s.bootstrap}

    def broadcast_streams(self) -> set[SystemStream]:
        """Adjunct streams read through ``task.broadcast.inputs``."""
        return {s.stream for s in self.stores if s.broadcast}

    def reads_input(self, task_name: str, ssp: SystemStreamPartition) -> bool:
        """Whether ``task_name`` needs the messages of ``ssp`` at all. Only the builder task of a
        broadcast store does; the runtime may skip reading broadcast adjunct SSPs for other tasks."""
        specs = self.stores_of(ssp.system_stream)
        return not specs or any(s.is_builder(task_name) for s in specs)


def _parse_store(cfg: Config, name: str, main: set[SystemStream],
                 broadcast: dict[SystemStream, list[int]]) -> AdjunctStoreSpec:
    key = ADSTORE_INPUT.name(store=name)
    raw = ADSTORE_INPUT.require(cfg, store=name)
    if "," in raw:
        raise ConfigError(key, raw, "exactly one system.stream (an adjunct store is bound to one stream)")
    try:
        stream = SystemStream.parse(raw)
    except ValueError as exc:
        raise ConfigError(key, raw, "a system.stream") from exc
    is_broadcast = stream in broadcast
    if stream in main and is_broadcast:
        raise ConfigError(key, raw, "a stream in task.inputs or in task.broadcast.inputs, not both")
    if stream not in main and not is_broadcast:
        raise ConfigError(key, raw, f"a job input: add {raw} to task.inputs (partitioned store, one per task) "
                                    f"or {raw}#[0-N] to task.broadcast.inputs (one shared copy)")
    prefix = f"stores.{name}."
    on_stream = {"system": stream.system, "stream": stream.stream}
    factory = STORE_FACTORY.get(cfg, store=name)
    backups = [b.lower() for b in BACKUP_FACTORIES.get(cfg, store=name)]
    changelog = cfg.get(prefix + "changelog", "").strip()  # a Samza key sparza does not use: refused here
    if changelog:
        raise ConfigError(prefix + "changelog", changelog,
                          "nothing: an adjunct store is rebuilt from its input stream, it has no changelog")
    if is_broadcast and factory == "memory":
        raise ConfigError(STORE_FACTORY.name(store=name), factory, "rocksdb: a broadcast store is shared as RocksDB "
                                                                   "snapshots")
    return AdjunctStoreSpec(
        name=name,
        stream=stream,
        broadcast=is_broadcast,
        broadcast_partitions=tuple(sorted(set(broadcast.get(stream, [])))),
        bootstrap=STREAM_BOOTSTRAP.get(cfg, **on_stream),
        reset_offset=STREAM_RESET_OFFSET.get(cfg, **on_stream),
        persistent=factory != "memory",
        backed_up=factory != "memory" and (is_broadcast or "blobstore" in backups),
        versioned=_VERSIONED.get(cfg, store=name),
        extractor_factory=_EXTRACTOR.get(cfg, store=name),
        manager_factory=_MANAGER.get(cfg, store=name),
        builder_task=_BUILDER_TASK.get(cfg, store=name),
    )


def container_store_dir(config: Mapping[str, str], base_dir: str | Path) -> Path:
    """The host-local directory shared by every task on this host (``job.container.store.base.dir``)."""
    explicit = _CONTAINER_DIR.get(config)
    return Path(explicit) if explicit else Path(base_dir) / "_container"


def _check_stores(config: Config) -> object:
    """The adjunct stores of a job config parse (``sparza config check``, the start of ``sparza run``)."""
    if APP_CLASS.get(config) is None or APP_STAGE.get(config) is not None:
        return AdjunctConfig.from_config(config)
    # An application's inputs (and so where its adjunct streams belong) come from its graph: each
    # planned stage is checked when it starts, not the application's own config.
    return None


define_check(_PKG, _check_stores)
