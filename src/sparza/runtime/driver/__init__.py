"""The driver side of the runtime: one processor's SparkSession, its jobs, how their work is planned and run
(long-running containers, or micro-batches), and what it reports (status line, metrics, summary).

Modules: :mod:`~sparza.runtime.driver.runner` (``JobRunner``: one job from start to summary),
:mod:`~sparza.runtime.driver.application` (an application's stages together), :mod:`~sparza.runtime.driver.containers`
(the container mode), :mod:`~sparza.runtime.driver.source` and :mod:`~sparza.runtime.driver.clientloop`
(the micro-batch mode's Spark source and its Spark Connect loop), :mod:`~sparza.runtime.driver.report` (what a run
says), and the session, packaging, start checks, storage watch and coordinated-processor glue.
"""
