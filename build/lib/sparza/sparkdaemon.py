"""Spark's Python worker daemon (``pyspark.daemon``), importing pyspark from the installed package.

Spark starts every executor's Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) at
the head of ``PYTHONPATH``. With a pip-installed pyspark those zips hold the installed package's own sources,
without compiled files: the daemon and every worker it forks compile pyspark's modules from source again
(``import pyspark.daemon, pyspark.worker``: about 1.2-1.6 s from the zip, 0.2-0.5 s installed, on this
2-core machine). :func:`prefer_installed_pyspark` moves those zips behind the directory the same package is
installed in, so the installed copy (with its ``__pycache__``) is imported; zips of any other Spark stay
where they are. The code that runs is the same.

Sessions sparza builds on a ``local`` master, whose workers run this interpreter, use it through
``spark.python.daemon.module`` (:func:`sparza.runtime.driver.session.build_spark_session`). It imports
nothing but the standard library before ``pyspark.daemon``: the daemon forks its workers, and a thread
started before a fork (pyarrow starts some at import) could deadlock them.
"""

from __future__ import annotations

import os
import sys

__all__ = ["DAEMON_MODULE", "prefer_installed_pyspark"]

DAEMON_MODULE = "sparza.sparkdaemon"
"""The value of ``spark.python.daemon.module`` that runs this module."""


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` (a ``sys.path``) with each ``<site>/pyspark/python/lib/*.zip`` entry moved right behind ``<site>``
    when ``<site>`` is on ``path`` too and holds that package (pyspark, and py4j for its zip)."""
    out = list(path)
    for entry in path:
        lib = os.path.dirname(entry)
        name = os.path.basename(entry)
        if not (name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))):
            continue
        package_dir = os.path.dirname(os.path.dirname(lib))  # <site>/pyspark
        site = os.path.dirname(package_dir)
        if os.path.basename(package_dir) != "pyspark" or os.path.normpath(lib) != os.path.join(
                package_dir, "python", "lib"):
            continue
        installed = os.path.join(site, "pyspark" if name == "pyspark.zip" else "py4j", "__init__.py")
        sites = [i for i, p in enumerate(out) if p and os.path.normpath(p) == os.path.normpath(site)]
        if not sites or not os.path.isfile(installed):
            continue
        out.remove(entry)
        at = next(i for i, p in enumerate(out) if p and os.path.normpath(p) == os.path.normpath(site))
        out.insert(at + 1, entry)
    return out


if __name__ == "__main__":
    sys.path[:] = prefer_installed_pyspark(sys.path)
    from pyspark.daemon import manager

    manager()
