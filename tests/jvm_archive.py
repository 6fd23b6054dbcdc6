"""A class-data-sharing archive of the Spark driver JVM's classes, so every Spark JVM of a test run starts faster.

Each test that runs ``sparza run`` starts a JVM that loads some 10,000 classes from Spark's jars before the
first batch; on this 2-core machine that is most of a run's start-up. A dynamic CDS archive (JDK 13+:
``-XX:ArchiveClassesAtExit`` once, then ``-XX:SharedArchiveFile``) holds those classes already parsed and
verified: measured here, a local session starts in about half the time and its first job in a fifth.

The archive is made once per checkout and Spark/Java install (``.sparza/jvm-archive/<key>.jsa``, about 150 MB)
by running the keyed-count example in both execution modes in one JVM, and reused by every later test run.
What runs is unchanged: the JVM checks the archive against its own build and classpath and, if it does not
match (another JDK, a changed jar, a JVM with another classpath), loads the classes from the jars as
before; its notices about that are turned off so no test sees them on stderr.

``python tests/jvm_archive.py DIR`` is the warm-up run (the conftest starts it with the dump option).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _key() -> str:
    """What the archive depends on: the java binary, the installed Spark jars, this Python."""
    import pyspark

    java = shutil.which("java") or ""
    jars = Path(pyspark.__file__).parent / "jars"
    parts = [os.path.realpath(java), os.environ.get("JAVA_HOME", ""), str(jars), sys.executable]
    with contextlib.suppress(OSError):
        parts.append(str(os.stat(os.path.realpath(java)).st_mtime_ns))
        parts += sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jars.iterdir())
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def java_options(base: str) -> str:
    """``base`` plus the options that use the archive (made first if missing); ``base`` alone when it cannot be
    made (no java, a failed warm-up run): a slower start, nothing else."""
    if shutil.which("java") is None:
        return base
    cache = REPO / ".sparza" / "jvm-archive"
    archive = cache / f"{_key()}.jsa"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the xdist workers and a second test run wait for the first maker
            if not archive.exists() and not (cache / f"{archive.stem}.failed").exists():
                _make(archive, base)
    except (OSError, subprocess.SubprocessError):  # a read-only checkout, a hung warm-up: start without it
        return base
    if not archive.exists():
        return base
    return f"{base} -XX:SharedArchiveFile={archive} {_QUIET}"


def _make(archive: Path, base: str) -> None:
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = dict(os.environ)
    env["SPARK_SUBMIT_OPTS"] = f"{base} -XX:ArchiveClassesAtExit={partial} {_QUIET}"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory(prefix="sparza-jvm-archive-") as work:
        result = subprocess.run([sys.executable, str(Path(__file__).resolve()), work], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=600, check=False)
    if result.returncode == 0 and partial.exists() and partial.stat().st_size > 0:
        partial.replace(archive)
        return
    partial.unlink(missing_ok=True)
    # Remembered, so a broken warm-up costs one run, not one per test session.
    archive.with_suffix(".failed").write_text(result.stdout[-4000:] + result.stderr[-4000:])


def _warm_up(root: Path) -> None:
    """The keyed-count example, ``--once``, in the container mode and then the micro-batch mode, in this JVM."""
    sys.path.insert(0, str(REPO))
    from examples.keyed_count.load import append_messages, create_streams
    from pyspark import SparkContext
    from tests.runtime.helpers import job_values

    import sparza
    from sparza.config import Config

    for mode in ("containers", "batches"):
        config = Config(job_values(root / mode, **{"job.execution.mode": mode}))
        create_streams(config, 2)
        append_messages(config, 200, 5, commit_size=100)
        sparza.run(config, master="local[2]", once=True)
    gateway = SparkContext._gateway
    if gateway is not None:  # the JVM writes the archive as it exits: wait for it
        proc = gateway.proc
        proc.stdin.close()
        proc.wait(timeout=300)


if __name__ == "__main__":
    _warm_up(Path(sys.argv[1]))
