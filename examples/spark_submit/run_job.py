"""Run a sparza job or application from a ``spark-submit`` script, on the session Spark gives the script.

Package sparza and the job's modules once, then submit this script with the package and the job's config::

    sparza package --config examples/keyed_count/job.yaml --output dist/keyed_count.zip
    spark-submit --master spark://spark-master:7077 --py-files dist/keyed_count.zip \\
        --files examples/keyed_count/job.yaml examples/spark_submit/run_job.py job.yaml --once

The same three lines work in a notebook whose ``spark`` already exists (Databricks, Synapse, Jupyter with
Spark Connect): ``sparza.run(config, spark=spark)``. ``sparza.run`` never stops a session it did not build;
this script built its own, so it stops it. The exit code is ``sparza run``'s (0 clean stop, 1 failed,
2 bad config, 3 another processor holds the job).
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import sparza


def main(argv: list[str]) -> int:
    """``run_job.py CONFIG [--once]``: run the job on this script's session and print its summary."""
    if not argv or argv[0].startswith("-"):
        print("usage: run_job.py CONFIG [--once]", file=sys.stderr)
        return 2
    spark = SparkSession.builder.appName("sparza-job").getOrCreate()
    config = argv[0]
    if not os.path.exists(config):  # shipped with --files: the driver finds it among Spark's files
        from pyspark import SparkFiles

        config = SparkFiles.get(os.path.basename(config))
    try:
        outcome = sparza.run(config, spark=spark, once="--once" in argv, raise_on_error=False)
    finally:
        spark.stop()
    print(f"sparza: {outcome.reason}; {outcome.batches} batch(es) committed"
          + (f"; {outcome.discards.describe()}" if outcome.discards else "")
          + (f"; error: {outcome.error}" if outcome.error else ""), file=sys.stderr)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
