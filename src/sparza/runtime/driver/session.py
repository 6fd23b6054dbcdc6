"""Where a job's Spark work runs: a session built by sparza (``local[N]``, a cluster master, or Spark
Connect) or one the caller owns, what kind it is, and the job's code added to it.

The kind decides three things elsewhere: the batch loop (:mod:`sparza.runtime.driver.clientloop` on Spark
Connect, Structured Streaming otherwise), which local paths a config may use
(:func:`sparza.runtime.driver.preflight.check_deployment`), and how code and secrets reach executors
(:func:`add_py_files`, :mod:`sparza.runtime.secrets`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sparza.config import BOOL, LIST, STR, Config, define_key
from sparza.errors import ConfigError

__all__ = ["PY_FILES_KEY", "REMOTE_KEY", "SHARED_FS_KEY", "SparkTarget", "add_py_files", "build_spark_session",
           "connect_session", "is_connect", "planned_target", "py_files", "spark_target"]

_PKG = "runtime"
REMOTE_KEY = "spark.remote"
PY_FILES_KEY = "job.py.files"
SHARED_FS_KEY = "job.filesystem.shared"
SPARK_REMOTE = define_key(REMOTE_KEY, None, "Spark Connect URL (sc://host:port): run through a Spark Connect session "
                          "instead of building a SparkSession (--remote wins); spark.master must not be set with it.",
                          _PKG, kind=STR)
PY_FILES = define_key(PY_FILES_KEY, "", "Comma list of .zip/.whl/.py files (e.g. built by `sparza package`) added to "
                      "the session so executors import sparza and the job's modules: SparkContext.addPyFile, or "
                      "spark.addArtifacts(pyfile=True) on Spark Connect.", _PKG, kind=LIST)
SHARED_FS = define_key(SHARED_FS_KEY, False, "true: the local paths of this config (local blob store, local "
                       "checkpoints, local Delta streams, Avro schema files) are on a file system the driver and every "
                       "executor share (NFS, a dbfs:/ FUSE mount). Without it sparza refuses them on a cluster master "
                       "or Spark Connect.", _PKG, kind=BOOL)
SPARK_MASTER = define_key("spark.master", "local[*]", "The Spark master of a SparkSession sparza builds (--master "
                          "wins).", _PKG, kind=STR)
SPARK_LOG_LEVEL = define_key("spark.log.level", "ERROR", "Log level of a SparkSession sparza builds (WARN or lower "
                             "keeps Spark's log of a failed query).", _PKG, kind=STR)

# Spark's default redaction regex plus the words of sparza's secret keys (is_secret_key): a secret a user puts
# into a Spark setting (spark.executorEnv.AZURE_STORAGE_CONNECTION_STRING, spark.hadoop.fs.azure.account.key.*)
# is masked in the UI and the event log of sessions sparza builds.
_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|account[.]?key|connection[._]?string|sas|sensitive"


@dataclass(frozen=True)
class SparkTarget:
    """Where a session's executors run, as far as the driver can tell: ``local`` when they share this host
    (``local[N]``), ``connect`` for a Spark Connect session; ``description`` names it in messages."""

    description: str
    local: bool
    connect: bool = False


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (``pyspark.sql.connect``): no ``sparkContext``, no JVM."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _is_local_master(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


def planned_target(config: Config, master: str | None = None, remote: str | None = None) -> SparkTarget:
    """The target a session built from ``config`` (and ``--master``/``--remote``) will have, before it exists."""
    remote = remote or SPARK_REMOTE.get(config)
    if remote:
        return SparkTarget(f"Spark Connect {remote}", local=False, connect=True)
    chosen = master or SPARK_MASTER.get(config)
    return SparkTarget(chosen, local=_is_local_master(chosen))


def spark_target(spark: Any) -> SparkTarget:
    """The target of an existing session."""
    if is_connect(spark):
        return SparkTarget("Spark Connect", local=False, connect=True)
    master = str(spark.sparkContext.master)
    return SparkTarget(master, local=_is_local_master(master))


def py_files(config: Config) -> list[str]:
    """The files of ``job.py.files`` (absolute paths)."""
    return [os.path.abspath(p) for p in PY_FILES.get(config)]


_ADDED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def add_py_files(spark: Any, paths: Iterable[str]) -> None:
    """Add ``paths`` to the session's Python path on every executor (once per session and path)."""
    added = _ADDED.setdefault(spark, set())
    for path in paths:
        if path in added:
            continue
        if is_connect(spark):
            spark.addArtifacts(path, pyfile=True)
        else:
            spark.sparkContext.addPyFile(path)
        added.add(path)


def _warn_stderr(line: str) -> None:
    print(f"sparza: warning: {line}", file=sys.stderr, flush=True)


def build_spark_session(job: Any, master: str | None, app_name: str, remote: str | None = None,
                        warn: Callable[[str], None] | None = None) -> Any:
    """A session for the job (``job`` is a :class:`~sparza.engine.jobconfig.JobConfig`).

    With ``remote`` (or ``spark.remote``): a Spark Connect session; the ``spark.*`` keys the server lets a
    session set are set, the others are named in one warning (they belong to the server's config).
    Otherwise a SparkSession with the ``spark.*`` keys of the config, loopback binding (the UI too, when
    ``spark.ui.enabled``: see ``job.spark.ui.address``), quiet logs and secret-looking settings redacted;
    ``local[N]`` without a retry count becomes ``local[N,4]`` so a failed Spark task is retried (as on a
    cluster); the retry is exact (see :mod:`sparza.engine.executor`).
    """
    config: Config = job.config
    remote = remote or SPARK_REMOTE.get(config)
    if remote:
        return _connect_session(job, master, remote, warn or _warn_stderr)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    if job.spark_conf.get("spark.ui.enabled", "false").strip().lower() == "true":
        # Spark's UI binds to SPARK_LOCAL_IP, else to every interface: keep it on loopback unless configured.
        os.environ.setdefault("SPARK_LOCAL_IP", UI_ADDRESS.get(config))
    chosen = master or job.spark_conf.get("spark.master") or "local[*]"
    if chosen.startswith("local[") and "," not in chosen:
        chosen = chosen[:-1] + ",4]"
    options: dict[str, str] = {
        "spark.master": chosen, "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.redaction.regex": _REDACTION_REGEX,
        "spark.sql.streaming.stopTimeout": "120s",
        # An epoch that asks for more containers than there are slots fails in seconds, not after
        # Spark's default 40 checks 15 s apart (executors lost since the count was taken).
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "5"}
    python: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if _is_local_master(chosen) and os.environ.get("PYSPARK_PYTHON") == sys.executable:
        # The workers run this interpreter, which imports sparza: its daemon imports pyspark from the installed
        # package rather than compiling it again from Spark's source zip in every worker (sparza.sparkdaemon),
        # and so do the Python processes Spark starts without the daemon, which must connect back within a
        # fixed 10 s (sparza.sparkpython).
        from sparza.sparkdaemon import DAEMON_MODULE
        from sparza.sparkpython import local_python

        options["spark.python.daemon.module"] = DAEMON_MODULE
        python = local_python()
    if (not _is_local_master(chosen) and SHARED_FS.get(config) and not py_files(config)
            and "spark.executorEnv.PYTHONPATH" not in job.spark_conf):
        # A file system every host shares (job.filesystem.shared) holds the project at the driver's path too:
        # executors import task classes from the driver's import path. Otherwise the code travels in
        # job.py.files or is installed on the executors (checked at start: check_executor_imports).
        options["spark.executorEnv.PYTHONPATH"] = os.environ.get("PYTHONPATH", os.getcwd())
    for key, value in job.spark_conf.items():
        if key not in ("spark.master", REMOTE_KEY):
            options[key] = value
    packaged = py_files(config)
    if packaged:
        # Spark's driver-side Python runners (the streaming source's planner) run PYSPARK_PYTHON with the JVM's
        # PYTHONPATH, not with the files added by addPyFile: when that Python lacks the project (the executors'
        # Python on a cluster), the JVM started here must carry job.py.files on its PYTHONPATH.
        current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join([*(p for p in packaged if p not in current), *current])
    from sparza.interrupts import sigint_kept

    with sigint_kept(), python:  # the caller decides what Ctrl-C does (sparza.interrupts), not PySpark
        _start_jvm_ignoring_sigterm(options)
        spark = SparkSession.builder.config(map=dict[str, Any](options)).getOrCreate()
    level = SPARK_LOG_LEVEL.get(config)
    spark.sparkContext.setLogLevel(level)
    if level.upper() in ("ERROR", "FATAL", "OFF"):
        _quiet_query_failures(spark)
    return spark


def _start_jvm_ignoring_sigterm(options: dict[str, str]) -> None:
    """Start the session's JVM ignoring SIGTERM as well as SIGINT (unless a JVM is there already: a SparkContext,
    or ``spark-submit`` that started this driver), given ``options`` as the session's builder would give them.

    A SIGTERM to the driver's process group (``kill -TERM -<pgid>``, a supervisor stopping a group, a test's
    ``killpg``) otherwise reached the JVM too: it ran its shutdown hooks, the executors' Python workers died and
    the driver, finishing the running batch to commit it, found Spark gone. The driver alone decides when Spark
    stops (:mod:`sparza.interrupts`). The JVM stays in the driver's process group, so a SIGKILL to the group
    still ends both, and it still exits when the driver dies (it watches its stdin, the driver's pipe).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.java_gateway import launch_gateway

    from sparza.sparkpython import write_executable

    if (SparkContext._active_spark_context is not None or os.environ.get("PYSPARK_GATEWAY_PORT")
            or sys.platform == "win32" or options.get("spark.api.mode", "").lower() == "connect"):
        return
    submit = os.path.join(_find_spark_home(), "bin", "spark-submit")
    # An ignored signal stays ignored across exec (and the JVM then leaves SIGTERM alone, as PySpark's SIGINT);
    # Popen's executable runs the wrapper with spark-submit's arguments.
    wrapper = write_executable("spark-submit", submit, f"#!/bin/sh\ntrap '' TERM\nexec {shlex.quote(submit)} \"$@\"\n")
    conf = SparkConf().setAll(list(options.items()))
    SparkContext(conf=conf, gateway=launch_gateway(conf, popen_kwargs={"executable": wrapper}))


UI_ADDRESS_KEY = "job.spark.ui.address"
UI_ADDRESS = define_key(UI_ADDRESS_KEY, "127.0.0.1", "The address the Spark UI binds to when spark.ui.enabled is true "
                        "(given to the driver as SPARK_LOCAL_IP unless that is set); 0.0.0.0 for every interface.",
                        "sparza.runtime", kind=STR)


def _connect_session(job: Any, master: str | None, remote: str, warn: Callable[[str], None]) -> Any:
    if master or job.spark_conf.get("spark.master"):
        key = "--master" if master else "spark.master"
        raise ConfigError(key, master or job.spark_conf.get("spark.master"), "", message=(
            f"{key} and spark.remote ({remote}) are both set: a Spark Connect server decides where its work runs, so "
            f"remove {key} (or spark.remote to build a session yourself)"))
    _reachable(remote)
    try:
        spark = connect_session(remote)
    except Exception as exc:
        raise ConfigError(REMOTE_KEY, remote, "", message=(
            f"config key 'spark.remote' = {remote!r}: cannot open a Spark Connect session "
            f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}): check the "
            "URL (sc://host:port) and that the server runs")) from exc
    refused = []
    for key, value in job.spark_conf.items():
        if key in ("spark.master", REMOTE_KEY):
            continue
        try:
            spark.conf.set(key, value)
        except Exception:
            refused.append(key)
    if refused:
        warn(f"not applied to the Spark Connect session (set them on the server): {', '.join(sorted(refused))}")
    return spark


def _reachable(remote: str, timeout_s: float = 10.0) -> None:
    """Fail in seconds, naming the URL, when nothing accepts connections there: the Connect client itself
    retries an unreachable server for minutes before it reports anything."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(remote.split(";", 1)[0])
    if parsed.scheme != "sc" or not parsed.hostname:
        raise ConfigError(REMOTE_KEY, remote, "a Spark Connect URL like sc://host:15002")
    port = parsed.port or 15002
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(REMOTE_KEY, remote, "", message=(
            f"Spark Connect URL {remote!r} (--remote / spark.remote): cannot connect to {parsed.hostname}:{port} "
            f"({exc.strerror or exc}): check the URL and that the Spark Connect server runs")) from exc


def connect_session(remote: str) -> Any:
    """A new Spark Connect session on ``remote``, next to any classic session of this process.

    Built with Connect's own builder: ``SparkSession.builder.remote(...).getOrCreate()`` refuses when a
    classic session runs (SESSION_ALREADY_EXIST), returns an earlier Connect session even for another URL,
    and marks the whole process as Connect (``SPARK_CONNECT_MODE_ENABLED``), which reroutes
    ``pyspark.sql.functions`` of a classic session the caller also has."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    marked = "SPARK_CONNECT_MODE_ENABLED" in os.environ
    try:
        return ConnectSession.builder.remote(remote).create()
    finally:
        if not marked:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


_QUERY_LOGGERS = ("org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
                  "org.apache.spark.sql.execution.streaming.MicroBatchExecution")
"""Spark's loggers of a failed streaming query (by Spark version): sparza reports the failure itself."""


def _quiet_query_failures(spark: Any) -> None:
    """Turn off Spark's ERROR log of a terminated query (a JVM stack trace plus the Python one, ~70
    lines): :meth:`JobRunner.finish` reports the failure as one line and writes the whole text to a
    trace file. A ``spark.log.level`` of WARN or lower keeps Spark's log."""
    with contextlib.suppress(Exception):  # logging only: never fail a run over it
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.OFF
        for name in _QUERY_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
