"""Shared fixtures: one Azurite, one Kafka broker (Apache Kafka, KRaft), one SparkSession and one Spark Connect
server per test session, temp dirs.

Each is started lazily (only when a test asks for it) and torn down at the end of the session even when
tests fail.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparza.azure import StorageAccount
from sparza.devservers.kafka import KafkaBroker
from sparza.devservers.storage import AzuriteProcess

REPO = Path(__file__).resolve().parents[1]

# Every Spark driver the tests start (the shared session and each `sparza run` subprocess, through
# spark-submit, which reads this variable) compiles with C1 only and collects with the serial GC: a test's
# JVM lives seconds to minutes on a busy 2-core machine, where C2's compiler threads and the parallel GC's
# workers cost more CPU than they ever win back; a `sparza run --once` starts in about two thirds of the time.
# They also load Spark's classes from a class-data-sharing archive made once per checkout (tests/jvm_archive.py):
# a session starts in about half the time. What runs is unchanged; an explicit SPARK_SUBMIT_OPTS is kept.
if "SPARK_SUBMIT_OPTS" not in os.environ:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.jvm_archive import java_options

    os.environ["SPARK_SUBMIT_OPTS"] = java_options("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown to pytest without the plugin
def pytest_configure_node(node: Any) -> None:
    """Tell each xdist worker the controller's ``--dist``: a worker's own option is reset to ``no``
    (xdist/remote.py setup_config), so it cannot see that it runs under worksteal."""
    node.workerinput["sparza_dist"] = node.config.getoption("dist")


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (parametrized higher-scoped fixtures)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``make test`` (xdist ``--dist worksteal``), the known-long tests first, spread over the workers
    (tests/scheduling.py says why): the suite's tail otherwise is a long test met last by one worker."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or workerinput.get("sparza_dist") != "worksteal":
        return
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.scheduling import arrange, read_durations

    durations = read_durations()
    for item in items:
        # A test sharing a module- or class-scoped fixture stays with its module: moved away from it, it would
        # set the fixture up a second time (tests/demo's whole demo run).
        info = getattr(item, "_fixtureinfo", None)
        if item.nodeid in durations and info is not None and any(
                defs and defs[-1].scope in ("class", "module", "package") for defs in info.name2fixturedefs.values()):
            del durations[item.nodeid]
    items[:] = arrange([item.nodeid for item in items], items, durations, int(workerinput["workercount"]))


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteProcess]:
    """A session-wide Azurite on free loopback ports with its own data dir."""
    proc = AzuriteProcess(tmp_path_factory.mktemp("azurite"))
    proc.start()
    try:
        yield proc
    finally:
        proc.resume()
        proc.stop()


@pytest.fixture(scope="session")
def azurite_with_request_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteProcess]:
    """A second session-wide Azurite that logs every request it serves (``log_path``), for tests that compare
    sparza's own request counts with what the service saw."""
    with AzuriteProcess(tmp_path_factory.mktemp("azurite-logged"), request_log=True) as proc:
        yield proc


@pytest.fixture(scope="session")
def azure_account(azurite: AzuriteProcess) -> StorageAccount:
    """The Azurite account as a :class:`StorageAccount`."""
    return azurite.account


@pytest.fixture(scope="session")
def azure_connection_string(azurite: AzuriteProcess) -> str:
    """The Azurite connection string."""
    return azurite.connection_string


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A session-wide Apache Kafka broker (one KRaft node, quick to start) on free loopback ports, its log dir in
    the session's temp dir: one JVM per test session (per xdist worker)."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka"), quick=True) as proc:
        yield proc


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    """``127.0.0.1:<port>`` of the session's broker."""
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session-wide local[2] SparkSession."""
    from sparza.testing import local_spark_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = local_spark_session(**{"spark.sql.warehouse.dir": str(warehouse),
                                     "spark.local.dir": str(tmp_path_factory.mktemp("spark-local"))})
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def sparza_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``sparza package`` of sparza and ``examples``: what executors without the project import the jobs from."""
    from sparza.runtime.driver.packaging import build_package

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return build_package(tmp_path_factory.mktemp("package") / "sparza-job.zip", ["examples"]).path


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A session-wide Spark Connect server (local[2,4]) on a free loopback port, started from the installed
    pyspark, with its event log on. Its executors' Python does not see the project (no PYTHONPATH, no
    editable install, cwd outside the repo): jobs reach it only through ``job.py.files``."""
    from sparza.devservers.spark import SparkConnectServer, executor_python

    base = tmp_path_factory.mktemp("spark-connect")
    server = SparkConnectServer(base / "server", python=str(executor_python(base)), event_log=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def connect_spark(spark_connect_server: Any) -> Iterator[Any]:
    """One Spark Connect client session on the session's server (its Python workers are reused across tests)."""
    from sparza.runtime.driver.session import connect_session

    session = connect_session(spark_connect_server.url)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback server that accepts connections and never answers (storage that hangs)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/devstoreaccount1"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short lowercase name unique to the test (valid as a container or table name)."""
    import hashlib

    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
    return f"t{digest}"


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    """A fresh temp dir for the test."""
    return tmp_path
