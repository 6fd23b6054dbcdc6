"""The Python workers of a local session import pyspark from the installed package, not from Spark's source zip
(sparza.sparkdaemon), and a zip of any other Spark keeps its place."""

from __future__ import annotations

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
