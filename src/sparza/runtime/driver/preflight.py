"""Checks ``sparza run`` makes on the driver before it builds a SparkSession.

Mistakes that would otherwise surface on an executor after Spark started (and be retried by Spark
although they are deterministic) fail here in seconds with one line naming the config key and the
fix (:class:`~sparza.errors.StartCheckError`, exit code 2):

- ``task.class`` / ``app.class`` imports and has the methods the runtime calls,
- every store name the task class asks for with a literal ``get_store("name")`` is declared,
- every system's factory loads and every input stream exists,
- the blob store and the checkpoint store are usable: a local root can be written; an Azure
  container name is valid and one authenticated call (container properties, no retries,
  ``azure.storage.timeout.ms``) succeeds, so a wrong key, a stopped Azurite or an endpoint that
  never answers is reported with the endpoint and what to check;
- on a cluster master or Spark Connect (:func:`check_deployment`), nothing the executors must share with
  the driver is a local path (local blob store, local checkpoints, local Delta streams, Avro schema files)
  unless ``job.filesystem.shared: true`` says every host mounts it, no executor would look for this host's
  embedded dev storage, and every ``job.py.files`` file exists; once the session exists, executors
  can import sparza and the job's classes (:func:`check_executor_imports`, one tiny Spark job).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import tempfile
import textwrap
import weakref
from pathlib import Path
from typing import Any

from sparza.blobstore.settings import AZURE_CONTAINER, LOCAL_ROOT, MANAGER_FACTORY
from sparza.config import Config, OptionalKey
from sparza.config.shared import APP_CLASS, LOGGED_STORE_BASE_DIR, TASK_CLASS
from sparza.engine.jobconfig import CHECKPOINT_AZURE_CONTAINER, CHECKPOINT_FACTORY, CHECKPOINT_LOCAL_DIR, JobConfig
from sparza.errors import ConfigError, SparzaError, StartCheckError
from sparza.metrics import MetricsRegistry
from sparza.state.backup.backup import BACKUP_FACTORIES
from sparza.systems import SYSTEM_FACTORY
from sparza.systems.delta.settings import ACCOUNT_NAME as DELTA_ACCOUNT_NAME

__all__ = ["PROBES_SCOPE", "check_application", "check_deployment", "check_executor_imports", "check_job",
           "check_storage", "load_checked", "store_names_asked"]

PROBES_SCOPE = "probes"
"""The scope of the request counts of the start checks and of the storage watch (:mod:`sparza.azure.requests`)."""


def load_checked(path: str, key: str) -> Any:
    """Import ``module.Name`` / ``module:Name`` for ``key``; any failure of the import (not only
    ImportError: a module may raise anything at import) becomes one line naming the key."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise StartCheckError(key, path, "", message=f"config key '{key}' = {path!r}: expected a dotted path "
                                                     "like package.module.ClassName")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise StartCheckError(key, path, "", message=(
            f"config key '{key}' = {path!r}: no module named {exc.name!r} on the Python path (run from the "
            "project directory, or fix the dotted path)")) from exc
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise StartCheckError(key, path, "", message=(
            f"config key '{key}' = {path!r}: importing module {module_name} raised {type(exc).__name__}: "
            f"{first} (fix that module)")) from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise StartCheckError(key, path, "", message=(
            f"config key '{key}' = {path!r}: module {module_name} defines no {attr!r} (fix the name)")) from exc


# Per class, what store_names_asked found: reading and parsing a class's source takes ~0.1 s, and every start of
# a job of the class (each stage, each restart of an in-process TestRunner) asked again for the same answer. A
# class's code cannot change once loaded (a reloaded module makes new classes); weak keys let classes go.
_STORE_NAMES: weakref.WeakKeyDictionary[type, tuple[str, ...]] = weakref.WeakKeyDictionary()


def store_names_asked(cls: Any) -> list[str]:
    """Store names the class's own code asks for with a literal ``get_store("name")`` (a computed name
    cannot be known before it runs)."""
    owner = cls if isinstance(cls, type) else type(cls)
    try:
        return list(_STORE_NAMES[owner])
    except (KeyError, TypeError):  # TypeError: a type that takes no weak reference
        pass
    try:
        source = textwrap.dedent(inspect.getsource(owner))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_store"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.append(node.args[0].value)
    found = tuple(dict.fromkeys(names))
    try:
        _STORE_NAMES[owner] = found
    except TypeError:
        pass
    return list(found)


def _check_task_class(job: JobConfig) -> None:
    from sparza.state.adjunct import AdjunctConfig

    path = job.task_class
    assert path is not None
    cls = load_checked(path, "task.class")
    from sparza.task import BatchStreamTask, StreamTask, WindowableTask

    # The task protocols are runtime-checkable: on the class they check its methods, as on an instance.
    if not isinstance(cls, StreamTask | BatchStreamTask):
        raise StartCheckError("task.class", path, "", message=(
            f"config key 'task.class' = {path!r} has no process(envelope, collector, coordinator) method: "
            "name a StreamTask class (or a BatchStreamTask with process_batch(batch, collector, coordinator))"))
    if job.window_ms > 0 and not isinstance(cls, WindowableTask):
        raise StartCheckError("task.window.ms", str(job.window_ms), "", message=(
            f"config key 'task.window.ms' = {job.window_ms}, but task.class {path!r} has no "
            "window(collector, coordinator) method: add one, or remove task.window.ms"))
    declared = set(job.store_names) | set(AdjunctConfig.from_config(job.config).store_names())
    for name in store_names_asked(cls):
        if name not in declared:
            raise StartCheckError(f"stores.{name}.factory", None, "", message=(
                f"task.class {path!r} asks for store {name!r}, but config key 'stores.{name}.factory' is not set "
                f"(declared stores: {', '.join(sorted(declared)) or 'none'}): declare it, e.g. "
                f"stores.{name}.factory: rocksdb"))


def _check_systems(job: JobConfig) -> None:
    from sparza.engine.inputs import InputSystems
    from sparza.systems import check_configured_streams, get_system_factory

    config = job.config
    systems = sorted({k.split(".")[1] for k in config if k.startswith("systems.") and k.endswith(".samza.factory")
                      and k.count(".") == 3})
    for system in systems:
        key = f"systems.{system}.samza.factory"
        try:
            get_system_factory(config, system)
        except ConfigError:
            raise
        except Exception as exc:
            raise StartCheckError(key, SYSTEM_FACTORY.raw(config, system=system), "", message=(
                f"config key '{key}': loading the factory raised {type(exc).__name__}: {exc}")) from exc
    for spec in job.inputs:
        if spec.stream.system not in systems:
            raise StartCheckError(f"systems.{spec.stream.system}.samza.factory", None, "", message=(
                f"input {spec.stream} names system {spec.stream.system!r}, but config key "
                f"'systems.{spec.stream.system}.samza.factory' is not set: declare the system or fix task.inputs"))
    if job.inputs:
        try:
            inputs = InputSystems(job)
            _ = inputs.partition_counts  # asks each admin about each input stream
        except ConfigError:
            raise
        except SparzaError as exc:
            raise StartCheckError("task.inputs", None, "", message=f"task.inputs: {exc}") from exc
    check_configured_streams(config, {(spec.stream.system, spec.stream.stream) for spec in job.inputs})


def _check_dir(path: Path, key: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".sparza-check-"):
            pass
    except OSError as exc:
        raise StartCheckError(key, str(path), "", message=(
            f"config key '{key}' = {str(path)!r} cannot be written ({exc.strerror or exc}): point it at a "
            "writable directory")) from exc


def _blob_store_used(config: Config) -> bool:
    if CHECKPOINT_FACTORY.get(config) == "blobstore":
        return True
    return any("blobstore" in BACKUP_FACTORIES.get(config, **names) for names in BACKUP_FACTORIES.find(config))


def check_storage(config: Config, *, blob_store: bool = True, local: bool = True,
                  metrics: MetricsRegistry | None = None) -> None:
    """The checkpoint store and (``blob_store``) the blob store can be used: one authenticated call per
    Azure container; with ``local``, a write probe per local dir (the state dir included). Raises
    :class:`StartCheckError` naming the key, the endpoint and what to check. ``metrics`` counts the calls
    (group ``storage.probes``)."""
    from sparza.azure import StorageRequests, check_container, resolve_storage_account, storage_timeout_s

    requests = StorageRequests(metrics, PROBES_SCOPE) if metrics is not None else None

    checked: set[str] = set()

    def container(setting: OptionalKey[str]) -> None:
        key, name = setting.key, setting.get(config)
        if not name:
            raise StartCheckError(key, None, "", message=f"config key '{key}' is missing: name the Azure container")
        if name in checked:
            return
        checked.add(name)
        check_container(resolve_storage_account(config), name, key, storage_timeout_s(config), requests=requests)

    def directory(path: str, key: str) -> None:
        if local:
            _check_dir(Path(path).absolute(), key)

    checkpoints = CHECKPOINT_FACTORY.get(config)
    if (blob_store and _blob_store_used(config)) or checkpoints == "blobstore":
        if MANAGER_FACTORY.get(config) == "azure":
            container(AZURE_CONTAINER)
        else:
            directory(LOCAL_ROOT.get(config), LOCAL_ROOT.key)
    if checkpoints == "azure":
        container(CHECKPOINT_AZURE_CONTAINER)
    elif checkpoints == "local":
        directory(CHECKPOINT_LOCAL_DIR.require(config), CHECKPOINT_LOCAL_DIR.key)
    state_dir = LOGGED_STORE_BASE_DIR.raw(config)  # only a dir the config names: the default is made on use
    if state_dir and "$" not in state_dir and any(k.startswith("stores.") for k in config):
        directory(os.path.abspath(state_dir), LOGGED_STORE_BASE_DIR.key)  # ${VARS}: differs per executor host


def check_job(config: Config, *, metrics: MetricsRegistry | None = None) -> None:
    """Every check of a ``task.class`` job (or one planned stage of an application), driver-side and
    before Spark: raises :class:`StartCheckError` (or the :class:`ConfigError` of a bad value); ``metrics``
    counts the storage calls."""
    job = JobConfig.from_config(config)
    if job.task_class is not None:
        _check_task_class(job)
    _check_systems(job)
    check_storage(job.config, metrics=metrics)


def check_application(config: Config) -> None:
    """``app.class`` imports and has ``describe(app)``; its stages are checked with :func:`check_job`
    once planned."""
    path = APP_CLASS.require(config)
    target = load_checked(path, APP_CLASS.key)
    from sparza.api import Application

    if not isinstance(target, Application):
        raise StartCheckError("app.class", path, "", message=(
            f"config key 'app.class' = {path!r} has no describe(app) method: name a StreamApplication class"))


def _is_local_path(value: str) -> bool:
    return "://" not in value or value.startswith("file:")


def _local_paths(config: Config) -> list[tuple[str, str, str]]:
    """``(key, path, fix)`` for every local path of the config that executors read or write."""
    found: list[tuple[str, str, str]] = []
    checkpoints = CHECKPOINT_FACTORY.get(config)
    if (_blob_store_used(config) or checkpoints == "blobstore") and MANAGER_FACTORY.get(config) == "local":
        found.append((LOCAL_ROOT.key, LOCAL_ROOT.get(config),
                      "use blob.store.manager.factory: azure with blob.store.azure.container"))
    if checkpoints == "local":
        found.append((CHECKPOINT_LOCAL_DIR.key, CHECKPOINT_LOCAL_DIR.get(config) or "",
                      "use job.checkpoint.factory: azure (job.checkpoint.azure.container), or blobstore with an "
                      "Azure blob store"))
    for key, value in sorted(config.items()):
        if not key.startswith("systems."):
            continue
        if key.endswith((".delta.root", ".delta.location")) and value and _is_local_path(value):
            found.append((key, value, "put the streams on Azure: az://<container>/<prefix>"))
    for key, value in sorted(config.items()):
        if key.startswith(("systems.", "stores.")) and key.endswith(".schema") and _looks_like_path(value):
            found.append((key, value, "put the schema's JSON text into the key instead of a file path"))
    return found


def _looks_like_path(value: str) -> bool:
    """A schema value that names a file (schemas may also be JSON or ``name type, ...`` text)."""
    text = value.strip()
    return bool(text) and not text.startswith(("{", "[", '"')) and not any(c.isspace() for c in text) \
        and ("/" in text or os.sep in text or text.endswith((".avsc", ".json")))


def _uses_job_account(config: Config) -> bool:
    """Whether something resolves the job-wide Azure account (azure.storage.connect or its fallbacks)."""
    checkpoints = CHECKPOINT_FACTORY.get(config)
    blob_azure = MANAGER_FACTORY.get(config) == "azure"
    if checkpoints == "azure" or (blob_azure and (checkpoints == "blobstore" or _blob_store_used(config))):
        return True
    for key, value in config.items():
        if key.startswith("systems.") and key.endswith((".delta.root", ".delta.location")) \
                and value.startswith(("az://", "abfs")):
            system = key.split(".")[1]
            if not DELTA_ACCOUNT_NAME.get(config, system=system):
                return True
    return False


def check_deployment(config: Config, target: Any) -> None:
    """What a config needs to run on ``target`` (a :class:`~sparza.runtime.driver.session.SparkTarget`): on a cluster
    master or Spark Connect, executors run on other hosts than the driver and see none of its files.

    Raises :class:`StartCheckError` naming the key, where the job runs and the fix: for a local path that
    executors read or write (unless ``job.filesystem.shared: true``, which then needs absolute paths, as
    executors resolve relative ones against their own working dirs); for a job that finds its Azure account
    only through this host's embedded dev storage; for a ``job.py.files`` file that does not exist.
    """
    from sparza.runtime.driver.session import PY_FILES_KEY, SHARED_FS, SHARED_FS_KEY, py_files

    for path in py_files(config):
        if not os.path.isfile(path):
            raise StartCheckError(PY_FILES_KEY, path, "", message=(
                f"config key '{PY_FILES_KEY}': {path!r} does not exist: build it with 'sparza package --config "
                "<job.yaml>' or fix the path"))
    if target.local:
        return
    shared = SHARED_FS.get(config)
    for key, path, fix in _local_paths(config):
        plain = path.removeprefix("file:")
        if not shared:
            raise StartCheckError(key, path, "", message=(
                f"config key '{key}' = {path!r} is a local path, but the job runs on {target.description}, whose "
                f"executors do not share this host's files: {fix}, or set {SHARED_FS_KEY}: true if every "
                "executor mounts the same path (NFS, a dbfs:/ FUSE mount)"))
        if not os.path.isabs(plain):
            raise StartCheckError(key, path, "", message=(
                f"config key '{key}' = {path!r} is relative: with {SHARED_FS_KEY}: true on {target.description}, "
                "give the absolute path of the shared mount (each executor resolves a relative path against its "
                "own working dir)"))
    if _uses_job_account(config):
        from sparza.azure import resolve_storage_account

        try:
            resolve_storage_account(config, allow_dev_storage=False)
        except ConfigError as exc:
            raise StartCheckError("azure.storage.connect", None, "", message=(
                f"config key 'azure.storage.connect' is missing: on {target.description} executors cannot find this "
                "host's embedded dev storage; set azure.storage.connect (or AZURE_STORAGE_CONNECTION_STRING on the "
                "driver: sparza ships it to executors with the job's secrets)")) from exc


_PROBED: weakref.WeakKeyDictionary[Any, set[tuple[str, ...]]] = weakref.WeakKeyDictionary()


def _class_modules(config: Config) -> list[str]:
    modules = []
    for setting in (TASK_CLASS, APP_CLASS):
        path = setting.get(config)
        if path:
            modules.append(path.partition(":")[0] if ":" in path else path.rpartition(".")[0])
    return modules


def check_executor_imports(spark: Any, config: Config) -> None:
    """On a session whose executors run elsewhere (a cluster master, Spark Connect): one tiny Spark job
    imports sparza's executor side and the modules of ``task.class``/``app.class`` where tasks will run.
    Raises :class:`StartCheckError` naming the module, the error and the fix (``job.py.files``), instead
    of every task failing on it. Once per session and set of modules."""
    from sparza.runtime.driver.session import PY_FILES, PY_FILES_KEY, spark_target

    target = spark_target(spark)
    if target.local:
        return
    modules = ("sparza.engine.executor", *_class_modules(config))
    probed = _PROBED.setdefault(spark, set())
    if modules in probed:
        return

    def probe(batches: Any) -> Any:  # nested: pickled by value, so it runs where sparza does not import
        import importlib

        import pyarrow as pa

        for _ in batches:
            pass
        problems = []
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # any import failure is the finding
                problems.append(f"{name!r} ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]})")
        yield pa.RecordBatch.from_pylist([{"problem": "; ".join(problems)}],
                                         schema=pa.schema([("problem", pa.string())]))

    rows = spark.range(0, 1, 1, 1).mapInArrow(probe, "problem string").collect()
    problem = next((r["problem"] for r in rows if r["problem"]), "")
    if problem:
        key = TASK_CLASS.key if TASK_CLASS.is_set(config) else APP_CLASS.key
        raise StartCheckError(PY_FILES_KEY, PY_FILES.raw(config), "", message=(
            f"executors on {target.description} cannot import {problem}: ship the code with {PY_FILES_KEY} "
            f"(build it with 'sparza package --config <job.yaml>'; {key} and sparza go in it) or install it on every "
            "executor"))
    probed.add(modules)
