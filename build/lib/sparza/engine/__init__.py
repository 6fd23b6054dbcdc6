"""The engine: Samza's container, task and commit, with no Spark in it.

A host (Spark's containers or micro-batches, Spark Connect, :class:`sparza.testing.TestRunner`) gives the engine
a job and the tasks to run; the engine plans each task's batches from its checkpoint
(:mod:`~sparza.engine.planner`), runs them (:mod:`~sparza.engine.instance`), commits them
(:mod:`~sparza.engine.commit`) and reports each one (:mod:`~sparza.engine.results`).
"""
