"""StandaloneJobCoordinator: the default, one processor owns every task and nothing is shared."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from sparza.coordination.jobmodel import JobModel
from sparza.coordination.listener import JobCoordinatorListener

__all__ = ["StandaloneJobCoordinator"]


class StandaloneJobCoordinator:
    """Gives all ``tasks`` to ``processor_id`` under version 1; needs no Azure.

    Use it when a job runs as a single processor (the default ``job.coordinator.factory``).
    """

    def __init__(self, processor_id: str, tasks: Iterable[str], listener: JobCoordinatorListener) -> None:
        self.processor_id = processor_id
        self._tasks = sorted(set(tasks))
        self._listener = listener
        self._lock = threading.Lock()
        self._model: JobModel | None = None

    @property
    def job_model(self) -> JobModel | None:
        """The model given to the listener (None before start / after stop)."""
        return self._model

    def start(self) -> None:
        """Hand every task to the listener at once."""
        with self._lock:
            if self._model is not None:
                return
            self._model = JobModel(1, {self.processor_id: list(self._tasks)})
        self._listener.on_new_job_model(self._model)

    def stop(self) -> None:
        """Expire the model and tell the listener the coordinator stopped."""
        with self._lock:
            model, self._model = self._model, None
        if model is not None:
            self._listener.on_job_model_expired()
        self._listener.on_coordinator_stop()
