"""The executor side of the runtime: what runs inside a Spark task.

:mod:`~sparza.runtime.container.runloop` is a container's run loop (the container mode);
:mod:`~sparza.runtime.container.executor` runs one task's batch (both modes);
:mod:`~sparza.runtime.container.instance` is ``TaskInstance`` (restore, process, commit of one task);
:mod:`~sparza.runtime.container.commit` the commit object; :mod:`~sparza.runtime.container.stores` a task's stores
across batches; :mod:`~sparza.runtime.container.worker` what a Python worker keeps between batches. Nothing here
imports the driver side.
"""
