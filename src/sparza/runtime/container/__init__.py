"""The Spark side of the container mode: the Spark task that hosts an engine container.

:mod:`~sparza.runtime.container.sparktask` is the ``mapInArrow`` function of a container's single-task Spark job; the
container it runs, its tasks, their batches and commits are the engine's (:mod:`sparza.engine`), which has no
Spark in it.
"""
