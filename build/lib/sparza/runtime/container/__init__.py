"""The Spark side of the container mode: the Spark task that hosts an engine container.

:mod:`~sparza.runtime.container.sparktask` is the barrier ``mapInArrow`` function of an epoch; the container it
runs, its tasks, their batches and commits are the engine's (:mod:`sparza.engine`), which has no Spark in it.
"""
