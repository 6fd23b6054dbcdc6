"""The Python workers of a local session import pyspark from the installed package, not from Spark's source zip
(sparza.sparkdaemon), and a zip of any other Spark keeps its place."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sparza.sparkdaemon import prefer_installed_pyspark


def _site(root: Path, *packages: str) -> Path:
    site = root / "site-packages"
    for package in packages:
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
    return site


def test_the_installed_packages_zips_move_behind_their_site_dir(tmp_path: Path) -> None:
    site = _site(tmp_path, "pyspark", "py4j")
    lib = site / "pyspark" / "python" / "lib"
    path = ["/work", str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), "/usr/lib/python311.zip",
            str(site), "/other"]
    assert prefer_installed_pyspark(path) == ["/work", "/usr/lib/python311.zip", str(site),
                                              str(lib / "py4j-0.10.9.9-src.zip"), str(lib / "pyspark.zip"), "/other"]


def test_zips_stay_when_the_package_is_not_installed_there_or_not_on_the_path(tmp_path: Path) -> None:
    site = _site(tmp_path, "pyspark")  # no py4j installed beside it
    lib = site / "pyspark" / "python" / "lib"
    other_spark = str(tmp_path / "spark-4.0" / "python" / "lib" / "pyspark.zip")  # a SPARK_HOME of its own
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), other_spark, str(site)]
    assert prefer_installed_pyspark(path) == [str(lib / "py4j-0.10.9.9-src.zip"), other_spark, str(site),
                                              str(lib / "pyspark.zip")]
    assert prefer_installed_pyspark(path[:3]) == path[:3]  # the site dir is not on the path: nothing moves


def _origin(batches: Any) -> Any:
    import pyarrow as pa
    import pyspark

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"file": pyspark.__file__}])


def test_a_local_sessions_workers_import_the_installed_pyspark(spark: Any) -> None:
    files = {row.file for row in spark.range(2, numPartitions=2).mapInArrow(_origin, "file string").collect()}
    assert files and all(".zip" not in f and f.endswith("__init__.py") for f in files), files


def test_the_streaming_source_runner_of_a_local_session_imports_the_installed_pyspark(spark: Any,
                                                                                      tmp_path: Path) -> None:
    """Spark starts the driver-side runner of a Python streaming source without its daemon, and it must connect
    back within a fixed 10 s: it runs the installed pyspark, not one compiled from Spark's source zip
    (sparza.sparkpython; "Python worker failed to connect back" on a loaded machine before)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    record = tmp_path / "runner.txt"

    class _Reader(DataSourceStreamReader):
        def __init__(self, path: str) -> None:
            self.path = path

        def initialOffset(self) -> dict:
            import pyspark

            with open(self.path, "a", encoding="utf-8") as out:  # runs in the runner process
                out.write(f"{os.getpid()} {pyspark.__file__}\n")
            return {"n": 0}

        def latestOffset(self) -> dict:
            return {"n": 1}

        def partitions(self, start: dict, end: dict) -> list:
            return [InputPartition(0)]

        def read(self, partition: Any) -> Any:
            yield (1,)

    class _Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "sparza_runner_origin"

        def schema(self) -> str:
            return "n int"

        def streamReader(self, schema: Any) -> _Reader:
            return _Reader(self.options["path"])

    spark.dataSource.register(_Source)
    query = (spark.readStream.format("sparza_runner_origin").option("path", str(record)).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    lines = record.read_text(encoding="utf-8").split("\n")[:-1]
    pid, origin = lines[0].split(" ", 1)
    assert int(pid) != os.getpid() and ".zip" not in origin and origin.endswith("__init__.py"), lines


def test_the_launcher_runs_the_module_asked_for_with_the_installed_pyspark(tmp_path: Path) -> None:
    """``<launcher> -m module args`` is ``python -m module args`` with Spark's zips behind the installed pyspark."""
    import subprocess
    import sys

    import pyspark

    from sparza.sparkpython import launcher

    zips = Path(pyspark.__file__).parent / "python" / "lib"
    (tmp_path / "probe.py").write_text("import sys, pyspark\nprint(pyspark.__file__, __name__, sys.argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, sorted(zips.glob("*.zip"))), str(tmp_path)])}
    run = subprocess.run([launcher(), "-m", "probe", "a", "b"], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert run.stdout.split() == [pyspark.__file__, "__main__", "['a',", "'b']"] and not run.stderr
    daemon = subprocess.run([launcher(), "-W", "error", "-c", "pass"], env=env, capture_output=True, text=True,
                            timeout=60, check=True)  # anything but -m runs the interpreter unchanged
    assert not daemon.stderr
    plain = subprocess.run([sys.executable, "-m", "probe"], env=env, capture_output=True, text=True, timeout=60,
                           check=True).stdout
    assert ".zip" in plain  # without it, Spark's zip comes first: the launcher is what changes that
